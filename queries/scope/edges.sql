-- question: Which rows of `edges` does each scope hold (with rank replaced by the scope's rank)?
-- outputs: scoped_rows (the caller binds them under the table's own name: step_scope.py)
-- inputs: scoped_source (the edges to scope), step_scope_members (scope/members.sql), step_scopes
-- columns: those of edges
-- notes: an edge between two events of the same scope; et_* edges (between Execution Trace nodes, which belong to
--   no step) for every scope of their rank. Each end is looked up in a join of two relations of its own, so no
--   planner can pair members by rank alone first.
with from_member as materialized (
    select t.*, a.scope_rank as src_scope
    from scoped_source t join step_scope_members a on a.rank = t.rank and a.id = t.src
    where t.kind not like 'et\_%' escape '\'
)
select t.* exclude (src_scope) replace (b.scope_rank as rank)
from from_member t join step_scope_members b on b.rank = t.rank and b.id = t.dst and b.scope_rank = t.src_scope
union all
select t.* replace (s.scope_rank as rank)
from scoped_source t join (select distinct rank, scope_rank from step_scopes) s on s.rank = t.rank
where t.kind like 'et\_%' escape '\'
