-- question: Which flow endpoints sit on no cpu_op, or have no bound partner?
-- inputs: flow_bindings
-- notes: flow_bindings is the result of flow_bindings.sql.
select b.rank, b.endpoint as position, 'edges' as stage,
       case when b.op is null then 'flow_endpoint_unbound' else 'flow_unpaired' end as reason,
       case when b.op is null
            then b.cat || ' flow ' || b.flow_id::varchar || ' endpoint ' || b.phase
                 || ' sits on no cpu_op of its thread'
            else b.cat || ' flow ' || b.flow_id::varchar || ' has a bound ' || b.phase || ' endpoint but no bound '
                 || case b.phase when 's' then 'f' else 's' end || ' endpoint'
       end as detail,
       false as dropped
from flow_bindings b
where b.op is null or not exists (
    select 1 from flow_bindings o
    where o.rank = b.rank and o.cat = b.cat and o.flow_id = b.flow_id and o.phase <> b.phase and o.op is not null)
