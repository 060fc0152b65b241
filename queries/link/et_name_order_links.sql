-- question: Which Kineto event is each ET node, by name and order (ranks linked by name_order)?
-- inputs: et_seq, k_seq, thread_map, offsets
-- columns:
--   rank: rank
--   id: et_nodes.id
--   event_id: events.id of the Kineto op it is
--   link_method: name_order
-- notes: Within the overlap of the two windows, the n-th ET node named X ↔ the n-th Kineto op named X.
with window_nodes as (
    select e.rank, e.et_tid, e.id, e.name,
           row_number() over (partition by e.rank, e.et_tid, e.name order by e.pos) as occurrence
    from et_seq e join thread_map m using (rank, et_tid) left join offsets o using (rank, et_tid)
    where e.pos + coalesce(o.delta, 0) >= 1
),
window_ops as (
    select k.rank, m.et_tid, k.id, k.name,
           row_number() over (partition by k.rank, m.et_tid, k.name order by k.pos) as occurrence
    from k_seq k join thread_map m on m.rank = k.rank and m.pid = k.pid and m.tid = k.tid
    left join offsets o on o.rank = m.rank and o.et_tid = m.et_tid
    where k.pos - coalesce(o.delta, 0) >= 1
)
select n.rank, n.id, o.id as event_id, 'name_order' as link_method
from window_nodes n join window_ops o using (rank, et_tid, name, occurrence)
