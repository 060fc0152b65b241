-- question: What is each ET node's position on its thread (ranks linked by name_order)?
-- outputs: et_seq
-- inputs: et_nodes, link_method
-- columns:
--   rank: rank
--   et_tid: the ET node's thread (the observer's small index)
--   id: et_nodes.id
--   name: the node's name
--   seq_id: the node's autograd sequence number (-1: none)
--   pos: its position on its ET thread, from 1, in id (start) order
-- notes: Ids are handed out as ops start, so id order is start order. The observer's own process / thread root nodes have
--   no Kineto counterpart: left out, so positions line up.
select rank, tid as et_tid, id, name, seq_id, row_number() over (partition by rank, tid order by id) as pos
from et_nodes
where rank in (select rank from link_method where method = 'name_order')
  and name not like '[pytorch|profiler|execution_%'
