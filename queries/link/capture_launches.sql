-- question: In a capture trace, which GPU work did each captured CUDA/HIP graph launch, in order, and under which
--   op (name, shapes) and module stack was each of those launch calls made?
-- inputs: events, edges, ranks
-- includes: lib/iterations
-- columns:
--   rank: rank (of the capture trace)
--   capture_file: the capture trace file
--   graph: the captured graph: its capture region (a *StreamBeginCapture call .. the next *StreamEndCapture on its
--     thread), numbered from 1 in start order per rank
--   position: index of the launch call among the graph's launch calls, from 0, in call order
--   call_id: events.id of the launch call (in the capture trace)
--   kind: what it enqueued: kernel, memcpy or memset (from the call's name)
--   kernel_name: args.kernel of the call (HIP records it; CUDA does not: null)
--   owner_kind: op, annotation, python_frame or none (the rule of gpu_op_owners() in lib/launches.sql)
--   op_call: events.id of the owner
--   op_name: the owner's name
--   input_dims: the owner's Input Dims (JSON)
--   input_type: the owner's Input type (JSON)
--   module: innermost `nn.Module: ...` Python frame enclosing the call
--   module_stack: JSON list of the enclosing `nn.Module: ...` frames, outermost first
-- notes: Run over a capture trace's own tables (tracekit.link.graph_capture), not the replay's. During capture no
--   GPU work runs, so the launch calls are the only record of the graph's nodes; they are the runtime and driver
--   calls of the capturing thread inside the region whose name says they enqueue work (launch...kernel, memcpy,
--   memset). Runtime calls CUPTI could not name (`INVALID`, e.g. stream capture queries) enqueue nothing and are left
--   out. The owner is found as without a capture: the innermost cpu_op enclosing the call, else the innermost
--   annotation or Python frame that is no iteration marker nor built-in frame.
with begins as (
    select rank, id, pid, tid, ts from events
    where kind in ('runtime', 'driver') and regexp_matches(name, 'StreamBeginCapture')
),
ends as (
    select rank, pid, tid, ts from events
    where kind in ('runtime', 'driver') and regexp_matches(name, 'StreamEndCapture')
),
regions as (
    select b.rank, b.pid, b.tid, b.ts as begin_ts, e.ts as end_ts,
           row_number() over (partition by b.rank order by b.ts, b.id)::integer as graph
    from begins b asof join ends e on e.rank = b.rank and e.pid = b.pid and e.tid = b.tid and e.ts >= b.ts
),
calls as materialized (
    select r.rank, r.graph, c.id as call_id, c.ts,
           case when regexp_matches(c.name, '(?i)memset') then 'memset'
                when regexp_matches(c.name, '(?i)memcpy') then 'memcpy' else 'kernel' end as kind,
           json_extract_string(c.args, '$.kernel') as kernel_name
    from regions r
    join events c on c.rank = r.rank and c.pid = r.pid and c.tid = r.tid and c.ts > r.begin_ts and c.ts < r.end_ts
    where c.kind in ('runtime', 'driver') and regexp_matches(c.name, '(?i)(launch.*kernel|memcpy|memset)')
),
climb as materialized (
    with recursive up(rank, call_id, node, depth) as (
        select rank, call_id, call_id, 0 from calls
        union all
        select u.rank, u.call_id, n.src, u.depth + 1
        from up u join edges n on n.kind = 'nest' and n.rank = u.rank and n.dst = u.node
    )
    select u.rank, u.call_id, u.node, u.depth, e.kind, e.name, e.input_dims, e.input_type
    from up u join events e on e.rank = u.rank and e.id = u.node
    where u.depth > 0
),
owners as (
    select rank, call_id, node as op_call, name as op_name, input_dims, input_type,
           case kind when 'cpu_op' then 'op' when 'user_annotation' then 'annotation' else 'python_frame' end
               as owner_kind
    from climb
    where kind = 'cpu_op'
       or (kind in ('user_annotation', 'python_function') and iteration_marker(kind, name) is null
           and not starts_with(name, '<built-in'))
    qualify row_number() over (partition by rank, call_id order by kind = 'cpu_op' desc, depth) = 1
),
modules as (
    select rank, call_id, arg_min(name, depth) as module, to_json(list(name order by depth desc))::varchar as module_stack
    from climb
    where kind = 'python_function' and starts_with(name, 'nn.Module: ')
    group by rank, call_id
)
select c.rank, k.source_file as capture_file, c.graph,
       (row_number() over (partition by c.rank, c.graph order by c.ts, c.call_id) - 1)::integer as position,
       c.call_id, c.kind, c.kernel_name, coalesce(o.owner_kind, 'none') as owner_kind, o.op_call, o.op_name,
       o.input_dims, o.input_type, m.module, m.module_stack
from calls c
join ranks k on k.rank = c.rank
left join owners o on o.rank = c.rank and o.call_id = c.call_id
left join modules m on m.rank = c.rank and m.call_id = c.call_id
order by c.rank, c.graph, position
