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
# How each table is scoped: queries/scope/NAME.sql over the relation `scoped_source`.
SCOPE_QUERY = {"events": "events", "edges": "edges", "instants": "in_window", "flows": "in_window"}


def define_scopes(con: duckdb.DuckDBPyConnection, *, ranks: list[int] | None = None, step: int | None = None
                  ) -> pl.DataFrame | None:
    """Create the temp tables SCOPES and MEMBERS on `con` for the steps of step_windows() that hold events, on
    `ranks` (None: every rank): step `step`, each scope on its own rank; or, with step None, every step, each on a
    pseudo-rank. Return the scopes (scope_rank, rank, step) in (rank, step) order; None (nothing left defined) when
    pseudo-ranks would overflow a 32-bit rank."""
    params = {"ranks": None if ranks is None else [int(r) for r in ranks], "step": None if step is None else int(step)}
    con.execute(f"create or replace temp table {MEMBERS}_by_step as {catalog.ready(con, 'scope/members_by_step')}",
                params)
    con.execute(f"create or replace temp table {SCOPES} as {catalog.ready(con, 'scope/windows')}",
                {"step": params["step"]})
    if con.execute(f"select coalesce(max(scope_rank), 0) >= 2**31 from {SCOPES}").fetchone()[0]:
        con.execute(f"drop table {MEMBERS}_by_step; drop table {SCOPES}")
        return None
    con.execute(f"create or replace temp table {SCOPES} as select * replace (scope_rank::integer as scope_rank) "
                f"from {SCOPES}")
    con.execute(f"create or replace temp table {MEMBERS} as {catalog.ready(con, 'scope/members')}")
    con.execute(f"drop table {MEMBERS}_by_step")
    return con.sql(f"select scope_rank, rank, step from {SCOPES} order by rank, step").pl()


def drop_scopes(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(f"drop table if exists {SCOPES}; drop table if exists {MEMBERS}")


def scoped_rows_sql(name: str, source: str | None = None) -> str:
    """The rows of table NAME (read from the relation `source`, by default NAME) that belong to the scopes of
    define_scopes, with `rank` replaced by their scope's rank (queries/scope/*.sql)."""
    text = catalog.load_query(f"scope/{SCOPE_QUERY.get(name, 'of_rank')}").statement
    return text.replace("scoped_source", source or name)


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
