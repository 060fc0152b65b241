-- question: How long did each rank wait in each collective for the last rank to arrive?
-- inputs: collectives
-- scope: across ranks
-- columns:
--   rank: rank
--   process_group: process group (as in collectives)
--   seq: order of the collective within the process group (as in collectives)
--   wait_us: µs, last rank's kernel start - this rank's kernel start (0 for the slowest rank)
--   collective: type (as in collectives)
--   start_ns: ns, this rank's kernel start
--   last_start_ns: ns, the last rank's kernel start
--   duration_us: µs, this rank's kernel duration (wait included)
--   is_slowest: this rank arrived last (the lowest such rank on a tie)
--   ranks: ranks in the trace set that have this collective
-- notes: Matching and clock assumptions as in collective_skew. Summed per rank, wait_us is the time a rank lost
--   to the others' lateness; the rank that is slowest most often is the straggler.
with kernels as materialized (select * from collectives),
keyed as (
    select *, max(start_ns) over collective_key as last_start_ns,
           arg_max(rank, struct_pack(start_ns, neg_rank := -rank)) over collective_key as slowest_rank,
           count(*) over collective_key as ranks
    from kernels
    window collective_key as (partition by process_group, seq)
)
select rank, process_group, seq, (last_start_ns - start_ns) / 1e3 as wait_us, collective, start_ns, last_start_ns,
       duration_us, rank = slowest_rank as is_slowest, ranks
from keyed
order by rank, process_group, seq
