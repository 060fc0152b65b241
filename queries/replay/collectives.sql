-- question: Which collective kernels does a replay couple across ranks, with what measured transfer time?
-- outputs: replay_collectives
-- inputs: events, edges, ranks
-- includes: lib/collectives
-- columns:
--   rank: rank
--   id: events.id of the rank's communication kernel (NCCL/RCCL, DeepEP, custom all-reduce, ...: collective_kernels())
--   instance: the collective instance, numbered from 0 (one process group's seq, as matched in collective_skew)
--   transfer: ns, the rank's measured kernel end - the instance's last kernel start (last arrival): the time the
--     collective took once every rank had arrived
-- notes: Instances matched by (process group, seq), as in collective_skew. A rank whose kernel ended before the
--   last arrival (clocks off, or a shifted match) is left out of its instance; an instance left with fewer than two
--   ranks is not coupled. The last rank to arrive is never left out (its transfer is its own duration).
with kernels as materialized (select rank, event_id as id, process_group, seq, start_ns, end_ns
                              from collective_kernels()
                              where stream is not null and start_ns is not null),  -- replay/nodes' GPU ops
arrivals as (
    select *, end_ns - max(start_ns) over (partition by process_group, seq) as transfer from kernels
),
coupled as (
    select *, count(*) over (partition by process_group, seq) as members from arrivals where transfer >= 0
)
select rank, id, (dense_rank() over (order by process_group, seq) - 1)::bigint as instance, transfer
from coupled
where members >= 2
order by instance, rank
