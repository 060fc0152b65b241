-- question: For each collective, how far apart did the ranks arrive and how long did each rank wait?
-- inputs: collective_skew, collective_waits, ranks
-- scope: across ranks
-- columns:
--   process_group: process group
--   seq: sequence number of the collective in its group
--   collective: collective name
--   ranks: ranks that took part in the traces given
--   start_skew_us: us, last arrival minus first arrival
--   max_wait_us: us, longest wait of a rank for the others
--   slowest_rank: rank that arrived last
--   bytes: bytes, message size (collective_skew)
--   transfer_us: us, the slowest rank's kernel duration: the collective's time once every rank has arrived
--   by_rank: list of us, each rank's wait in this collective, in rank order (null: not on that rank)
--   ranks_listed: the ranks of the trace set, in order: by_rank[i] is rank ranks_listed[i]
with by_rank as (
    select c.process_group, c.seq, list(w.wait_us order by r.rank) as by_rank,
           list(r.rank order by r.rank) as ranks_listed
    from collective_skew c cross join ranks r
    left join collective_waits w on w.process_group = c.process_group and w.seq = c.seq and w.rank = r.rank
    group by c.process_group, c.seq
)
select s.process_group, s.seq, s.collective, s.ranks, s.start_skew_us, s.max_wait_us, s.slowest_rank, s.bytes,
       s.transfer_us, p.by_rank, p.ranks_listed
from collective_skew s
left join by_rank p using (process_group, seq)
order by s.max_wait_us desc nulls last, s.process_group, s.seq
