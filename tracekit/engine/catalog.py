"""The SQL catalog: the files of `queries/`, their headers, and DuckDB connections with their macros defined.

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

from tracekit.engine import connection
from tracekit.engine.tables import TraceTables

PACKAGE_DIR = Path(__file__).resolve().parent.parent


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

    With `materialize` (a connection for running several analyses), the shared table macros are computed now, once,
    and DuckDB's memory is held to the tables' size (`connection.limit_to_input`).
    `threads` caps DuckDB's threads (default: all cores); the analyses give the same bits with any number.
    """
    con = tables.connect(threads=threads)
    con.execute(preludes())
    if materialize:
        connection.limit_to_input(con, tables.nbytes)
        for name in SHARED_TABLE_MACROS:
            con.execute(f"create or replace temp table {name}_result as from {name}();"
                        f"create or replace macro {name}() as table from {name}_result")
    return con


def sql(tables: TraceTables, query: str) -> pl.DataFrame:
    """Ad-hoc SQL over the tables, with the shared macros (op_category, op_calls(), ...) available."""
    with connect(tables) as con:
        return con.sql(query).pl()
