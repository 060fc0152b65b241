-- question: Where does each ET thread's window start within its Kineto thread?
-- outputs: offsets
-- inputs: et_seq, k_seq, thread_map (tracekit/link/et.py: one Kineto thread per ET thread, from et_thread_agreement)
-- columns:
--   rank: rank
--   et_tid: an ET thread
--   delta: Kineto position - ET position of the ET thread's window on its Kineto thread
--   anchors: the nodes that agree on that difference
-- notes: The ET may hold another stretch of the run than Kineto (e.g. one iteration out of forty). Nodes whose autograd
--   sequence number and name equal a Kineto op's anchor the two sequences: the most common position difference is
--   the offset of the ET window within the Kineto thread. Without anchors (the ET recorded another iteration than
--   Kineto, as in the DLRM files) both sequences are taken from their start.
select e.rank, e.et_tid, k.pos - e.pos as delta, count(*) as anchors
from et_seq e
join thread_map m using (rank, et_tid)
join k_seq k on k.rank = e.rank and k.pid = m.pid and k.tid = m.tid and k.name = e.name
            and k.sequence_number = e.seq_id
where e.seq_id >= 0
group by e.rank, e.et_tid, k.pos - e.pos
qualify row_number() over (partition by e.rank, e.et_tid order by count(*) desc, abs(k.pos - e.pos)) = 1
