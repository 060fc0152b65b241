"""Run the analyses of the SQL catalog over `TraceTables`: each after the analyses it reads, on one connection.

An input may be another analysis (e.g. `-- inputs: op_summary, ranks` in the cross-rank queries): it is run first
and its result kept in a temp table of its name, so a query reads it like a table. The order comes from the
catalog's one resolver (`catalog.analysis_order`); what is bound here is the materialised result (a run of several
analyses shares each result), where `catalog.prepare` binds a view.
"""

from __future__ import annotations

import duckdb
import polars as pl

from tracekit.engine.catalog import analysis_inputs, analysis_order, available, connect, ready
from tracekit.engine.tables import TraceTables

__all__ = ["analysis_inputs", "run", "run_all", "run_into"]


def run(tables: TraceTables, name: str, con: duckdb.DuckDBPyConnection | None = None) -> pl.DataFrame:
    """The result of queries/NAME.sql over `tables` (on `con` when given: one made by `connect`); the analyses it
    reads are run first."""
    if con is not None:
        return run_into(con, name, {})
    with connect(tables) as fresh:
        return run_into(fresh, name, {})


def run_into(con: duckdb.DuckDBPyConnection, name: str, results: dict[str, pl.DataFrame],
             failures: dict[str, str] | None = None) -> pl.DataFrame | None:
    """Run NAME on `con` after the analyses it reads, each result kept in a temp table of its name.

    `results` caches what already ran. With `failures`, a query that is missing or fails (or needs one that did)
    is recorded there as a one-line reason and None returned, instead of raising.
    """
    if name in results:
        return results[name]
    failed = {} if failures is None else failures
    if name in failed:
        return None
    try:
        order = analysis_order(name)
    except FileNotFoundError as exc:
        if failures is None:
            raise
        failed[name] = str(exc)
        return None
    for step in order:
        if step in results or step in failed:
            continue
        try:
            for dep in analysis_inputs(step):
                if dep in failed:
                    raise LookupError(f"needs {dep}, which failed: {failed[dep]}")
            # kept in a temp table of its name, which the analyses after it read: `con.sql(query).pl()` would bind
            # the query twice (once for the relation's schema, once to run it), ~0.1 CPU s of a report's analyses
            con.execute(f"create or replace temp table {step} as {ready(con, step)}")
            result = con.table(step).pl()
        except (LookupError, duckdb.Error) as exc:
            if failures is None:
                raise
            failed[step] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            continue
        results[step] = result
    return results.get(name)


def run_all(tables: TraceTables, names: list[str] | None = None, failures: dict[str, str] | None = None,
            progress=None, threads: int | None = None, given: dict[str, pl.DataFrame] | None = None,
            con: duckdb.DuckDBPyConnection | None = None) -> dict[str, pl.DataFrame]:
    """Several analyses over one connection (tables registered, shared macros computed once, each result shared
    with the analyses that read it).

    With `failures`, missing or failing queries are reported there instead of raised; `progress(name)` is called
    after each requested analysis; `threads` as in `connect`. `given` results (computed elsewhere, e.g. each rank's
    on its own tables) are read by the analyses as they are, not run again. On `con` when given (one made by
    `connect(tables, materialize=True)`, which the caller uses further), else on a connection of its own.
    """
    if con is None:
        with connect(tables, materialize=True, threads=threads) as fresh:
            return run_all(tables, names, failures, progress, threads, given, fresh)
    results: dict[str, pl.DataFrame] = dict(given or {})
    wanted = names or available()
    for name, frame in results.items():
        con.register(name, frame.to_arrow())
    for name in wanted:
        run_into(con, name, results, failures)
        if progress:
            progress(name)
    return {name: results[name] for name in wanted if name in results}


def combine_ranks(parts: list[dict[str, pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    """Per-rank analysis results computed on parts of the ranks (each file's own tables), as one run over all of
    them gives them: each analysis's rows of every part, rank by rank (a per-rank analysis orders by rank first,
    and its rows for a rank depend on that rank's rows only: tests/query/test_per_rank.py)."""
    names = list(dict.fromkeys(name for part in parts for name in part))
    combined = {}
    for name in names:
        frames = [part[name] for part in parts if name in part]
        frame = frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical_relaxed")
        combined[name] = frame.sort("rank", maintain_order=True) if "rank" in frame.columns else frame
    return combined
