-- question: Which ET nodes name a parent that is not in the trace, per rank?
-- inputs: et_nodes
-- notes: Such a node gets no et_ctrl edge: counted, not silently skipped.
select c.rank, 'et_missing_parent' as reason,
       count(*) || ' nodes name a parent that is not in the Execution Trace, e.g. node ' || min(c.id)
       || ' (parent ' || arg_min(c.parent, c.id) || ')' as detail
from et_nodes c anti join et_nodes p on p.rank = c.rank and p.id = c.parent
where c.parent is not null and c.parent <> c.id
group by c.rank
