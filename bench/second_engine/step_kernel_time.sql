-- Per rank and ProfilerStep: the step's CPU duration, the GPU kernels its launch calls queued and their time, and
-- which rank was slowest in each step. One text for both engines: it keeps to the SQL DuckDB and Spark share.
-- Steps as tracekit's step_windows() (queries/lib/steps.sql): the ProfilerStep#N annotation of each rank (a cpu_op in
-- legacy traces; where a rank has two, the user_annotation, then the longest). A kernel belongs to the step whose CPU
-- window holds its launch call (a `launch` edge), as in tracekit's step_members(); communication kernels are those
-- named *nccl* / *rccl*: the part of communication_kernel() (queries/lib/categories.sql) the synth job it runs on
-- exercises.
with step_annotations as (
    select rank, id, ts as start_ns, ts + dur as end_ns, cast(substr(name, 14) as bigint) as step,
           row_number() over (partition by rank, name
                              order by kind = 'user_annotation' desc, dur desc, id) as preference
    from events
    where kind in ('user_annotation', 'cpu_op') and name like 'ProfilerStep#%' and dur is not null
),
steps as (
    select rank, step, start_ns, end_ns from step_annotations where preference = 1
),
launched as (
    select k.rank, k.dur, lower(k.name) like '%nccl%' or lower(k.name) like '%rccl%' as communication,
           c.ts as call_ns
    from events k
    join edges l on l.kind = 'launch' and l.rank = k.rank and l.dst = k.id
    join events c on c.rank = l.rank and c.id = l.src
    where k.kind = 'kernel'
),
per_step as (
    select s.rank, s.step, s.end_ns - s.start_ns as step_ns, count(l.dur) as kernels,
           coalesce(sum(l.dur), 0) as kernel_ns,
           coalesce(sum(case when l.communication then l.dur end), 0) as communication_ns
    from steps s
    left join launched l on l.rank = s.rank and l.call_ns >= s.start_ns and l.call_ns < s.end_ns
    group by s.rank, s.step, s.start_ns, s.end_ns
)
select step, rank, step_ns / 1e6 as step_ms, kernels, kernel_ns / 1e6 as kernel_ms,
       communication_ns / 1e6 as communication_ms,
       first_value(rank) over (partition by step order by step_ns desc, rank) as slowest_rank,
       step_ns / nullif(min(step_ns) over (partition by step), 0) as vs_fastest
from per_step
order by step, rank
