-- question: Which way is each rank's Execution Trace linked to its Kineto events?
-- outputs: link_method
-- inputs: et_nodes, events
-- columns:
--   rank: rank
--   method: rf_id, name_order, or null (no Kineto cpu_op/user_annotation on the rank)
-- notes: rf_id where the rank's Kineto ops carry record function ids; name_order where they do not (older traces,
--   schema 1.0.1, whose `rf_id` Kineto never recorded); null where the rank has no Kineto cpu_op/user_annotation.
select n.rank,
       case when k.ops is null then null
            when k.with_rf > 0 and n.with_rf > 0 then 'rf_id'
            else 'name_order' end as method
from (select rank, count(rf_id) as with_rf from et_nodes group by rank) n
left join (select rank, count(*) as ops, count(record_function_id) as with_rf
           from events where kind in ('cpu_op', 'user_annotation') group by rank) k using (rank)
