-- question: What does each event of the window carry as a graph node?
-- inputs: events, window_events
-- notes: window_events (rank, id) is the window's events, registered by tracekit/output/graph.py from
--   step_window_events.sql or range_window_events.sql.
select e.rank, e.id as event, e.kind, e.name, e.pid, e.tid, e.ts, e.dur, e.device, e.stream
from events e semi join window_events w on w.rank = e.rank and w.id = e.id
order by e.rank, e.ts, e.id
