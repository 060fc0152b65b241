-- question: Which (rank, step) scopes hold events, and what rank does each scope get?
-- outputs: step_scopes (a temp table)
-- inputs: step_scope_members_by_step (scope/members_by_step.sql), events, edges, graph_kernels (through step_windows()), ranks, $step
-- includes: lib/steps
-- columns:
--   rank: rank
--   step: step number
--   scope_rank: the scope's own rank: the rank itself when one step is kept ($step given); else one pseudo-rank per
--     (rank, step), above every rank of the trace (so the scopes' rows may sit beside the whole trace's):
--     highest rank + 1 + rank × (steps per rank) + the step's index; null where that overflows a 32-bit rank (the
--     caller then declines)
--   start_ns: ns, start of the step's CPU window
--   end_ns: ns, end of the step's CPU window
with kept as (
    select w.rank, w.step, w.start_ns, w.end_ns
    from step_windows() w
    semi join (select distinct rank, step from step_scope_members_by_step) m on m.rank = w.rank and m.step = w.step
),
indexed as (
    select *, dense_rank() over (partition by rank order by step) - 1 as step_index from kept
)
select rank, step,
       try_cast(case when $step is null
                     then (select max(rank) + 1 from ranks) + rank::bigint * (max(step_index) over () + 1) + step_index
                     else rank::bigint end as integer) as scope_rank,
       start_ns, end_ns
from indexed
