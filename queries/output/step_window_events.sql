-- question: Which events make up step $step of every rank, for the graph of that step?
-- inputs: events, edges
-- includes: lib/steps
-- notes: step_events (lib/steps.sql), as for every other --step. Bound: $step. Columns: rank, id.
select rank, id from step_events($step)
