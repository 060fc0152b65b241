-- question: What is each additive measure's total on one side of a diff, and what is its value in each steady step?
-- inputs: totals, step_values, steps
-- columns:
--   key: struct of the section's key columns (e.g. {name} for ops)
--   rank: rank (null: all ranks together)
--   metric: measure name (a column of the analysis, e.g. direct_kernel_ms)
--   value: total over the trace, in the metric's unit
--   samples: the measure's value in each of `steps` on that rank (all ranks: per step number, summed over ranks),
--     in step order; null when `steps` is empty (no per-step results)
-- notes: `steps` lists the (rank, step)s the per-step analyses cover, warm-up steps already left out. A key absent
--   from a step counts as 0 in that step (an op that ran in 3 of 6 steps varies), so every key of a rank has one
--   value per step.
with per_rank as (
    select key, rank, step, metric, sum(value) as v from step_values group by all
),
overall as (
    select key, null::integer as rank, step, metric, sum(value) as v from step_values group by key, step, metric
),
step_levels as (
    select rank, step from steps
    union all
    select distinct null::integer as rank, step from steps
),
filled as (
    select t.key, t.rank, t.metric, s.step, coalesce(v.v, 0)::double as v
    from totals t
    join step_levels s on s.rank is not distinct from t.rank
    left join (select * from per_rank union all select * from overall) v
           on v.key is not distinct from t.key and v.rank is not distinct from t.rank and v.metric = t.metric
          and v.step = s.step
)
select t.key, t.rank, t.metric, t.value::double as value, f.samples
from totals t
left join (select key, rank, metric, list(v order by step) as samples from filled group by all) f
       on f.key is not distinct from t.key and f.rank is not distinct from t.rank and f.metric = t.metric
