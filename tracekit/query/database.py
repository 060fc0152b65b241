"""Open traces once, then ask them questions in SQL: the Python API behind `tracekit sql`.

    import tracekit
    db = tracekit.open("traces/")                # trace files, a directory of ranks, or an ingested dataset
    db.sql("select kind, count(*) from events group by kind")          # polars DataFrame
    db.query("op_summary", rank=0)               # an analysis of queries/, scoped to rank 0
    db.table("events"), db.arrow("events")       # a whole table, as Polars or Arrow

One embedded DuckDB connection holds every table (`events`, `edges`, ...), the macros of `queries/lib/` and a
view per analysis of `queries/` under its own name, so ad-hoc SQL can join an analysis with the tables. Macros and
views are defined as queries first name them (`catalog.prepare`: the same as every other SQL entry point). An ingested
dataset is opened in place: its tables are views over its Parquet files, read only as far as a query needs.

`safe=True` is for services that run SQL written by others: the connection is locked down once the tables are bound
(`connection.lock_down`: no file, URL, extension or setting access); a dataset is then read into memory first, as its
views would read Parquet files afterwards.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa

from tracekit import schema, storage
from tracekit.engine import catalog, connection, peaks
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.inputs import UNREADABLE, Inputs, resolve_inputs, warn_about_files
from tracekit.pipeline import load
from tracekit.query import step_scope
from tracekit.read.dataset import check_dataset, check_dataset_rows, dataset_table_files, first_line
from tracekit.storage import Location


class TraceDatabase:
    """Every table of a trace set, its analyses and macros, on one embedded DuckDB connection.

    `con` is that connection, for what the methods do not cover (`db.con.sql(...)` returns a DuckDB relation;
    `catalog.prepare(db.con, text)` defines the macros and analysis views TEXT names, as `sql` does). Close it with
    `close()` or use the database as a context manager. `safe`: the connection is locked down (see the module).
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, source: str, safe: bool = False):
        self.con = con
        self.source = source
        self.safe = safe
        self.analysis_problems: dict[str, str] = {}  # analyses whose view could not be defined, with the reason

    def __enter__(self) -> TraceDatabase:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.con.close()

    def __repr__(self) -> str:
        return f"TraceDatabase({self.source!r})"

    def sql(self, query: str) -> pl.DataFrame:
        """The result of a query as a Polars frame; a DuckDB error is raised as InputError naming the query."""
        return self.relation(query).pl()

    def sql_arrow(self, query: str) -> pa.Table:
        return self.relation(query).to_arrow_table()

    def relation(self, query: str) -> duckdb.DuckDBPyRelation:
        """The query as a DuckDB relation (lazy: `.pl()`, `.to_arrow_table()`, `.fetch_record_batch()`, ...)."""
        catalog.prepare(self.con, query, self.analysis_problems)
        try:
            return self.con.sql(query)
        except duckdb.Error as exc:
            raise InputError(sql_error_message(exc, query)) from None

    def table(self, name: str) -> pl.DataFrame:
        """A table (see `tracekit schema`) or an analysis's result, whole, as a Polars frame."""
        return self.sql(f"from {self._known(name)}")

    def arrow(self, name: str) -> pa.Table:
        """The same as `table`, as an Arrow table."""
        return self.sql_arrow(f"from {self._known(name)}")

    def query(self, name: str, *, rank: int | list[int] | None = None, step: int | None = None) -> pl.DataFrame:
        """The result of analysis NAME (`tracekit queries`), over the whole trace set or, with `rank` and/or `step`
        (the ProfilerStep#N of each rank), over that part of it (see `scoped`)."""
        if name not in catalog.available():
            raise InputError(f"{name}: no such analysis (one of: {', '.join(catalog.available())})")
        if rank is None and step is None:
            return self.sql(catalog.load_query(name).statement)
        with self.scoped(rank=rank, step=step) as part:
            return part.query(name)

    def scoped(self, *, rank: int | list[int] | None = None, step: int | None = None) -> TraceDatabase:
        """A new database over part of this one: the ranks listed, and/or one training step.

        A step keeps, on each rank, the events of step_members() (queries/lib/steps.sql: the host events starting
        inside its ProfilerStep#N window, the GPU ops those launched wherever they ran, ...), the same events as
        every other --step; instants and flows inside the window; and the edges between kept events. Ranks without
        that step are left out. (The rows of a step: tracekit/query/step_scope.py.)
        """
        ranks = None if rank is None else [rank] if isinstance(rank, int) else list(rank)
        where_rank = "true" if ranks is None else f"rank in ({', '.join(str(int(r)) for r in ranks)})"
        con = self.con
        if step is not None:
            kept = step_scope.scoped_tables(con, int(step), ranks)
        else:
            kept = {name: con.sql(f"from {name} where {where_rank}").to_arrow_table() for name in TraceTables.names()}
        label = " ".join(filter(None, (ranks is not None and f"rank={ranks}", step is not None and f"step={step}")))
        part = TraceTables().with_tables(**kept).with_peaks(self.con.sql(f"from {peaks.TABLE}").to_arrow_table())
        return from_tables(part, f"{self.source} [{label}]", safe=self.safe)

    def use_peaks(self, table: pa.Table) -> None:
        """Answer with these device peaks (`peaks.read_peaks`, the CLI's --peak FILE) instead of the shipped ones."""
        self.con.register(peaks.TABLE, table)

    def tables(self) -> list[str]:
        return TraceTables.names()

    def _known(self, name: str) -> str:
        if name not in TraceTables.names() and name not in catalog.viewable():
            raise InputError(f"{name}: no such table or analysis (tables: {', '.join(TraceTables.names())}; "
                             "analyses: `tracekit queries`)")
        return name


def open_traces(inputs: str | Path | list[str | Path] | Inputs, rank: int | None = None,
                progress=None, safe: bool = False, as_ranks: bool = False,
                graph_captures: str | Path | list[str | Path] = ()) -> TraceDatabase:
    """Open trace files, directories of ranks, or one ingested dataset (in place, nothing re-parsed).

    `rank`, `progress`, `as_ranks` and `graph_captures` as in `tracekit.load`, and the same input rules: InputError for an input with
    no events or for files that are not ranks of one run,
    a `tracekit.CutTraceWarning` for each cut trace file (in a dataset: each cut when it was ingested).
    `safe=True`: for SQL written by others; queries may not touch files, URLs, extensions or settings, and one that
    tries raises InputError. A dataset is then read whole into memory (Arrow) instead of opened in place.
    """
    inputs = resolve_inputs(inputs, graph_captures)
    if safe:
        return from_tables(load(inputs, rank=rank, progress=progress, as_ranks=as_ranks), inputs.label, safe=True)
    if inputs.dataset is not None and not inputs.graph_captures:  # with captures: read, then matched to them
        db = open_dataset(inputs.dataset)
        warn_about_files(db.sql_arrow(f"from diagnostics where reason in ('truncated', '{UNREADABLE}')"))
        return db
    return from_tables(load(inputs, rank=rank, progress=progress, as_ranks=as_ranks), inputs.label)


def from_tables(tables: TraceTables, source: str = "tables", safe: bool = False) -> TraceDatabase:
    """A database over tables already in memory (registered with DuckDB, not copied); `safe` as in `open_traces`."""
    con = tables.connect()
    return TraceDatabase(connection.lock_down(con) if safe else con, source, safe)


def open_dataset(path: Location) -> TraceDatabase:
    """A database whose tables are views over the Parquet files of an ingested dataset; at a URL, DuckDB reads them
    in place through the URL's fsspec file system (tracekit.storage)."""
    path = storage.location(path)
    expected = check_dataset(path)["tables"]
    files_of = {name: dataset_table_files(path, name) for name in TraceTables.names()}
    # footers only: an altered or corrupt table is named now, not at the first query
    check_dataset_rows(path, {name: sum(map(parquet_rows, files)) for name, files in files_of.items()}, expected)
    con = connection.connect()
    if storage.is_url(path):
        con.register_filesystem(storage.filesystem(path)[0])
    con.register(peaks.TABLE, peaks.default_peaks())
    for name, files in files_of.items():
        if not files:
            con.register(name, schema.empty(name))
            continue
        columns = ", ".join(f'"{c}"' if c != "rank" else "rank::integer as rank"
                            for c in schema.TABLES[name].column_names)
        file_list = ", ".join(sql_string(str(f)) for f in files)
        try:
            con.execute(f"create view {name} as select {columns} "
                        f"from read_parquet([{file_list}], hive_partitioning = true)")
        except duckdb.Error as exc:
            raise InputError(f"{storage.join(path, name)}: not readable as this table ({' '.join(str(exc).split())})") from None
    return TraceDatabase(con, str(path))



def parquet_rows(path: Location) -> int:
    import pyarrow.parquet as pq  # here: only a dataset's footers need it, not a query over trace files

    try:
        if storage.is_url(path):
            with storage.open_binary(path) as fh:
                return pq.read_metadata(fh).num_rows
        return pq.read_metadata(path).num_rows
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{path}: not a readable Parquet file ({first_line(exc)})") from None




def sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


SAFE_REFUSAL = "refused: safe mode allows no file, URL, extension or setting access"


def sql_error_message(exc: duckdb.Error, query: str) -> str:
    """DuckDB's message and the query, on one line (a locked-down connection's refusal says so first)."""
    refused = f"{SAFE_REFUSAL}; " if connection.is_refused(exc) else ""
    return f"SQL: {refused}{' '.join(str(exc).split())} (query: {' '.join(query.split())})"
