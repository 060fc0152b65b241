-- about: who launched which GPU work, as table macros shared by the analyses (defined once, used by several).
-- inputs: events, edges, graph_kernels
-- includes: lib/categories, lib/iterations
-- macros:
--   op_name_categories(): each distinct name of the events, of graph_kernels' captured ops and of the GPU ops'
--     owners (gpu_op_owners: a graph launch's owner name is made from its call's), null included, as
--     categorized_name, with its op_category (name_category): every name an op row or an owner can have, so the
--     analyses join it where they would call op_category (planned once, run once per name: lib/names.sql).
--   gpu_ops(): every kernel, memcpy and memset with its launch call (call_id, null when none is in the trace).
--   launch_op_ancestors(): for every launch call, each cpu_op above it on its thread (launch_ancestors()), with
--     `innermost` marking the nearest one and `outermost_of_name` the outermost one of each name; carries the
--     call's GPU time.
--   op_calls(): one row per cpu_op call: cpu time, self time, direct, subtree and owned subtree GPU time (and op
--     counts).
--   launch_ancestors(): for every launch call, each cpu_op above it on its thread (via nest edges), and each user
--     annotation and Python frame below the innermost of them (all of them where no cpu_op is above the call):
--     node, node_kind, depth (1 = the call's parent), ops_passed (cpu_ops from the call up to the node, inclusive),
--     and the call's GPU ops, kernels and GPU time (those of its GPU ops no graph capture owns). Found by a
--     recursive CTE that climbs one tree level per iteration for all calls at once; the other events it climbs
--     through (the Python frames between and above the ops: 93% of the rows on the H100 Qwen trace) are read by
--     no analysis and not kept.
--   gpu_op_owners(): gpu_ops() plus the innermost enclosing cpu_op of the launch call (op_id, op_name), and the
--     GPU op's owner by the first rule that applies: owner_id, owner_name, attribution (capture, op, annotation,
--     python_frame, graph_launch, none) and unowned_reason (see kernel_by_op). A replayed GPU op matched to its
--     graph's capture (graph_kernels) is owned by the captured owner: attribution capture, owner_name its name,
--     op_name too where that is an op, owner_id and op_id null (the owner is an event of the capture trace).
--   captured_calls(): one row per call of a captured owner a graph launch replayed (graph_kernels): name, shapes,
--     GPU time and GPU ops of the replayed GPU ops it owns; what op_rollup adds to the op calls.
--   op_rollup(by_shape): op_calls() summed per (rank, name) or per (rank, name, input_dims, input_type), plus the
--     GPU time no cpu_op owns: a row per other owner name (annotation, Python frame, graph launch; count = their
--     calls, CPU time = their durations, no self time or shapes) and a row per reason nothing owns it (name
--     `(no owner: REASON)`, category `unowned`, count = GPU ops); shares are of all the rank's GPU time.
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

create or replace macro launch_ancestors() as table
    with recursive
    -- the parent's kind as a one-byte code (1 cpu_op, 2 user_annotation, 3 python_function, 0 any other) through the
    -- recursion's rows (OWLv2: 288k rows in 34 iterations), its text only on the rows kept: 57 -> 44 ms of one thread
    nest_up as materialized (
        select n.rank, n.dst as child, n.src as parent,
               case p.kind when 'cpu_op' then 1 when 'user_annotation' then 2 when 'python_function' then 3
                           else 0 end::utinyint as parent_kind
        from edges n left join events p on p.rank = n.rank and p.id = n.src
        where n.kind = 'nest'
    ),
    -- a replayed GPU op its graph's capture owns (graph_kernels) is not the launching call's: its captured op has it
    calls as materialized (
        select g.rank, g.call_id, count(*) as gpu_ops, count(*) filter (where g.kind = 'kernel') as kernels,
               sum(g.dur) as gpu_ns
        from gpu_ops() g
        anti join (from graph_kernels where owner_kind <> 'none') k on k.rank = g.rank and k.id = g.id
        where g.call_id is not null
        group by g.rank, g.call_id
    ),
    climb(rank, call_id, node, node_kind, depth, ops_passed) as (
        select rank, call_id, call_id, 0::utinyint, 0, 0 from calls
        union all
        select c.rank, c.call_id, u.parent, u.parent_kind, c.depth + 1, c.ops_passed + (u.parent_kind = 1)::int
        from climb c join nest_up u on u.rank = c.rank and u.child = c.node
    )
    select c.rank, c.call_id, c.node,
           case c.node_kind when 1 then 'cpu_op' when 2 then 'user_annotation' else 'python_function' end as node_kind,
           c.depth, c.ops_passed, k.gpu_ops, k.kernels, k.gpu_ns
    from climb c
    join calls k on k.rank = c.rank and k.call_id = c.call_id
    where c.depth > 0 and (c.node_kind = 1 or (c.ops_passed = 0 and c.node_kind in (2, 3)));

create or replace macro launch_op_ancestors() as table
    with ops as (
        select c.rank, c.call_id, c.node, c.ops_passed, c.gpu_ops, c.kernels, c.gpu_ns, o.name
        from launch_ancestors() c
        join events o on o.rank = c.rank and o.id = c.node
        where c.node_kind = 'cpu_op'
    )
    -- the outermost of each name by a grouped maximum joined back: with a window partitioned by (rank, call_id,
    -- name), a few rows each, the macro took 0.024 s on OWLv2 against 0.019 (SD3.5: 0.036 against 0.025)
    select o.rank, o.call_id, o.node as op_id, o.ops_passed = 1 as innermost,
           o.ops_passed = m.outermost as outermost_of_name, o.gpu_ops, o.kernels, o.gpu_ns
    from ops o
    join (select rank, call_id, name, max(ops_passed) as outermost from ops group by all) m
        on m.rank = o.rank and m.call_id = o.call_id and m.name is not distinct from o.name;

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
    with goo_gpu as materialized (select * from gpu_ops()),
    goo_ancestors as materialized (
        select a.rank, a.call_id, a.node, a.node_kind, a.depth
        from launch_ancestors() a
        join events e on e.rank = a.rank and e.id = a.node
        where (a.node_kind = 'cpu_op' and a.ops_passed = 1)
           or (a.ops_passed = 0 and a.node_kind in ('user_annotation', 'python_function')
               and iteration_marker(e.kind, e.name) is null and not starts_with(e.name, '<built-in'))
    ),
    goo_host_owner as (
        select rank, call_id, node as owner_id,
               case node_kind when 'cpu_op' then 'op' when 'user_annotation' then 'annotation' else 'python_frame' end
                   as attribution
        from goo_ancestors
        qualify row_number() over (partition by rank, call_id order by node_kind = 'cpu_op' desc, depth) = 1
    ),
    -- graph launches: calls that launched several GPU ops, or a *GraphLaunch call; a graph is known by the names of
    -- its GPU ops in order, numbered per rank by its first launch (the names strung in order for those calls only,
    -- found first: stringing them for every call took SD3.5's aggregation 0.049 s against 0.022, where nearly every
    -- call launches one kernel)
    goo_graph_call_ids as (
        select g.rank, g.call_id
        from goo_gpu g join events c on c.rank = g.rank and c.id = g.call_id
        group by g.rank, g.call_id
        having count(*) > 1 or bool_or(c.name like '%GraphLaunch%')
    ),
    goo_graph_calls as (
        select g.rank, g.call_id, any_value(c.name) as call_name, count(*) filter (where g.kind = 'kernel') as kernels,
               md5(string_agg(g.name, chr(31) order by g.start_ns, g.id)) as signature, min(c.ts) as call_ts
        from goo_gpu g
        semi join goo_graph_call_ids k on k.rank = g.rank and k.call_id = g.call_id
        join events c on c.rank = g.rank and c.id = g.call_id
        group by g.rank, g.call_id
    ),
    goo_graphs as (
        select *, dense_rank() over (partition by rank order by first_ts, signature) as graph
        from (select *, min(call_ts) over (partition by rank, signature) as first_ts from goo_graph_calls)
    ),
    goo_owned as (
        select g.*, h.owner_id as host_owner_id, h.attribution as host_attribution, gr.graph, gr.kernels,
               gr.call_name, ck.op_name as captured_owner, ck.owner_kind as captured_kind
        from goo_gpu g
        left join goo_host_owner h on h.rank = g.rank and h.call_id = g.call_id
        left join goo_graphs gr on gr.rank = g.rank and gr.call_id = g.call_id
        left join graph_kernels ck on ck.rank = g.rank and ck.id = g.id and ck.owner_kind <> 'none'
    )
    select o.rank, o.id, o.kind, o.name, o.device, o.stream, o.start_ns, o.end_ns, o.dur, o.call_id,
           if(o.host_attribution = 'op' and o.captured_owner is null, o.host_owner_id, null) as op_id,
           case when o.captured_owner is not null then if(o.captured_kind = 'op', o.captured_owner, null)
                when o.host_attribution = 'op' then e.name end as op_name,
           if(o.captured_owner is null, coalesce(o.host_owner_id, if(o.graph is not null, o.call_id, null)), null)
               as owner_id,
           case when o.captured_owner is not null then o.captured_owner
                when o.host_owner_id is not null then e.name
                when o.graph is not null
                    then printf('%s[graph %d, %d kernels]', o.call_name, o.graph, o.kernels) end as owner_name,
           case when o.captured_owner is not null then 'capture'
                else coalesce(o.host_attribution, if(o.graph is not null, 'graph_launch', 'none')) end as attribution,
           case when o.call_id is null then 'no launch call in the trace'
                when o.captured_owner is null and o.host_owner_id is null and o.graph is null
                    then 'launch call outside every op, annotation and Python frame' end as unowned_reason
    from goo_owned o
    left join events e on e.rank = o.rank and e.id = o.host_owner_id;

-- a captured owner's call is one (launch, capture file, owner) triple: each launch replays each captured call once
create or replace macro captured_calls() as table
    select k.rank, k.op_name as name, k.input_dims, k.input_type, sum(coalesce(g.dur, 0)) as direct_ns,
           count(*) as direct_gpu_ops, count(*) filter (where g.kind = 'kernel') as direct_kernels
    from graph_kernels k
    join events g on g.rank = k.rank and g.id = k.id
    where k.owner_kind <> 'none'
    group by k.rank, k.launch, k.capture_file, k.op_call, k.op_name, k.input_dims, k.input_type;

create or replace macro op_name_categories() as table
    select categorized_name, op_category(categorized_name) as name_category
    from (select name as categorized_name from events union select op_name from graph_kernels
          union select owner_name from gpu_op_owners());

create or replace macro op_rollup(by_shape) as table
    with calls as (
        select rank, name, input_dims, input_type, dur, self_ns, direct_ns, owned_subtree_ns, direct_gpu_ops
        from op_calls()
        union all
        -- replayed calls of captured owners: no CPU time of their own in the replay; their subtree is their own
        select rank, name, input_dims, input_type, 0, 0, direct_ns, direct_ns, direct_gpu_ops from captured_calls()
    ),
    grouped as (
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
        from calls
        group by all
    ),
    -- GPU time no cpu_op owns: its owners (annotations, Python frames, graph launches), one row per name; what no
    -- rule owns, one row per reason; so the rows add up to all of the rank's GPU time
    other_owned as (
        select o.rank, coalesce(o.owner_name, '(no owner: ' || o.unowned_reason || ')') as name,
               o.owner_id, sum(o.dur) as direct_ns, count(*) as gpu_ops, any_value(e.dur) as owner_dur
        from gpu_op_owners() o
        left join events e on e.rank = o.rank and e.id = o.owner_id
        where o.attribution not in ('op', 'capture')
        group by o.rank, 2, o.owner_id
    ),
    other_grouped as (
        select rank, name, null::varchar as input_dims, null::varchar as input_type,
               if(bool_and(owner_id is null), sum(gpu_ops), count(*))::bigint as count,
               if(bool_and(owner_id is null), sum(gpu_ops), count(*))::bigint as gpu_calls,
               sum(owner_dur) / 1e6 as total_cpu_ms, null::double as self_cpu_ms,
               sum(direct_ns) / 1e6 as direct_kernel_ms, sum(direct_ns) as direct_ns,
               sum(direct_ns) / 1e6 as subtree_kernel_ms,
               if(bool_and(owner_id is null), null, avg(direct_ns) / 1e3) as kernel_mean_us,
               if(bool_and(owner_id is null), null, median(direct_ns::double) / 1e3) as kernel_median_us,
               if(bool_and(owner_id is null), null, min(direct_ns) / 1e3) as kernel_min_us,
               if(bool_and(owner_id is null), null, max(direct_ns) / 1e3) as kernel_max_us,
               sum(gpu_ops)::bigint as direct_gpu_ops, bool_and(owner_id is null) as unowned
        from other_owned
        group by rank, name
    ),
    all_grouped as (
        select *, false as unowned from grouped
        union all by name
        select * from other_grouped
    )
    select rank, name, if(unowned, 'unowned', n.name_category) as category, input_dims, input_type,
           count, gpu_calls, total_cpu_ms, self_cpu_ms, direct_kernel_ms, subtree_kernel_ms,
           kernel_mean_us, kernel_median_us, kernel_min_us, kernel_max_us, direct_gpu_ops,
           100 * direct_ns / nullif(sum(direct_ns) over ranked, 0) as percent_kernel,
           100 * sum(direct_ns) over (ranked order by direct_kernel_ms desc, name, input_dims, input_type
                                      rows between unbounded preceding and current row)
               / nullif(sum(direct_ns) over ranked, 0) as cumulative_percent
    from all_grouped
    left join op_name_categories() n on n.categorized_name is not distinct from all_grouped.name
    window ranked as (partition by rank)
    order by rank, direct_kernel_ms desc, name, input_dims, input_type;
