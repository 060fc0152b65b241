-- question: Which events overlap the time range [$start, $end), for the graph of that range?
-- outputs: window_events
-- inputs: events, $start, $end (ns)
-- columns:
--   rank: rank
--   id: events.id
-- notes: A zero-length event counts when it lies inside the range. For a step, graph.py binds every event of
--   the tables cut to the step as window_events instead.
select rank, id from events where ts < $end and (ts + coalesce(dur, 0) > $start or ts >= $start)
