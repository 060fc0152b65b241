-- question: Which ET node produced each tensor a node reads (et_data edges)?
-- inputs: et_tensors, subtree
-- notes: A tensor is identified by (tensor_id, storage_id); storage 0 is an undefined tensor, which carries no data. Its
--   producer for a consumer is the latest node that output it and had finished (subtree_end < consumer id) when the
--   consumer started; among nested ops finishing together, the innermost (highest id) one.
with outs as (
    select t.rank, s.subtree_end, max(t.node) as node, t.tensor_id, t.storage_id
    from et_tensors t join subtree s on s.rank = t.rank and s.id = t.node
    where t.direction = 'output' and t.storage_id <> 0
    group by t.rank, s.subtree_end, t.tensor_id, t.storage_id
),
ins as (
    select distinct rank, node, tensor_id, storage_id from et_tensors where direction = 'input' and storage_id <> 0
)
select distinct i.rank, o.node as src, i.node as dst, 'et_data' as kind
from ins i asof join outs o
  on o.rank = i.rank and o.tensor_id = i.tensor_id and o.storage_id = i.storage_id and i.node > o.subtree_end
