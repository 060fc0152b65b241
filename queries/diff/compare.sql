-- question: How much did each measure change from the baseline to the candidate, and is the change beyond run-to-run noise?
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
--   mean sd/sqrt(n), median 1.2533*sd/sqrt(n). A side without a spread borrows the other side's sd (the same
--   configuration is assumed to be as noisy). With a spread: noise = max(k * sqrt(se_base^2 + se_cand^2),
--   floor_percent of the larger value, the metric's absolute floor). Without one on either side (single-step traces):
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
           coalesce(c.scale, 1) as scale
    from base_measures b
    full join cand c on b.key is not distinct from c.key and b.rank is not distinct from c.rank and b.metric = c.metric
),
errors as (
    select j.*, s.direction, s.abs_floor,
           case s.aggregation
               when 'sum' then sqrt((sd_base ^ 2) * n_base + (sd_cand * scale) ^ 2 * n_cand)
               when 'mean' then sqrt(sd_base ^ 2 / n_base + sd_cand ^ 2 / n_cand)
               when 'median' then 1.2533 * sqrt(sd_base ^ 2 / n_base + sd_cand ^ 2 / n_cand)
           end as se
    from joined j join metric_specs s on s.metric = j.metric
),
judged as (
    select e.*, coalesce(cand, 0) - coalesce(base, 0) as delta,
           case when se is not null
                then greatest(p.k * se, p.floor_percent / 100 * greatest(abs(base), abs(cand)), abs_floor)
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
