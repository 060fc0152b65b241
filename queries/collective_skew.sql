-- question: For each collective, how far apart did the ranks arrive, and which rank was last (everyone waited for it)?
-- inputs: collectives
-- scope: across ranks
-- columns:
--   process_group: process group (as in collectives)
--   seq: order of the collective within the process group (as in collectives): the same seq on every rank is
--     the same collective
--   collective: its type (the most common among the ranks; they agree in a consistent trace set)
--   ranks: ranks in the trace set that have this collective
--   start_skew_us: µs, last rank's kernel start - first rank's kernel start
--   slowest_rank: the rank whose kernel started last (the one the others waited for; the lowest rank on a tie)
--   max_wait_us: µs, the longest wait of a rank: first arrival to last arrival (= start_skew_us)
--   group_size: ranks in the process group (from the trace's args; ranks < group_size: not every member's
--     trace is loaded)
--   bytes: bytes, message size (as in collectives; from the slowest rank)
--   first_start_ns: ns, first rank's kernel start
--   last_start_ns: ns, last rank's kernel start
--   end_skew_us: µs, last kernel end - first kernel end (near 0 for a collective that completes together)
--   transfer_us: µs, the slowest rank's kernel duration: the collective's time once every rank has arrived
--   mean_wait_us: µs, mean over ranks of last arrival - own arrival
-- notes: Collectives are matched across ranks by (process group, order of occurrence within it), which NCCL's
--   in-order execution per communicator makes sound when every rank's trace covers the same collectives; a rank
--   whose profiling window starts a collective earlier or later than the others shifts every match after it
--   (check that `collective` and `bytes` agree across ranks in collectives). Start times are compared across
--   hosts as written: clocks are assumed synchronised. A kernel's start is when its rank reached the collective
--   on the GPU, so the wait is time spent inside the kernel waiting for the peers.
with kernels as materialized (select * from collectives),
arrivals as (
    select *, max(start_ns) over collective_key as last_start_ns
    from kernels
    window collective_key as (partition by process_group, seq)
)
select process_group, seq, mode(collective) as collective, count(*) as ranks,
       (max(start_ns) - min(start_ns)) / 1e3 as start_skew_us,
       arg_max(rank, struct_pack(start_ns, neg_rank := -rank)) as slowest_rank,
       (max(start_ns) - min(start_ns)) / 1e3 as max_wait_us,
       max(group_size) as group_size,
       arg_max(bytes, struct_pack(start_ns, neg_rank := -rank)) as bytes,
       min(start_ns) as first_start_ns, max(start_ns) as last_start_ns,
       (max(end_ns) - min(end_ns)) / 1e3 as end_skew_us,
       arg_max(duration_us, struct_pack(start_ns, neg_rank := -rank)) as transfer_us,
       avg(last_start_ns - start_ns) / 1e3 as mean_wait_us
from arrivals
group by process_group, seq
order by process_group, seq
