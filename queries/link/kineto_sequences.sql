-- question: What is each Kineto op's position on its thread (ranks linked by name_order)?
-- inputs: events, link_method
-- notes: Ops in start order. Kept as the temp table k_seq.
select rank, pid, tid, id, name, sequence_number, row_number() over (partition by rank, pid, tid order by ts, id) as pos
from events
where kind in ('cpu_op', 'user_annotation') and ts is not null
  and rank in (select rank from link_method where method = 'name_order')
