-- question: Which forward op leads to which backward op (flow edges)?
-- inputs: flow_bindings
-- notes: flow_bindings is the result of flow_bindings.sql.
select s.rank, s.op as src, f.op as dst, 'flow' as kind, s.cat as subkind, f.op_ts - s.op_end as lag
from flow_bindings s join flow_bindings f on f.rank = s.rank and f.cat = s.cat and f.flow_id = s.flow_id
where s.phase = 's' and f.phase = 'f' and s.op is not null and f.op is not null
