"""Scoping a trace set to training steps: the rows of every table that belong to chosen steps.

A step's events are step_members() (queries/lib/steps.sql), the one definition every --step, `db.scoped(step=)` and the
diff's per-step values use. Each chosen (rank, step) is a scope with a rank of its own, `scope_rank`: the step's rank
when one step is kept, or, to compute an analysis for every step in one run (analyses key on rank), one pseudo-rank
per (rank, step). A scope holds:
  - events: the step's members; graph_kernels: the rows of those (replayed GPU ops matched to their capture);
  - edges: those between two events of the same scope, and the et_* edges of the scope's rank (Execution Trace
    nodes belong to no step);
  - instants, flows: those starting inside the step's CPU window;
  - every other table (ranks, threads, processes, diagnostics, et_nodes, et_tensors): the rows of the scope's rank.
Rows keep their columns, with `rank` replaced by `scope_rank`.

This module is the one step scoper: the API (`db.scoped(step=)`, `run --step`), the diff's per-step values, `graph
--step`, `timeline --step` and `replay --step` all select a step here, and `require_step` is the one "no such step"
check and message.
"""

from __future__ import annotations

import duckdb
import polars as pl
import pyarrow as pa

from tracekit.engine import catalog
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError

# The scopes are the temp tables of the stage queries/scope/members.sql and the files it reads (their `outputs:`):
SCOPES = "step_scopes"  # rank, step, scope_rank, start_ns, end_ns (the CPU step window): scope/windows.sql
MEMBERS = "step_scope_members"  # rank, id, scope_rank: scope/members.sql
# How each table is scoped: queries/scope/NAME.sql over the relation `scoped_source`.
SCOPE_QUERY = {"events": "events", "edges": "edges", "instants": "in_window", "flows": "in_window",
               "graph_kernels": "events"}


def define_scopes(con: duckdb.DuckDBPyConnection, *, ranks: list[int] | None = None, step: int | None = None
                  ) -> pl.DataFrame | None:
    """Create the temp tables SCOPES and MEMBERS on `con` for the steps of step_windows() that hold events, on
    `ranks` (None: every rank): step `step`, each scope on its own rank; or, with step None, every step, each on a
    pseudo-rank. Return the scopes (scope_rank, rank, step) in (rank, step) order; None (nothing left defined) when
    pseudo-ranks would overflow a 32-bit rank."""
    step = None if step is None else int(step)
    made = catalog.run_stage(con, ["scope/members"], temp_tables=True, parameters={
        "scope/members_by_step": {"ranks": None if ranks is None else [int(r) for r in ranks], "step": step},
        "scope/windows": {"step": step}})
    for name in made.keys() - {SCOPES, MEMBERS}:
        con.execute(f"drop table {name}")
    if con.sql(f"select count(*) filter (where scope_rank is null) > 0 from {SCOPES}").fetchall()[0][0]:
        drop_scopes(con)
        return None
    return con.sql(f"select scope_rank, rank, step from {SCOPES} order by rank, step").pl()


def steps_of(con: duckdb.DuckDBPyConnection, ranks: list[int] | None = None) -> list[int]:
    """The step numbers of step_windows() on `ranks` (None: every rank), ascending (queries/scope/steps.sql)."""
    made = catalog.run_stage(con, ["scope/steps"], {"scope/steps": {
        "ranks": None if ranks is None else [int(r) for r in ranks]}})
    con.unregister("scope_steps")
    return made["scope_steps"].column("step").to_pylist()


def require_step(con: duckdb.DuckDBPyConnection, step: int, ranks: list[int] | None = None) -> None:
    """InputError, the one "no such step" message of every --step, unless a rank (of `ranks`; None: any) has a
    ProfilerStep#`step` window."""
    steps = steps_of(con, ranks)
    if int(step) not in steps:
        where = "the ranks asked for" if ranks is not None else "any rank"
        there = (", ".join(map(str, steps)) if len(steps) <= 10 else f"{steps[0]}..{steps[-1]}") or "none"
        raise InputError(f"--step {step}: no ProfilerStep#{step} on {where} (steps there: {there})")


def scoped_tables(con: duckdb.DuckDBPyConnection, step: int, ranks: list[int] | None = None) -> dict[str, pa.Table]:
    """The rows of each trace table registered on `con` that belong to step `step` of `ranks` (None: every rank),
    each rank keeping its own number; InputError (require_step) when no rank has that step."""
    require_step(con, step, ranks)
    define_scopes(con, ranks=ranks, step=int(step))
    try:
        return scoped_rows(con)
    finally:
        drop_scopes(con)


def with_every_step(con: duckdb.DuckDBPyConnection, tables: TraceTables, rows: bool = True, min_steps: int = 1,
                    steps: list[int] | None = None) -> tuple[TraceTables, pl.DataFrame] | None:
    """TABLES (registered on `con`) and, beside their rows, every step of every rank on a pseudo-rank of its own
    (above every rank of TABLES): what an analysis computes over them it computes over the whole trace and for every
    step in one run (analyses key on rank, and a per-rank analysis's rows for a rank depend on that rank's rows
    only). With the scopes (scope_rank, rank, step) that `unscoped` maps back; None when no rank holds `min_steps`
    steps (or pseudo-ranks would overflow a 32-bit rank). With `rows` false, TABLES as they are, for a caller that
    computes nothing per step but needs the steps. `steps`: the step numbers (`steps_of`), where the caller has them.

    The steps' rows are copied out of `con` once, so the analyses' shared tables cover them and the whole trace in
    one pass (`catalog.connect(materialize=True)`), and each analysis is planned once for both."""
    # fewer step numbers on all ranks together than asked for (a serving trace has none; a capture of one active
    # step, one): the step windows alone, not the scopes' statements (H100 Qwen in a diff: 0.13 -> 0.06 s)
    if len(steps_of(con) if steps is None else steps) < min_steps:
        return None
    scopes = define_scopes(con)
    if scopes is None:
        return None
    try:
        if not scopes.height or scopes.group_by("rank").len()["len"].max() < min_steps:
            return None
        if not rows:
            return tables, scopes
        steps = scoped_rows(con)
        return tables.with_tables(**{name: pa.concat_tables([table, steps[name].cast(table.schema)])
                                     for name, table in tables.items()}), scopes
    finally:
        drop_scopes(con)


def step_tables(tables: TraceTables, step: int) -> TraceTables:
    """TABLES cut to step `step` of every rank that has it (scoped_tables); reference tables (peaks) kept."""
    # the step windows (and the GPU ops they read) computed once, not by each of the scope's three stages: 0.22 ->
    # 0.17 s on the A100 trainer and the V100 resnet50 trace
    with catalog.connect(tables, materialize=True, held_to_input=False) as con:
        return tables.with_tables(**scoped_tables(con, step))


def drop_scopes(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(f"drop table if exists {SCOPES}; drop table if exists {MEMBERS}")


def scope_file(name: str) -> str:
    """The stage file (queries/scope/) selecting the rows of table NAME that belong to the scopes of define_scopes,
    with `rank` replaced by their scope's rank, from the relation `scoped_source`."""
    return f"scope/{SCOPE_QUERY.get(name, 'of_rank')}"


def scoped_rows(con: duckdb.DuckDBPyConnection) -> dict[str, pa.Table]:
    """The rows of every trace table registered on `con` that belong to the scopes of define_scopes (each table's
    scope file run on it as `scoped_source`)."""
    scoped = {}
    try:
        for name in TraceTables.names():
            con.table(name).create_view("scoped_source", replace=True)  # what the scope file reads
            scoped[name] = catalog.run_stage(con, [scope_file(name)], bound=(SCOPES, MEMBERS))["scoped_rows"]
    finally:
        con.execute("drop view if exists scoped_source")
        con.unregister("scoped_rows")
    return scoped


def unscoped(frame: pl.DataFrame, scopes: pl.DataFrame) -> pl.DataFrame:
    """A result computed per scope rank, with its real (rank, step) in place of the scope rank."""
    return (frame.rename({"rank": "scope_rank"})
            .join(scopes.with_columns(pl.col("scope_rank").cast(frame.schema["rank"])), on="scope_rank", how="left",
                  maintain_order="left")
            .drop("scope_rank")
            .select("rank", "step", pl.exclude("rank", "step")))
