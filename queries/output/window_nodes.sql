-- question: What does each event of the window carry as a graph node?
-- inputs: events, window_events
-- columns:
--   rank: rank
--   event: events.id
--   kind: event kind
--   name: event name
--   pid: process id
--   tid: thread id (or stream, on GPU)
--   ts: ns, start
--   dur: ns, duration
--   device: GPU device (null on the host)
--   stream: GPU stream (null on the host)
-- notes: window_events (rank, id) is the window's events, registered by tracekit/output/graph.py: the events of
--   range_window_events.sql, or for a step every event of the tables tracekit/query/step_scope.py cut to it.
select e.rank, e.id as event, e.kind, e.name, e.pid, e.tid, e.ts, e.dur, e.device, e.stream
from events e semi join window_events w on w.rank = e.rank and w.id = e.id
order by e.rank, e.ts, e.id
