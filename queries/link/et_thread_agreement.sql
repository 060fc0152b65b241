-- question: How many (name, n-th occurrence) pairs does each ET thread share with each Kineto thread?
-- inputs: et_seq, k_seq
-- columns:
--   rank: rank
--   et_tid: an ET thread
--   pid: a Kineto process
--   tid: a Kineto thread of it
--   agree: the (name, n-th occurrence) pairs the two threads share
-- notes: The links the ordered match would make between them. ET `tid` is a small index the observer hands out, Kineto
--   `tid` the OS thread id, so which is which is learnt from this agreement (tracekit/link/et.py: thread_map).
select e.rank, e.et_tid, k.pid, k.tid, sum(least(e.n, k.n)) as agree
from (select rank, et_tid, name, count(*) as n from et_seq group by all) e
join (select rank, pid, tid, name, count(*) as n from k_seq group by all) k using (rank, name)
group by all
