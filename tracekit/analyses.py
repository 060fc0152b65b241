"""Run the analyses in `queries/*.sql` over `TraceTables` in embedded DuckDB.

Each query file starts with a header of `-- key: value` comment lines:

    -- question: Where does GPU time go, per rank?
    -- inputs: events, edges
    -- columns:
    --   rank: rank
    --   busy_ms: ms, time at least one GPU op runs
    --     (a deeper-indented line continues the column's description)
    -- notes: free text (definitions, deliberate differences from other tools)

Files named `_*.sql` are preludes, not analyses: SQL shared by several queries (macros such as the category
rules in `_categories.sql`), run in name order (a later file may use an earlier one's macros) on every connection
before any query. Preludes hold only `create or replace macro` statements (idempotent, cheap), so running them again
on a connection is harmless.

An input may be another analysis (e.g. `-- inputs: op_summary, ranks` in the cross-rank queries): it is run first
and its result registered under its name, so a query reads it like a table.

Python only orchestrates: it loads the text, registers the tables and returns the result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import duckdb
import polars as pl

from .tables import TraceTables

PACKAGE_DIR = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Top-level folder NAME (queries, reports) beside the package in a checkout, or the `_NAME` copy inside an
    installed wheel (pyproject's force-include)."""
    for candidate in (PACKAGE_DIR.parent / name, PACKAGE_DIR / f"_{name}"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"{name}/ not found next to the tracekit package")


def queries_dir() -> Path:
    return data_dir("queries")


@dataclass(frozen=True)
class Query:
    name: str
    sql: str
    question: str
    inputs: tuple[str, ...]
    columns: dict[str, str]  # column → "unit, meaning"
    notes: str


HEADER_LINE = re.compile(r"^--\s?(.*)$")


def parse_header(name: str, text: str) -> Query:
    fields: dict[str, str] = {}
    columns: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        match = HEADER_LINE.match(line)
        if not match:
            break
        body = match.group(1)
        if body.startswith("    ") and current == "columns" and columns:  # a column's description, continued
            last = next(reversed(columns))
            columns[last] = f"{columns[last]} {body.strip()}"
            continue
        if body.startswith("  ") and current == "columns":
            col, _, desc = body.strip().partition(":")
            columns[col.strip()] = desc.strip()
            continue
        key, sep, value = body.partition(":")
        if sep and re.fullmatch(r"[a-z_]+", key.strip()):
            current = key.strip()
            fields[current] = value.strip()
        elif current:
            fields[current] = (fields[current] + " " + body.strip()).strip()
    missing = {"question", "inputs", "columns"} - fields.keys()
    if missing:
        raise ValueError(f"queries/{name}.sql: header lacks {sorted(missing)}")
    inputs = tuple(t.strip() for t in fields["inputs"].split(",") if t.strip())
    return Query(name, text, fields["question"], inputs, columns, fields.get("notes", ""))


@cache
def load_query(name: str) -> Query:
    path = queries_dir() / f"{name}.sql"
    return parse_header(name, path.read_text())


def available() -> list[str]:
    return sorted(p.stem for p in queries_dir().glob("*.sql") if not p.stem.startswith("_"))


@cache
def preludes() -> str:
    """The text of every `_*.sql` prelude, in name order."""
    return "\n".join(p.read_text() for p in sorted(queries_dir().glob("_*.sql")))


# Table macros that several analyses call. DuckDB inlines macros, so each query would recompute them; a connection
# made for many analyses computes each once into a temp table and points the macro at it (in this order: each
# uses the ones before it).
SHARED_TABLE_MACROS = ("gpu_ops", "launch_op_ancestors", "op_calls")


def connect(tables: TraceTables, materialize: bool = False, threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with every table registered and the shared macros defined.

    With `materialize`, the shared table macros are computed now, once (worth it when running several analyses).
    `threads` caps DuckDB's threads (default: all cores); the analyses give the same bits with any number.
    """
    con = tables.connect(threads=threads)
    con.execute(preludes())
    if materialize:
        for name in SHARED_TABLE_MACROS:
            con.execute(f"create or replace temp table {name}_result as from {name}();"
                        f"create or replace macro {name}() as table from {name}_result")
    return con


def sql(tables: TraceTables, query: str) -> pl.DataFrame:
    """Ad-hoc SQL over the tables, with the shared macros (op_category, op_calls(), ...) available."""
    with connect(tables) as con:
        return con.sql(query).pl()


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
