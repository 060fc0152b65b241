-- question: What must each Chakra ET node wait for (its ctrl_deps and data_deps), and why?
-- inputs: events, edges, et_nodes, chakra_owners, chakra_nodes
-- columns:
--   rank: rank
--   src: node id depended on
--   dst: node id that depends on it
--   dep: ctrl (ctrl_deps) or data (data_deps)
--   reason: launch, stream, sync, thread, collective or et_data (the first of these that gave the pair)
--   forward: true when src starts before dst (by start, then id); false ones are left out of the file
-- notes: ctrl_deps, each from one kind of evidence:
--   launch: the node of the launching call → the GPU op it launched (launch edges);
--   stream: a GPU op → the next op on its stream (stream edges);
--   sync: a GPU op → what waited for it (sync edges): a GPU op (Stream Wait Event), or the host node of the call
--     that waited when that node started after the GPU op, else (the node launched the op and waited inside
--     itself) the first host node of that thread starting at or after the GPU op ended;
--   thread: a host node → the next host node of its thread (the nest structure: outermost ops in order);
--   collective: for a communication kernel, on every other stream of its device, the last GPU op launched before the
--     collective's launch call (PyTorch makes the NCCL stream wait for the work queued before the call).
--   data_deps: et_data edges of an Execution Trace, between the nodes their ET nodes' linked events fold into.
--   A dependency is written only when src starts before dst (`forward`), which keeps every file acyclic; the
--   backward ones come from a node waiting inside itself or sub-µs clock skew between host and GPU.
with
node_of as materialized (
    select rank, id, node from chakra_owners
    union all
    select rank, id, id from chakra_nodes where not is_cpu_op
),
-- Each join below is between two relations, in a materialized CTE of its own: left to the join-order
-- optimizer, DuckDB 2.0.1 paired nodes by rank alone first (24M rows on a 12k-event trace, 18 s).
launch_gpu as materialized (
    select l.rank, l.src, g.id, coalesce(g.device, -1) as device, g.stream, g.is_comm
    from (select rank, src, dst from edges where kind = 'launch') l
    join chakra_nodes g on g.rank = l.rank and g.id = l.dst
),
launch_call as materialized (
    select x.*, c.ts as call_ts from launch_gpu x join events c on c.rank = x.rank and c.id = x.src
),
launched as materialized (
    select x.rank, x.id, x.device, x.stream, x.is_comm, x.call_ts, o.node as call_node
    from launch_call x join node_of o on o.rank = x.rank and o.id = x.src
),
sync_waiter as materialized (
    select s.rank, s.src as gpu, o.node as waiter
    from (select rank, src, dst from edges where kind = 'sync') s
    join node_of o on o.rank = s.rank and o.id = s.dst
),
sync_host_waiter as materialized (
    select x.rank, x.gpu, x.waiter, w.ts as waiter_ts, w.pid, w.thread
    from sync_waiter x join chakra_nodes w on w.rank = x.rank and w.id = x.waiter and w.is_cpu_op
),
host_waits as materialized (
    select x.*, g.ts as gpu_ts, g.end_ns as gpu_end
    from sync_host_waiter x join chakra_nodes g on g.rank = x.rank and g.id = x.gpu
),
host_nodes as (
    select rank, coalesce(pid, '') as pid, coalesce(thread, '') as thread, ts, id from chakra_nodes where is_cpu_op
),
compute_streams as (
    select distinct rank, device, stream from launched where not is_comm
),
et_data_src as materialized (
    select d.rank, sn.event_id as src_event, d.dst
    from (select rank, src, dst from edges where kind = 'et_data') d
    join et_nodes sn on sn.rank = d.rank and sn.id = d.src
),
et_data_src_node as materialized (
    select x.rank, o.node as src, x.dst from et_data_src x join node_of o on o.rank = x.rank and o.id = x.src_event
),
et_data_dst as materialized (
    select x.rank, x.src, dn.event_id as dst_event
    from et_data_src_node x join et_nodes dn on dn.rank = x.rank and dn.id = x.dst
),
et_data_nodes as materialized (
    select x.rank, x.src, o.node as dst from et_data_dst x join node_of o on o.rank = x.rank and o.id = x.dst_event
),
candidates as materialized (
    select rank, call_node as src, id as dst, 'ctrl' as dep, 'launch' as reason, 1 as priority from launched
    union all
    select rank, src, dst, 'ctrl', 'stream', 2 from edges where kind = 'stream'
    union all
    select s.rank, s.src, s.dst, 'ctrl', 'sync', 3
    from edges s join chakra_nodes d on d.rank = s.rank and d.id = s.dst and not d.is_cpu_op
    where s.kind = 'sync'
    union all
    select h.rank, h.gpu,
           case when h.gpu_ts < h.waiter_ts or (h.gpu_ts = h.waiter_ts and h.gpu < h.waiter) then h.waiter
                else n.id end,
           'ctrl', 'sync', 3
    from host_waits h
    asof left join host_nodes n
        on n.rank = h.rank and n.pid = coalesce(h.pid, '') and n.thread = coalesce(h.thread, '') and n.ts >= h.gpu_end
    union all
    select rank, lag(id) over (partition by rank, pid, thread order by ts, id), id, 'ctrl', 'thread', 4
    from host_nodes
    union all
    select c.rank, p.id, c.id, 'ctrl', 'collective', 5
    from (
        select c.rank, c.id, c.call_ts, c.device, s.stream
        from launched c
        join compute_streams s on s.rank = c.rank and s.device = c.device and s.stream is distinct from c.stream
        where c.is_comm
    ) c
    asof join (select rank, device, stream, call_ts, id from launched where not is_comm) p
        on p.rank = c.rank and p.device = c.device and p.stream = c.stream and p.call_ts < c.call_ts
    union all
    select rank, src, dst, 'data', 'et_data', 6 from et_data_nodes
),
with_src as materialized (
    select c.*, s.ts as src_ts
    from candidates c join chakra_nodes s on s.rank = c.rank and s.id = c.src
    where c.src <> c.dst
),
with_both as materialized (
    select c.*, d.ts as dst_ts from with_src c join chakra_nodes d on d.rank = c.rank and d.id = c.dst
)
select rank, src, dst, dep, arg_min(reason, priority) as reason,
       any_value(src_ts < dst_ts or (src_ts = dst_ts and src < dst)) as forward
from with_both
group by rank, src, dst, dep
order by rank, dst, dep, src
