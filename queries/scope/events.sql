-- question: Which rows of `events` (or of a table keyed by an event's id: graph_kernels) does each scope hold (with
--   rank replaced by the scope's rank)?
-- outputs: scoped_rows (the caller binds them under the table's own name: step_scope.py)
-- inputs: scoped_source (the events to scope), step_scope_members (scope/members.sql)
-- columns: those of events
select t.* replace (m.scope_rank as rank)
from scoped_source t join step_scope_members m on m.rank = t.rank and m.id = t.id
