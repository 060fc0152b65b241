-- question: Which Kineto thread was each ET thread matched with, and where does its window start there?
-- inputs: thread_map (tracekit/link/et.py, from et_thread_agreement), offsets
-- columns:
--   rank: rank
--   reason: et_thread_map
--   detail: the two threads, how many name occurrences agree, and the offset with its anchors
-- notes: One row per ET thread of a rank linked by name_order, in the order the threads were matched (best
--   agreement first).
select m.rank, 'et_thread_map' as reason,
       'ET tid ' || m.et_tid || ' ↔ Kineto pid ' || m.pid || ' tid ' || m.tid || ' (' || m.agree
       || ' name occurrences agree); Kineto position = ET position + ' || coalesce(o.delta, 0) || ' ('
       || coalesce(o.anchors, 0) || ' sequence-number anchors)' as detail
from thread_map m left join offsets o using (rank, et_tid)
order by m.agree desc, m.rank, m.et_tid, m.pid, m.tid
