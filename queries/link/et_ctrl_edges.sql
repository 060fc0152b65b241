-- question: Which ET node is each node's parent (et_ctrl edges)?
-- inputs: et_nodes
-- notes: The ET's own parent links; the root names itself as parent and gets none.
select c.rank, c.parent as src, c.id as dst, 'et_ctrl' as kind
from et_nodes c join et_nodes p on p.rank = c.rank and p.id = c.parent
where c.parent <> c.id
