-- question: Which Kineto event is each linked ET node, by whichever way its rank is linked?
-- inputs: et_rf_id_links, et_name_order_links
-- columns:
--   rank: rank
--   id: et_nodes.id
--   event_id: events.id of the Kineto op it is
--   link_method: rf_id or name_order (et_link_method.sql)
-- notes: Each node is linked at most once: a rank is linked one way, and both ways link one node to one op.
select rank, id, event_id, link_method from et_rf_id_links
union all
select rank, id, event_id, link_method from et_name_order_links
