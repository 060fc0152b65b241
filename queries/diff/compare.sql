-- question: How much did each measure change from baseline to candidate, and is the change beyond run-to-run noise?
-- inputs: base_measures, cand_measures, metric_specs, coverage, settings
-- columns:
--   key: struct of the section's key columns
--   rank: rank (null: all ranks together)
--   metric: measure name
--   base: baseline value (null: the key is absent from the baseline)
--   cand: candidate value; additive measures scaled by `coverage.scale` when the two sides hold different step counts
--   delta: cand - base, in the metric's unit (an absent side counts as 0)
--   percent_delta: 100 * delta / base (null when base is 0 or absent)
--   noise: smallest |delta| that is called a change, in the metric's unit
--   verdict: added, removed, slower, faster, unchanged; null for measures with no better direction (counts)
-- notes: Standard error of a side's value from its per-step spread sd over n steps: sum over steps sd*sqrt(n),
--   mean sd/sqrt(n), median 1.2533*sd/sqrt(n) (for medians and step breakdowns tracekit passes a robust sd:
--   1.4826 * MAD). A side without a spread borrows the other side's sd (the same configuration is assumed to be as
--   noisy). With a spread: noise = max(t * sqrt(se_base^2 + se_cand^2),
--   floor_percent of the larger value, the metric's absolute floor), where t is the Student t quantile with the
--   Welch-Satterthwaite degrees of freedom at the two-sided tail probability of k normal sigmas (k = 3: 0.27%), so
--   that few steps (a poorly known spread) do not multiply false verdicts; t -> k as the steps grow (6 steps per
--   side: t = 3.96). t comes from the Cornish-Fisher expansion of Abramowitz & Stegun 26.7.5 (within 1% for 4+
--   degrees of freedom, an underestimate below). Without a spread on either side (single-step traces):
--   noise = max(threshold_percent of |base|, absolute floor). direction +1: larger is slower (times); -1: larger is
--   faster (bandwidth); 0: no verdict.
with cand as (
    select m.key, m.rank, m.metric,
           m.value * case when s.aggregation = 'sum' then coalesce(v.scale, 1) else 1 end as value,
           m.spread_sd, m.spread_n,
           case when s.aggregation = 'sum' then coalesce(v.scale, 1) else 1 end as scale
    from cand_measures m
    join metric_specs s on s.metric = m.metric
    left join coverage v on v.rank is not distinct from m.rank
),
joined as (
    select coalesce(b.key, c.key) as key, coalesce(b.rank, c.rank) as rank, coalesce(b.metric, c.metric) as metric,
           b.value as base, c.value as cand,
           coalesce(b.spread_sd, c.spread_sd) as sd_base, coalesce(b.spread_n, 1) as n_base,
           coalesce(c.spread_sd, b.spread_sd) as sd_cand, coalesce(c.spread_n, 1) as n_cand,
           -- degrees of freedom of each side's sd: its own steps, or the lender's
           case when b.spread_sd is not null then b.spread_n else c.spread_n end - 1 as dof_base,
           case when c.spread_sd is not null then c.spread_n else b.spread_n end - 1 as dof_cand,
           coalesce(c.scale, 1) as scale
    from base_measures b
    full join cand c on b.key is not distinct from c.key and b.rank is not distinct from c.rank and b.metric = c.metric
),
variances as (
    select j.*, s.direction, s.abs_floor,
           case s.aggregation
               when 'sum' then sd_base ^ 2 * n_base
               when 'mean' then sd_base ^ 2 / n_base
               when 'median' then 1.2533 ^ 2 * sd_base ^ 2 / n_base
           end as var_base,
           case s.aggregation
               when 'sum' then (sd_cand * scale) ^ 2 * n_cand
               when 'mean' then sd_cand ^ 2 / n_cand
               when 'median' then 1.2533 ^ 2 * sd_cand ^ 2 / n_cand
           end as var_cand
    from joined j join metric_specs s on s.metric = j.metric
),
errors as (
    select v.*, sqrt(var_base + var_cand) as se, p.k as z,
           case when var_base + var_cand > 0
                then greatest(1, (var_base + var_cand) ^ 2 / (var_base ^ 2 / dof_base + var_cand ^ 2 / dof_cand))
                else 1e9 end as dof
    from variances v, settings p
),
judged as (
    select e.*, coalesce(cand, 0) - coalesce(base, 0) as delta,
           case when se is not null
                then greatest((z + (z ^ 3 + z) / (4 * dof) + (5 * z ^ 5 + 16 * z ^ 3 + 3 * z) / (96 * dof ^ 2)
                               + (3 * z ^ 7 + 19 * z ^ 5 + 17 * z ^ 3 - 15 * z) / (384 * dof ^ 3)
                               + (79 * z ^ 9 + 776 * z ^ 7 + 1482 * z ^ 5 - 1920 * z ^ 3 - 945 * z) / (92160 * dof ^ 4))
                              * se,
                              p.floor_percent / 100 * greatest(abs(base), abs(cand)), abs_floor)
                else greatest(p.threshold_percent / 100 * abs(base), abs_floor)
           end as noise
    from errors e, settings p
)
select key, rank, metric, base, cand, delta,
       case when base <> 0 then 100 * delta / abs(base) end as percent_delta,
       noise,
       case when base is null then 'added'
            when cand is null then 'removed'
            when direction = 0 then null
            when abs(delta) <= noise then 'unchanged'
            when delta * direction > 0 then 'slower'
            else 'faster'
       end as verdict
from judged
