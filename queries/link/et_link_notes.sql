-- question: How many ET nodes and Kineto ops were left unlinked, per rank?
-- inputs: et_nodes, et_links, events, link_method
-- columns:
--   rank: rank
--   reason: et_unlinked_nodes or et_unlinked_ops
--   detail: how many were left unlinked, of how many, and how the rank was linked
with nodes as (
    select n.rank, count(*) as n, count(l.id) as linked
    from et_nodes n left join et_links l on l.rank = n.rank and l.id = n.id group by n.rank
),
ops as (
    select e.rank, count(*) as n, count(l.id) as linked
    from events e left join et_links l on l.rank = e.rank and l.event_id = e.id
    where e.kind in ('cpu_op', 'user_annotation') group by e.rank
)
select nodes.rank, 'et_unlinked_nodes' as reason,
       (nodes.n - nodes.linked) || ' of ' || nodes.n || ' Execution Trace nodes have no Kineto event ('
       || coalesce('linked by ' || m.method, 'no Kineto cpu_op/user_annotation events on this rank') || ')' as detail
from nodes left join link_method m using (rank)
where nodes.linked < nodes.n
union all
select ops.rank, 'et_unlinked_ops',
       (ops.n - ops.linked) || ' of ' || ops.n || ' Kineto cpu_op/user_annotation events have no Execution Trace node'
       || ' (linked by ' || m.method || ')'
from ops join link_method m using (rank)
where ops.linked < ops.n
