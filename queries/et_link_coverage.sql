-- question: How much of each rank's Execution Trace is linked to Kineto events, and how much of the Kineto op
--   timeline do linked ET nodes cover?
-- inputs: et_nodes, events
-- columns:
--   rank: rank
--   et_nodes: nodes, Execution Trace nodes of the rank
--   linked_nodes: nodes, those with a linked Kineto event (et_nodes.event_id)
--   node_share: fraction 0..1, linked_nodes / et_nodes
--   kineto_ops: events, Kineto cpu_op and user_annotation events of the rank (the kinds ET nodes link to)
--   linked_ops: events, those linked from an ET node
--   op_share: fraction 0..1, linked_ops / kineto_ops (null without Kineto ops)
--   link_method: how the rank's nodes were linked (rf_id, name_order; several joined by + when mixed)
-- notes: Ranks with Execution Trace nodes only. An ET often records a shorter stretch than Kineto (one iteration
--   of many), so op_share can be small while node_share is near 1.
with nodes as (
    select rank, count(*) as et_nodes, count(event_id) as linked_nodes,
           string_agg(distinct link_method, '+' order by link_method) as link_method
    from et_nodes group by rank
),
ops as (
    select e.rank, count(*) as kineto_ops, count(n.id) as linked_ops
    from events e left join et_nodes n on n.rank = e.rank and n.event_id = e.id
    where e.kind in ('cpu_op', 'user_annotation')
    group by e.rank
)
select nodes.rank, nodes.et_nodes, nodes.linked_nodes, nodes.linked_nodes / nodes.et_nodes as node_share,
       coalesce(ops.kineto_ops, 0) as kineto_ops, coalesce(ops.linked_ops, 0) as linked_ops,
       ops.linked_ops / nullif(ops.kineto_ops, 0) as op_share, nodes.link_method
from nodes left join ops using (rank)
order by nodes.rank
