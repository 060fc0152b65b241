-- question: Which edges join two events of the window?
-- inputs: edges, window_nodes
-- notes: et_* edges link Execution Trace nodes, not events, and are left out. window_nodes is the result of
--   window_nodes.sql.
select x.rank, x.src, x.dst, x.kind, x.subkind, x.lag
from edges x
semi join window_nodes s on s.rank = x.rank and s.event = x.src
semi join window_nodes d on d.rank = x.rank and d.event = x.dst
where x.kind not like 'et\_%' escape '\'
order by x.rank, x.src, x.dst, x.kind
