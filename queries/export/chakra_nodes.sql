-- question: Which Chakra ET nodes does each rank's trace make, of what type, and with what timing and attributes?
-- inputs: events, edges, ranks, chakra_owners, chakra_compute
-- includes: lib/categories, lib/collectives
-- columns:
--   rank: rank
--   id: node id = events.id of the event the node stands for (unique within the rank)
--   name: event name
--   node_type: Chakra NodeType name: COMP_NODE, COMM_COLL_NODE, COMM_SEND_NODE or COMM_RECV_NODE
--   is_cpu_op: true for host ops, false for GPU ops
--   start_time_micros: µs, start (epoch), floor of the ns timestamp
--   duration_micros: µs, duration rounded to the nearest µs
--   tid: the host thread as an integer (null when the trace's tid is not one, and for GPU ops)
--   stream: GPU stream (null for host ops)
--   comm_type: Chakra CollectiveCommType name of a COMM_COLL_NODE (null for other nodes)
--   comm_size: bytes, what a communication node moves, as collectives.sql counts it (0 when the trace does not
--     say; null for other nodes)
--   pg_name: process group of a communication node as ASTRA-sim reads it: the group's id (chakra_groups: a
--     number from 1) as text ('' when the trace does not say: every rank)
--   process_group: the trace's process group name (null: not said, or not a communication node)
--   num_ops: operations of a GPU compute node (chakra_compute: op_perf's model, else from the measured
--     duration; null for other nodes)
--   tensor_size: bytes, the tensors that node reads and writes (chakra_compute; null for other nodes)
--   inferred: which of a node's attributes rest on a fallback, not the trace's args or shapes (null: none)
--   ts: ns, start (epoch), for ordering
--   end_ns: ns, end
--   pid: pid as written (host ops)
--   thread: tid as written (host ops)
--   device: GPU device (GPU ops)
--   is_comm: true for communication kernels (the communication category of gpu_timeline: NCCL/RCCL, DeepEP, ...)
-- notes: Host nodes are the outermost cpu_op, runtime or driver events of each thread (chakra_owners): the ops
--   nested inside one are part of its duration, so they are folded into it rather than simulated twice. GPU
--   nodes are every kernel, memcpy and memset. A communication kernel is a communication node; its type, size and
--   process group come from collective_kernels() (the kernel's own args, else its launching c10d op or nccl:*
--   annotation, else its name: DeepEP dispatch/combine are ALL_TO_ALL): send → COMM_SEND_NODE, recv → COMM_RECV_NODE, any other known type → COMM_COLL_NODE, where
--   send_recv (NCCL's SendRecv kernel, how PyTorch runs all_to_all) is ALL_TO_ALL.
--   Every communication node carries comm_type (COMM_COLL_NODE), comm_size and pg_name, which simulators need
--   (ASTRA-sim stops at a collective without them). Where the trace does not say (a kernel with no args and no
--   launcher in the trace: ncclDevKernel_Generic queued before the profiling window, SendRecv replayed from a
--   CUDA graph, traces older than collective args), the fallbacks are: the type from the kernel's name, else
--   ALL_REDUCE (the collective data-parallel training runs most); comm_size 0 (no bytes are invented); pg_name
--   '' (ASTRA-sim's name for the group of every rank). `inferred` says which of these a node got.
with
gpu as materialized (
    select rank, id, name, ts, dur, device, stream, gpu_timeline_category(name, kind) = 'communication' as is_comm
    from events
    where kind in ('kernel', 'memcpy', 'memset') and ts is not null
),
comm as materialized (
    select rank, event_id, collective, bytes, process_group, args_source from collective_kernels()
),
-- ASTRA-sim reads pg_name as an integer id of its communicator groups, ids from 1 (it asserts id > 0). A numeric
-- name N gets N + 1, the id ASTRA-sim's own reader of PyTorch's process-group metadata gives it; other names the
-- ids after the largest, in name order. The same on every rank: the files are written together.
group_names as (
    select distinct process_group as name, try_cast(process_group as bigint) as number
    from comm where process_group <> 'unknown'
),
group_ids as (
    select name as group_name,
           coalesce(number + 1, coalesce((select max(number) + 1 from group_names where number >= 0), 0)
                    + row_number() over (partition by number >= 0 order by name)) as group_id
    from (select name, if(number >= 0, number, null) as number from group_names)
),
nodes as (
    select e.rank, e.id, e.name, true as is_cpu_op, e.ts, e.dur, e.pid, e.tid as thread, null::int as device,
           null::bigint as stream, false as is_comm, null as collective, null::bigint as bytes, null as process_group,
           null as args_source
    from events e
    semi join chakra_owners o on o.rank = e.rank and o.node = e.id
    union all
    select g.rank, g.id, g.name, false, g.ts, g.dur, null, null, g.device, g.stream, g.is_comm, c.collective,
           c.bytes, c.process_group, c.args_source
    from gpu g
    left join comm c on c.rank = g.rank and c.event_id = g.id
)
select rank, id, name,
       case when not is_comm then 'COMP_NODE'
            when collective = 'send' then 'COMM_SEND_NODE'
            when collective = 'recv' then 'COMM_RECV_NODE'
            else 'COMM_COLL_NODE' end as node_type,
       is_cpu_op,
       ts // 1000 as start_time_micros,
       (coalesce(dur, 0) + 500) // 1000 as duration_micros,
       try_cast(thread as bigint) as tid,
       stream,
       case when is_comm and collective is distinct from 'send' and collective is distinct from 'recv' then
           case collective
               when 'all_reduce' then 'ALL_REDUCE' when 'reduce' then 'REDUCE' when 'all_gather' then 'ALL_GATHER'
               when 'gather' then 'GATHER' when 'scatter' then 'SCATTER' when 'broadcast' then 'BROADCAST'
               when 'all_to_all' then 'ALL_TO_ALL' when 'send_recv' then 'ALL_TO_ALL'
               when 'reduce_scatter' then 'REDUCE_SCATTER' when 'barrier' then 'BARRIER'
               else 'ALL_REDUCE'
           end
       end as comm_type,
       case when is_comm then coalesce(bytes, 0) end as comm_size,
       case when is_comm then coalesce(gid.group_id::varchar, '') end as pg_name,
       if(is_comm and process_group <> 'unknown', process_group, null) as process_group,
       k.num_ops, k.tensor_size,
       case when is_comm then nullif(concat_ws('; ',
           case when collective is null then 'comm_type: the trace does not say which collective, ALL_REDUCE assumed'
                when args_source = 'kernel_name' then 'comm_type: from the kernel name' end,
           if(bytes is null, 'comm_size: the trace does not say, 0', null),
           if(process_group = 'unknown', 'pg_name: the trace does not say, '''' (every rank)', null)), '')
            else k.inferred
       end as inferred,
       ts, ts + coalesce(dur, 0) as end_ns, pid, thread, device, is_comm
from nodes n
left join chakra_compute k using (rank, id)
left join group_ids gid on gid.group_name = n.process_group
order by rank, ts, id
