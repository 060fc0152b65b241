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
--   collective: for a NCCL/RCCL kernel, on every other stream of its device, the last GPU op launched before the
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
launched as materialized (
    select g.rank, g.id, coalesce(g.device, -1) as device, g.stream, g.is_comm, c.ts as call_ts, o.node as call_node
    from edges l
    join chakra_nodes g on g.rank = l.rank and g.id = l.dst
    join events c on c.rank = l.rank and c.id = l.src
    join node_of o on o.rank = l.rank and o.id = l.src
    where l.kind = 'launch'
),
host_waits as (
    select s.rank, s.src as gpu, w.id as waiter, w.ts as waiter_ts, w.pid, w.thread, g.ts as gpu_ts,
           g.end_ns as gpu_end
    from edges s
    join node_of o on o.rank = s.rank and o.id = s.dst
    join chakra_nodes w on w.rank = o.rank and w.id = o.node and w.is_cpu_op
    join chakra_nodes g on g.rank = s.rank and g.id = s.src
    where s.kind = 'sync'
),
host_nodes as (
    select rank, coalesce(pid, '') as pid, coalesce(thread, '') as thread, ts, id from chakra_nodes where is_cpu_op
),
compute_streams as (
    select distinct rank, device, stream from launched where not is_comm
),
candidates as (
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
    select d.rank, src_owner.node, dst_owner.node, 'data', 'et_data', 6
    from edges d
    join et_nodes sn on sn.rank = d.rank and sn.id = d.src
    join node_of src_owner on src_owner.rank = sn.rank and src_owner.id = sn.event_id
    join et_nodes dn on dn.rank = d.rank and dn.id = d.dst
    join node_of dst_owner on dst_owner.rank = dn.rank and dst_owner.id = dn.event_id
    where d.kind = 'et_data'
)
select c.rank, c.src, c.dst, c.dep, arg_min(c.reason, c.priority) as reason,
       any_value(s.ts < d.ts or (s.ts = d.ts and s.id < d.id)) as forward
from candidates c
join chakra_nodes s on s.rank = c.rank and s.id = c.src
join chakra_nodes d on d.rank = c.rank and d.id = c.dst
where c.src <> c.dst
group by c.rank, c.src, c.dst, c.dep
order by c.rank, c.dst, c.dep, c.src
