-- question: Which Kineto event is each ET node, by record function id (ranks linked by rf_id)?
-- inputs: et_nodes, events, link_method
-- columns:
--   rank: rank
--   id: et_nodes.id
--   event_id: events.id of the Kineto op it is
--   link_method: rf_id
-- notes: rf_id is unique per record function on both sides; ids that repeat (the ET's root nodes all carry 0) link nothing.
with nodes as (
    select rank, id, rf_id from et_nodes
    where rf_id is not null and rank in (select rank from link_method where method = 'rf_id')
    qualify count(*) over (partition by rank, rf_id) = 1
),
ops as (
    select rank, id, record_function_id from events
    where kind in ('cpu_op', 'user_annotation') and record_function_id is not null
    qualify count(*) over (partition by rank, record_function_id) = 1
)
select n.rank, n.id, o.id as event_id, 'rf_id' as link_method
from nodes n join ops o on o.rank = n.rank and o.record_function_id = n.rf_id
