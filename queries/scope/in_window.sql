-- question: Which rows of a table of instants (instants, flows) does each scope hold: those starting inside the step?
-- outputs: scoped_rows (the caller binds them under the table's own name: step_scope.py)
-- inputs: scoped_source (the rows to scope; rank, ts), step_scopes (scope/windows.sql)
-- columns: those of the table
select t.* replace (s.scope_rank as rank)
from scoped_source t join step_scopes s on s.rank = t.rank and t.ts >= s.start_ns and t.ts < s.end_ns
