-- question: What is each additive measure's total on one side of a diff, and how much does it vary from step to step?
-- inputs: totals, step_values, step_counts
-- columns:
--   key: struct of the section's key columns (e.g. {name} for ops)
--   rank: rank (null: all ranks together)
--   metric: measure name (a column of the analysis, e.g. direct_kernel_ms)
--   value: total over the trace, in the metric's unit
--   spread_sd: standard deviation of the per-step values (null when the side has fewer than 2 steps)
--   spread_n: steps the side holds on that rank (all ranks: distinct steps)
-- notes: A key absent from a step counts as 0 in that step (an op that ran in 3 of 6 steps varies), and a key that
--   never appears inside a step has spread 0. All-ranks spread comes from per-step sums across ranks.
with per_rank as (
    select key, rank, metric, sum(value) as s1, sum(value * value) as s2
    from step_values group by all
),
overall as (
    select key, null::integer as rank, metric, sum(v) as s1, sum(v * v) as s2
    from (select key, step, metric, sum(value) as v from step_values group by all)
    group by all
),
moments as (select * from per_rank union all select * from overall)
select t.key, t.rank, t.metric, t.value::double as value,
       case when n.steps >= 2
            then sqrt(greatest(0, (coalesce(m.s2, 0) - coalesce(m.s1, 0) ^ 2 / n.steps) / (n.steps - 1)))
       end as spread_sd,
       n.steps as spread_n
from totals t
left join moments m on m.key is not distinct from t.key and m.rank is not distinct from t.rank and m.metric = t.metric
left join step_counts n on n.rank is not distinct from t.rank
