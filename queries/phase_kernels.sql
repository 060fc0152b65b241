-- question: Which kernels take the most GPU time in each phase (prefill, decode, mixed) of a serving engine's
--   iterations, per rank?
-- inputs: events, edges, graph_kernels
-- includes: lib/steps, lib/names
-- columns:
--   rank: rank
--   phase: prefill, decode, mixed, or unknown (steps.phase; the marker does not say)
--   place: 1 for the kernel with the most time in the phase, 2, ... (the first 10 are listed)
--   kernel_name: GPU op name
--   category: kernel category (kernel_category in lib/categories.sql)
--   count: GPU ops of that name in the phase's iterations
--   total_ms: ms, their summed durations
--   per_iteration_us: µs, total_ms per iteration of the phase
--   percent: percent of the phase's summed GPU op durations
-- notes: A GPU op is in an iteration as step_members() says (its launch call's step). Every iteration counts
--   (warm-up included): this ranks kernels, it does not time steps.
with iterations as materialized (
    select rank, step, coalesce(phase, 'unknown') as phase from step_windows() where marker <> 'profiler_step'
),
members as (
    select m.rank, i.phase, g.name, g.kind, g.dur
    from step_members(iterations_only := true) m
    join iterations i on i.rank = m.rank and i.step = m.step
    join gpu_ops() g on g.rank = m.rank and g.id = m.id
),
per_kernel as (
    select rank, phase, name, any_value(kind) as kind, count(*) as count, sum(dur) as ns
    from members
    group by rank, phase, name
),
ranked as (
    select p.*, row_number() over (partition by p.rank, p.phase order by p.ns desc, p.name) as place,
           100 * p.ns / nullif(sum(p.ns) over (partition by p.rank, p.phase), 0) as percent,
           p.ns / 1e3 / (select count(*) from iterations i where i.rank = p.rank and i.phase = p.phase)
               as per_iteration_us
    from per_kernel p
)
select r.rank, r.phase, r.place, r.name as kernel_name, c.category, r.count, r.ns / 1e6 as total_ms,
       r.per_iteration_us, r.percent
from ranked r
left join gpu_op_categories() c on c.name is not distinct from r.name and c.kind = r.kind
where r.place <= 10
order by r.rank, array_position(['prefill', 'mixed', 'decode', 'unknown'], r.phase), r.place
