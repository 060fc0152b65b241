-- question: Which events overlap the time range [$start, $end), for the graph of that range?
-- inputs: events
-- notes: A zero-length event counts when it lies inside the range. Bound: $start, $end (ns). Columns: rank, id.
select rank, id from events where ts < $end and (ts + coalesce(dur, 0) > $start or ts >= $start)
