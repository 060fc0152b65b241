-- question: Which events does each scope hold, under the scope's rank?
-- outputs: step_scope_members (a temp table)
-- inputs: step_scope_members_by_step (scope/members_by_step.sql), step_scopes (scope/windows.sql)
-- columns:
--   rank: rank
--   id: event id
--   scope_rank: the rank of the event's scope
select m.rank, m.id, s.scope_rank
from step_scope_members_by_step m join step_scopes s on s.rank = m.rank and s.step = m.step
