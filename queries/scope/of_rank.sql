-- question: Which rows of a per-rank table (ranks, threads, processes, diagnostics, et_nodes, et_tensors) does each
--   scope hold: those of its rank?
-- outputs: scoped_rows (the caller binds them under the table's own name: step_scope.py)
-- inputs: scoped_source (the rows to scope; rank), step_scopes (scope/windows.sql)
-- columns: those of the table
select t.* replace (s.scope_rank as rank)
from scoped_source t join (select distinct rank, scope_rank from step_scopes) s on s.rank = t.rank
