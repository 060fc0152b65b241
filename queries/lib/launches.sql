-- about: who launched which GPU work, as table macros shared by the analyses (defined once, used by several).
-- inputs: events, edges
-- includes: lib/categories
-- macros:
--   gpu_ops(): every kernel, memcpy and memset with its launch call (call_id, null when none is in the trace).
--   launch_op_ancestors(): for every launch call, each cpu_op above it on its thread (via nest edges), with
--     `innermost` marking the nearest one and `outermost_of_name` the outermost one of each name; carries the
--     call's GPU time. Found by a recursive CTE that climbs one tree level per iteration for all calls at once.
--   op_calls(): one row per cpu_op call: cpu time, self time, direct, subtree and owned subtree GPU time (and op
--     counts).
--   gpu_op_owners(): gpu_ops() plus the innermost enclosing cpu_op of the launch call (op_id, op_name).
--   op_rollup(by_shape): op_calls() summed per (rank, name) or per (rank, name, input_dims, input_type).
-- notes: Definitions (TraceLens's, checked on its reference CSVs): an op's direct kernel time is the summed duration of
-- the GPU ops (kernels, memcpys, memsets) whose launch call's innermost enclosing cpu_op is that op; its subtree
-- kernel time adds the direct time of every cpu_op below it. Self CPU time is the op's duration minus the
-- durations of its direct children on the thread (ops, runtime calls, Python frames alike), floored at 0.
-- A call nested in a call of the same name (aten::arange inside aten::arange) has its GPU ops in both subtrees:
-- its owned subtree time is 0, the outermost call of the name owns them. Totals over calls (op_rollup) sum owned
-- subtree time, so each GPU op counts once per name and a name's total never exceeds the GPU time under its calls.

create or replace macro gpu_ops() as table
    select g.rank, g.id, g.kind, g.name, g.device, g.stream, g.ts as start_ns,
           g.ts + coalesce(g.dur, 0) as end_ns, coalesce(g.dur, 0) as dur, l.src as call_id
    from events g
    left join edges l on l.kind = 'launch' and l.rank = g.rank and l.dst = g.id
    where g.kind in ('kernel', 'memcpy', 'memset') and g.ts is not null;

create or replace macro launch_op_ancestors() as table
    with recursive
    nest_up as materialized (
        select n.rank, n.dst as child, n.src as parent, p.id is not null as parent_is_op
        from edges n left join (select rank, id from events where kind = 'cpu_op') p on p.rank = n.rank and p.id = n.src
        where n.kind = 'nest'
    ),
    calls as materialized (
        select rank, call_id, count(*) as gpu_ops, count(*) filter (where kind = 'kernel') as kernels,
               sum(dur) as gpu_ns
        from gpu_ops() where call_id is not null
        group by rank, call_id
    ),
    climb(rank, call_id, node, node_is_op, ops_passed) as (
        select rank, call_id, call_id, false, 0 from calls
        union all
        select c.rank, c.call_id, u.parent, u.parent_is_op, c.ops_passed + u.parent_is_op::int
        from climb c join nest_up u on u.rank = c.rank and u.child = c.node
    )
    select c.rank, c.call_id, c.node as op_id, c.ops_passed = 1 as innermost,
           c.ops_passed = max(c.ops_passed) over (partition by c.rank, c.call_id, o.name) as outermost_of_name,
           k.gpu_ops, k.kernels, k.gpu_ns
    from climb c
    join calls k on k.rank = c.rank and k.call_id = c.call_id
    join events o on o.rank = c.rank and o.id = c.node
    where c.node_is_op;

create or replace macro op_calls() as table
    with attributed as (
        select rank, op_id,
               sum(gpu_ns) filter (where innermost) as direct_ns,
               sum(gpu_ops) filter (where innermost) as direct_gpu_ops,
               sum(kernels) filter (where innermost) as direct_kernels,
               sum(gpu_ns) as subtree_ns,
               sum(gpu_ns) filter (where outermost_of_name) as owned_subtree_ns,
               sum(gpu_ops) as subtree_gpu_ops,
               sum(kernels) as subtree_kernels
        from launch_op_ancestors()
        group by rank, op_id
    ),
    children as (
        select n.rank, n.src as id, sum(coalesce(c.dur, 0)) as children_ns
        from edges n join events c on c.rank = n.rank and c.id = n.dst
        where n.kind = 'nest'
        group by n.rank, n.src
    )
    select e.rank, e.id, e.name, e.pid, e.tid, e.ts, coalesce(e.dur, 0) as dur, e.input_dims, e.input_type,
           e.sequence_number, e.fwd_thread_id,
           greatest(coalesce(e.dur, 0) - coalesce(ch.children_ns, 0), 0) as self_ns,
           coalesce(a.direct_ns, 0) as direct_ns, coalesce(a.subtree_ns, 0) as subtree_ns,
           coalesce(a.owned_subtree_ns, 0) as owned_subtree_ns,
           coalesce(a.direct_gpu_ops, 0) as direct_gpu_ops, coalesce(a.direct_kernels, 0) as direct_kernels,
           coalesce(a.subtree_gpu_ops, 0) as subtree_gpu_ops, coalesce(a.subtree_kernels, 0) as subtree_kernels
    from events e
    left join attributed a on a.rank = e.rank and a.op_id = e.id
    left join children ch on ch.rank = e.rank and ch.id = e.id
    where e.kind = 'cpu_op';

create or replace macro gpu_op_owners() as table
    select g.*, a.op_id, o.name as op_name
    from gpu_ops() g
    left join (select rank, call_id, op_id from launch_op_ancestors() where innermost) a
           on a.rank = g.rank and a.call_id = g.call_id
    left join op_calls() o on o.rank = a.rank and o.id = a.op_id;

create or replace macro op_rollup(by_shape) as table
    with grouped as (
        select rank, name,
               if(by_shape, input_dims, null) as input_dims, if(by_shape, input_type, null) as input_type,
               count(*) as count,
               count(*) filter (where direct_gpu_ops > 0) as gpu_calls,
               sum(dur) / 1e6 as total_cpu_ms,
               sum(self_ns) / 1e6 as self_cpu_ms,
               sum(direct_ns) / 1e6 as direct_kernel_ms,
               sum(direct_ns) as direct_ns,  -- the shares below add integers: the same bits in any row order
               sum(owned_subtree_ns) / 1e6 as subtree_kernel_ms,
               avg(direct_ns) filter (where direct_gpu_ops > 0) / 1e3 as kernel_mean_us,
               median(direct_ns::double) filter (where direct_gpu_ops > 0) / 1e3 as kernel_median_us,
               min(direct_ns) filter (where direct_gpu_ops > 0) / 1e3 as kernel_min_us,
               max(direct_ns) filter (where direct_gpu_ops > 0) / 1e3 as kernel_max_us,
               sum(direct_gpu_ops)::bigint as direct_gpu_ops
        from op_calls()
        group by all
    )
    select rank, name, op_category(name) as category, input_dims, input_type,
           count, gpu_calls, total_cpu_ms, self_cpu_ms, direct_kernel_ms, subtree_kernel_ms,
           kernel_mean_us, kernel_median_us, kernel_min_us, kernel_max_us, direct_gpu_ops,
           100 * direct_ns / nullif(sum(direct_ns) over ranked, 0) as percent_kernel,
           100 * sum(direct_ns) over (ranked order by direct_kernel_ms desc, name, input_dims, input_type
                                      rows between unbounded preceding and current row)
               / nullif(sum(direct_ns) over ranked, 0) as cumulative_percent
    from grouped
    window ranked as (partition by rank)
    order by rank, direct_kernel_ms desc, name, input_dims, input_type;
