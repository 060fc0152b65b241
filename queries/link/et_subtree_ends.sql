-- question: Where does each ET node's subtree end (the largest id among it and its descendants)?
-- outputs: subtree
-- inputs: et_nodes
-- columns:
--   rank: rank
--   id: et_nodes.id
--   subtree_end: the largest id among the node and its descendants
-- notes: A node has written its outputs only once its subtree is done, so an op nested inside an in-place op
--   (zero_ → fill_) reads the tensor as it was before the enclosing op, not from it. Depth is capped so a malformed
--   parent cycle cannot recurse for ever.
with recursive up(rank, id, ancestor, depth) as (
    select rank, id, parent, 1 from et_nodes where parent is not null and parent <> id
    union all
    select u.rank, u.id, p.parent, u.depth + 1
    from up u join et_nodes p on p.rank = u.rank and p.id = u.ancestor
    where p.parent is not null and p.parent <> p.id and u.depth < 1000
)
select n.rank, n.id, greatest(n.id, coalesce(max(u.id), n.id)) as subtree_end
from et_nodes n left join up u on u.rank = n.rank and u.ancestor = n.id
group by n.rank, n.id
