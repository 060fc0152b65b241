"""Scoping a trace set to training steps: the rows of every table that belong to chosen steps.

A step's events are step_members() (queries/lib/steps.sql), the one definition every --step, `db.scoped(step=)` and the
diff's per-step values use. Each chosen (rank, step) is a scope with a rank of its own, `scope_rank`: the step's rank
when one step is kept, or, to compute an analysis for every step in one run (analyses key on rank), one pseudo-rank
per (rank, step). A scope holds:
  - events: the step's members;
  - edges: those between two events of the same scope, and the et_* edges of the scope's rank (Execution Trace
    nodes belong to no step);
  - instants, flows: those starting inside the step's CPU window;
  - every other table (ranks, threads, processes, diagnostics, et_nodes, et_tensors): the rows of the scope's rank.
Rows keep their columns, with `rank` replaced by `scope_rank`.
"""

from __future__ import annotations

import duckdb
import polars as pl

from tracekit.engine import catalog
from tracekit.engine.tables import TraceTables

SCOPES = "step_scopes"  # temp table: rank, step, scope_rank, start_ns, end_ns (the CPU step window)
MEMBERS = "step_scope_members"  # temp table: rank, id, scope_rank


def define_scopes(con: duckdb.DuckDBPyConnection, *, where_rank: str = "true", step: int | None = None
                  ) -> pl.DataFrame | None:
    """Create the temp tables SCOPES and MEMBERS on `con` for the steps of step_windows() that hold events, on the
    ranks of `where_rank` (an SQL condition on `rank`): step `step`, each scope on its own rank; or, with step None,
    every step, each on a pseudo-rank. Return the scopes (scope_rank, rank, step) in (rank, step) order; None
    (nothing left defined) when pseudo-ranks would overflow a 32-bit rank."""
    of_step = "true" if step is None else f"step = {int(step)}"
    catalog.load_includes(con, ["lib/steps"])
    con.execute(f"""
        create or replace temp table {MEMBERS}_by_step as
            select rank, id, step from step_members() where {where_rank} and {of_step};
        create or replace temp table {SCOPES}_windows as
            select rank, step, start_ns, end_ns,
                   (dense_rank() over (partition by rank order by step) - 1)::bigint as step_index
            from step_windows()
            where {where_rank} and {of_step} and (rank, step) in (select distinct rank, step from {MEMBERS}_by_step)""")
    scope_rank = "rank::integer"
    if step is None:
        top_rank, stride = con.execute(f"select coalesce(max(rank), 0), coalesce(max(step_index), 0) + 1 "
                                   f"from {SCOPES}_windows").fetchone()
        if (top_rank + 1) * stride >= 2**31:
            con.execute(f"drop table {MEMBERS}_by_step; drop table {SCOPES}_windows")
            return None
        scope_rank = f"(rank::bigint * {stride} + step_index)::integer"
    con.execute(f"""
        create or replace temp table {SCOPES} as
            select rank, step, {scope_rank} as scope_rank, start_ns, end_ns from {SCOPES}_windows;
        create or replace temp table {MEMBERS} as
            select m.rank, m.id, s.scope_rank from {MEMBERS}_by_step m join {SCOPES} s using (rank, step);
        drop table {MEMBERS}_by_step; drop table {SCOPES}_windows""")
    return con.sql(f"select scope_rank, rank, step from {SCOPES} order by rank, step").pl()


def drop_scopes(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(f"drop table if exists {SCOPES}; drop table if exists {MEMBERS}")


def scoped_rows_sql(name: str, source: str | None = None) -> str:
    """The rows of table NAME (read from the relation `source`, by default NAME) that belong to the scopes of
    define_scopes, with `rank` replaced by their scope's rank."""
    source = source or name
    if name == "events":
        return f"select t.* replace (m.scope_rank as rank) from {source} t join {MEMBERS} m using (rank, id)"
    if name == "edges":
        return (f"select t.* replace (a.scope_rank as rank) from {source} t "
                f"join {MEMBERS} a on a.rank = t.rank and a.id = t.src "
                f"join {MEMBERS} b on b.rank = t.rank and b.id = t.dst "
                "where a.scope_rank = b.scope_rank and t.kind not like 'et\\_%' escape '\\' "
                f"union all select t.* replace (s.scope_rank as rank) from {source} t "
                f"join (select distinct rank, scope_rank from {SCOPES}) s using (rank) "
                "where t.kind like 'et\\_%' escape '\\'")
    if name in ("instants", "flows"):
        return (f"select t.* replace (s.scope_rank as rank) from {source} t join {SCOPES} s "
                "on s.rank = t.rank and t.ts >= s.start_ns and t.ts < s.end_ns")
    return (f"select t.* replace (s.scope_rank as rank) from {source} t "
            f"join (select distinct rank, scope_rank from {SCOPES}) s using (rank)")


def replace_with_scoped_views(con: duckdb.DuckDBPyConnection, tables: TraceTables) -> None:
    """Replace the tables registered on `con` by views of their scoped rows (nothing copied): what an analysis then
    computes on `con` it computes per scope."""
    for name, table in tables.items():
        con.unregister(name)
        con.register(f"whole_{name}", table)
        con.execute(f"create temp view {name} as {scoped_rows_sql(name, f'whole_{name}')}")


def unscoped(frame: pl.DataFrame, scopes: pl.DataFrame) -> pl.DataFrame:
    """A result computed per scope rank, with its real (rank, step) in place of the scope rank."""
    return (frame.rename({"rank": "scope_rank"})
            .join(scopes.with_columns(pl.col("scope_rank").cast(frame.schema["rank"])), on="scope_rank", how="left")
            .drop("scope_rank")
            .select("rank", "step", pl.exclude("rank", "step")))
