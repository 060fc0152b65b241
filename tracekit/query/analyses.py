"""Run the analyses of the SQL catalog over `TraceTables`: each after the analyses it reads, on one connection.

An input may be another analysis (e.g. `-- inputs: op_summary, ranks` in the cross-rank queries): it is run first
and its result registered under its name, so a query reads it like a table.
"""

from __future__ import annotations

import re

import duckdb
import polars as pl

from tracekit.engine.catalog import available, connect, load_query, queries_dir
from tracekit.engine.tables import TraceTables


def analysis_inputs(name: str) -> list[str]:
    """The other analyses NAME reads (its inputs named like a query that are not tables), in header order."""
    return [i for i in load_query(name).inputs if i not in TraceTables.names() and re.fullmatch(r"[a-z_0-9]+", i)]


def run(tables: TraceTables, name: str, con: duckdb.DuckDBPyConnection | None = None) -> pl.DataFrame:
    """The result of queries/NAME.sql over `tables` (on `con` when given: one made by `connect`); the analyses it
    reads are run first."""
    if con is not None:
        return run_into(con, name, {})
    with connect(tables) as fresh:
        return run_into(fresh, name, {})


def run_into(con: duckdb.DuckDBPyConnection, name: str, results: dict[str, pl.DataFrame],
             failures: dict[str, str] | None = None, _needed_by: tuple[str, ...] = ()) -> pl.DataFrame | None:
    """Run NAME on `con` after the analyses it reads, registering each result as a view of its name.

    `results` caches what already ran. With `failures`, a query that is missing or fails (or needs one that did)
    is recorded there as a one-line reason and None returned, instead of raising.
    """
    if name in results:
        return results[name]
    if failures is not None and name in failures:
        return None
    if name in _needed_by:
        raise ValueError(f"queries/{name}.sql: circular inputs {' → '.join(_needed_by + (name,))}")
    try:
        if not (queries_dir() / f"{name}.sql").is_file():
            raise FileNotFoundError(f"queries/{name}.sql does not exist")
        for dep in analysis_inputs(name):
            if not (queries_dir() / f"{dep}.sql").is_file():
                raise FileNotFoundError(f"queries/{name}.sql reads {dep}, which is neither a table nor an analysis")
            if run_into(con, dep, results, failures, _needed_by + (name,)) is None:
                raise LookupError(f"needs {dep}, which failed: {failures[dep]}")
        result = con.sql(load_query(name).sql).pl()
    except (FileNotFoundError, LookupError, duckdb.Error) as exc:
        if failures is None:
            raise
        failures[name] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None
    results[name] = result
    con.register(name, result.to_arrow())
    return result


def run_all(tables: TraceTables, names: list[str] | None = None, failures: dict[str, str] | None = None,
            progress=None, threads: int | None = None) -> dict[str, pl.DataFrame]:
    """Several analyses over one connection (tables registered, shared macros computed once, each result shared
    with the analyses that read it).

    With `failures`, missing or failing queries are reported there instead of raised; `progress(name)` is called
    after each requested analysis; `threads` as in `connect`.
    """
    results: dict[str, pl.DataFrame] = {}
    wanted = names or available()
    with connect(tables, materialize=True, threads=threads) as con:
        for name in wanted:
            run_into(con, name, results, failures)
            if progress:
                progress(name)
    return {name: results[name] for name in wanted if name in results}
