-- question: How much did each measure change from baseline to candidate, and what are its per-step values on each side?
-- inputs: base_measures, cand_measures, metric_specs, coverage
-- columns:
--   key: struct of the section's key columns
--   rank: rank (null: all ranks together)
--   metric: measure name
--   base: baseline value (null: the key is absent from the baseline)
--   cand: candidate value; additive measures scaled by `coverage.scale` when the two sides hold different step counts
--   delta: cand - base, in the metric's unit (an absent side counts as 0)
--   percent_delta: 100 * delta / base (null when base is 0 or absent)
--   base_samples: the baseline's per-step values in its steady steps (null or empty: none)
--   cand_samples: the candidate's per-step values (never scaled: a step is a step whatever the step count)
--   direction: +1 larger is slower (times); -1 larger is faster (bandwidth); 0 no verdict (counts)
--   abs_floor: per-step shifts up to this (in the metric's unit) are never called
--   floor_percent: per-step shifts up to this percent of the value are never called (the host floor for host times)
-- notes: The verdict is decided from the per-step values by tracekit/diff/verdicts.py (a rank test and the confidence
--   interval of the per-step shift); this query only matches the keys of the two sides.
with cand as (
    select m.key, m.rank, m.metric, m.samples,
           m.value * case when s.aggregation = 'sum' then coalesce(v.scale, 1) else 1 end as value
    from cand_measures m
    join metric_specs s on s.metric = m.metric
    left join coverage v on v.rank is not distinct from m.rank
),
joined as (
    select coalesce(b.key, c.key) as key, coalesce(b.rank, c.rank) as rank, coalesce(b.metric, c.metric) as metric,
           b.value as base, c.value as cand, b.samples as base_samples, c.samples as cand_samples
    from base_measures b
    full join cand c on b.key is not distinct from c.key and b.rank is not distinct from c.rank and b.metric = c.metric
)
select j.key, j.rank, j.metric, j.base, j.cand, coalesce(j.cand, 0) - coalesce(j.base, 0) as delta,
       case when j.base <> 0 then 100 * (coalesce(j.cand, 0) - j.base) / abs(j.base) end as percent_delta,
       j.base_samples, j.cand_samples, s.direction, s.abs_floor, s.floor_percent
from joined j join metric_specs s on s.metric = j.metric
