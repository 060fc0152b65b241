-- question: Which events belong to the chosen steps (step_members(): the one step definition)?
-- outputs: step_scope_members_by_step (a temp table)
-- inputs: events, edges, graph_kernels, $ranks (a list of ranks; null: every rank), $step (null: every step)
-- includes: lib/steps
-- columns:
--   rank: rank
--   id: event id
--   step: the step (ProfilerStep#N) the event belongs to
select rank, id, step from step_members()
where ($ranks is null or list_contains($ranks, rank)) and ($step is null or step = $step)
