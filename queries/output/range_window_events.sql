-- question: Which events overlap the time range [$start, $end), for the graph of that range?
-- inputs: events, $start, $end (ns)
-- columns:
--   rank: rank
--   id: events.id
-- notes: A zero-length event counts when it lies inside the range. graph.py binds the result as window_events.
select rank, id from events where ts < $end and (ts + coalesce(dur, 0) > $start or ts >= $start)
