-- question: Where does GPU time go, per rank: computation, communication, memcpy, how much of it overlaps, and how long is the GPU idle?
-- inputs: events, edges, graph_kernels, ranks
-- includes: lib/launches, lib/names
-- columns:
--   rank: rank
--   category: computation, communication, memcpy, exposed_communication, exposed_memcpy, busy, idle, total, no_launcher_excluded
--   time_ms: ms, length of the union of the category's intervals (for no_launcher_excluded: summed durations)
--   percent: percent of total
--   op_count: GPU ops in the category (exposed_*: ops of the underlying category; busy, idle, total: all counted ops; no_launcher_excluded: ops left out)
-- notes: TraceLens's definitions. GPU ops are kernels, memcpys and memsets that have a launch edge: GPU work
--   without a launch call in the trace (queued before the profiling window) is left out and reported as
--   no_launcher_excluded. communication = communication kernels (NCCL/RCCL, DeepEP, NVSHMEM, custom all-reduce,
--   ...: communication_kernel in lib/categories.sql, docs/categories.md); memcpy = memcpy ops and device DMA kernels
--   (MTIA dma_request); computation = every other kernel and every memset (gpu_timeline_category). Each category
--   is the union of its ops' intervals over all streams and devices of the rank; exposed_communication =
--   communication minus computation; exposed_memcpy = memcpy minus computation minus communication; busy = union of
--   all; total = last end - first start of the counted ops; idle = total - busy. Computed by one sweep per rank over
--   +1/-1 boundary events carrying a count per category (window sums), so overlaps cost no pairwise joins.
--   Timestamps are exact integer ns (TraceLens uses float µs, so its figures differ in the last digits).
with gpu as materialized (select * from gpu_ops()),
categories as (  -- per distinct name: kernel names are long, and few
    select name, kind, timeline_category as category from gpu_op_categories()
),
ops as (
    select g.rank, g.start_ns, g.end_ns, g.dur, g.call_id is not null as launched, c.category
    from gpu g join categories c on c.name = g.name and c.kind = g.kind
),
counted as (select * from ops where launched),
boundaries as (
    select rank, start_ns as t, (category = 'computation')::int as d_comp, (category = 'communication')::int as d_comm,
           (category = 'memcpy')::int as d_memcpy
    from counted
    union all
    select rank, end_ns, -(category = 'computation')::int, -(category = 'communication')::int,
           -(category = 'memcpy')::int
    from counted
),
instants as (
    select rank, t, sum(d_comp) as d_comp, sum(d_comm) as d_comm, sum(d_memcpy) as d_memcpy
    from boundaries group by rank, t
),
segments as (
    -- [t, next t): how many ops of each category are running
    select rank, lead(t) over by_time - t as len,
           sum(d_comp) over by_time as comp, sum(d_comm) over by_time as comm, sum(d_memcpy) over by_time as memcpy
    from instants
    window by_time as (partition by rank order by t)
),
unions as (
    select rank,
           coalesce(sum(len) filter (where comp > 0), 0) as computation,
           coalesce(sum(len) filter (where comm > 0), 0) as communication,
           coalesce(sum(len) filter (where memcpy > 0), 0) as memcpy,
           coalesce(sum(len) filter (where comm > 0 and comp = 0), 0) as exposed_communication,
           coalesce(sum(len) filter (where memcpy > 0 and comp = 0 and comm = 0), 0) as exposed_memcpy,
           coalesce(sum(len) filter (where comp > 0 or comm > 0 or memcpy > 0), 0) as busy
    from segments group by rank
),
counts as (
    select rank,
           count(*) filter (where launched) as counted_ops,
           count(*) filter (where launched and category = 'computation') as computation_ops,
           count(*) filter (where launched and category = 'communication') as communication_ops,
           count(*) filter (where launched and category = 'memcpy') as memcpy_ops,
           count(*) filter (where not launched) as excluded_ops,
           coalesce(sum(dur) filter (where not launched), 0) as excluded_ns,
           coalesce(max(end_ns) filter (where launched) - min(start_ns) filter (where launched), 0) as total
    from ops group by rank
),
per_rank as (
    select r.rank, coalesce(u.computation, 0) as computation, coalesce(u.communication, 0) as communication,
           coalesce(u.memcpy, 0) as memcpy, coalesce(u.exposed_communication, 0) as exposed_communication,
           coalesce(u.exposed_memcpy, 0) as exposed_memcpy, coalesce(u.busy, 0) as busy,
           coalesce(c.total, 0) as total, coalesce(c.counted_ops, 0) as counted_ops,
           coalesce(c.computation_ops, 0) as computation_ops, coalesce(c.communication_ops, 0) as communication_ops,
           coalesce(c.memcpy_ops, 0) as memcpy_ops, coalesce(c.excluded_ops, 0) as excluded_ops,
           coalesce(c.excluded_ns, 0) as excluded_ns
    from ranks r
    left join unions u on u.rank = r.rank
    left join counts c on c.rank = r.rank
),
rows as (
    select rank, 1 as position, 'computation' as category, computation as ns, computation_ops as op_count, total from per_rank
    union all select rank, 2, 'communication', communication, communication_ops, total from per_rank
    union all select rank, 3, 'memcpy', memcpy, memcpy_ops, total from per_rank
    union all select rank, 4, 'exposed_communication', exposed_communication, communication_ops, total from per_rank
    union all select rank, 5, 'exposed_memcpy', exposed_memcpy, memcpy_ops, total from per_rank
    union all select rank, 6, 'busy', busy, counted_ops, total from per_rank
    union all select rank, 7, 'idle', total - busy, counted_ops, total from per_rank
    union all select rank, 8, 'total', total, counted_ops, total from per_rank
    union all select rank, 9, 'no_launcher_excluded', excluded_ns, excluded_ops, total from per_rank
)
select rank, category, ns / 1e6 as time_ms, 100 * ns / nullif(total, 0) as percent, op_count
from rows
order by rank, position
