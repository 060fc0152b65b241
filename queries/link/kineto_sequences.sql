-- question: What is each Kineto op's position on its thread (ranks linked by name_order)?
-- outputs: k_seq
-- inputs: events, link_method
-- columns:
--   rank: rank
--   pid: the op's process
--   tid: the op's thread
--   id: events.id
--   name: the op's name
--   sequence_number: the op's autograd sequence number
--   pos: its position on its Kineto thread, from 1, in start order
-- notes: Ops in start order.
select rank, pid, tid, id, name, sequence_number, row_number() over (partition by rank, pid, tid order by ts, id) as pos
from events
where kind in ('cpu_op', 'user_annotation') and ts is not null
  and rank in (select rank from link_method where method = 'name_order')
