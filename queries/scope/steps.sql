-- question: Which ProfilerStep numbers do the ranks asked for have (what a --step may name)?
-- outputs: scope_steps
-- inputs: events, edges, graph_kernels (through step_windows()), $ranks (a list of ranks; null: every rank)
-- includes: lib/steps
-- columns:
--   step: step number, ascending
select distinct step from step_windows()
where $ranks is null or list_contains($ranks, rank)
order by step
