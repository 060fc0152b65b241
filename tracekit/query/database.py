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
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from tracekit import schema
from tracekit.engine import catalog, connection
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.inputs import dataset_input
from tracekit.pipeline import load
from tracekit.read.dataset import check_dataset, check_dataset_rows, dataset_table_files, first_line


class TraceDatabase:
    """Every table of a trace set, its analyses and macros, on one embedded DuckDB connection.

    `con` is that connection, for what the methods do not cover (`db.con.sql(...)` returns a DuckDB relation;
    `catalog.prepare(db.con, text)` defines the macros and analysis views TEXT names, as `sql` does). Close it with `close()` or use the database as a context manager.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, source: str):
        self.con = con
        self.source = source
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
            return self.sql(catalog.load_query(name).sql)
        with self.scoped(rank=rank, step=step) as part:
            return part.query(name)

    def scoped(self, *, rank: int | list[int] | None = None, step: int | None = None) -> TraceDatabase:
        """A new database over part of this one: the ranks listed, and/or one training step.

        A step keeps, on each rank, the events of step_members() (queries/lib/steps.sql: the host events starting
        inside its ProfilerStep#N window, the GPU ops those launched wherever they ran, ...), the same events as
        every other --step; instants and flows inside the window; and the edges between kept events. Ranks without
        that step are left out.
        """
        ranks = None if rank is None else [rank] if isinstance(rank, int) else list(rank)
        where_rank = "true" if ranks is None else f"rank in ({', '.join(str(int(r)) for r in ranks)})"
        con = self.con
        if step is not None:
            catalog.load_includes(con, ["lib/steps"])
            steps = con.sql(f"select distinct step from step_windows() where {where_rank} order by step").fetchall()
            if (int(step),) not in steps:
                where = "the ranks asked for" if ranks else "any rank"
                raise InputError(f"step {step}: no ProfilerStep#{step} on {where} "
                                 f"(steps there: {', '.join(str(s) for s, in steps) or 'none'})")
            con.execute(f"create or replace temp table scope_events as "
                        f"select rank, id from step_events({int(step)}) where {where_rank}")
            con.execute(f"create or replace temp table scope_windows as "
                        f"select * from step_windows() where step = {int(step)} and {where_rank}")
            kept = {name: con.sql(scoped_rows_sql(name, where_rank)).to_arrow_table() for name in TraceTables.names()}
            con.execute("drop table scope_events; drop table scope_windows")
        else:
            kept = {name: con.sql(f"from {name} where {where_rank}").to_arrow_table() for name in TraceTables.names()}
        label = " ".join(filter(None, (ranks is not None and f"rank={ranks}", step is not None and f"step={step}")))
        return from_tables(TraceTables().with_tables(**kept), f"{self.source} [{label}]")

    def tables(self) -> list[str]:
        return TraceTables.names()

    def _known(self, name: str) -> str:
        if name not in TraceTables.names() and name not in catalog.viewable():
            raise InputError(f"{name}: no such table or analysis (tables: {', '.join(TraceTables.names())}; "
                             "analyses: `tracekit queries`)")
        return name


def open_traces(inputs: str | Path | list[str | Path], rank: int | None = None, progress=None) -> TraceDatabase:
    """Open trace files, directories of ranks, or one ingested dataset (in place, nothing re-parsed).

    `rank` and `progress` as in `tracekit.load`.
    """
    paths = [inputs] if isinstance(inputs, (str, Path)) else list(inputs)
    if (dataset := dataset_input(paths)) is not None:
        return open_dataset(dataset)
    return from_tables(load(paths, rank=rank, progress=progress), ", ".join(map(str, paths)))


def from_tables(tables: TraceTables, source: str = "tables") -> TraceDatabase:
    """A database over tables already in memory (registered with DuckDB, not copied)."""
    return TraceDatabase(tables.connect(), source)


def open_dataset(path: Path) -> TraceDatabase:
    """A database whose tables are views over the Parquet files of an ingested dataset."""
    expected = check_dataset(path)["tables"]
    files_of = {name: dataset_table_files(path, name) for name in TraceTables.names()}
    # footers only: an altered or corrupt table is named now, not at the first query
    check_dataset_rows(path, {name: sum(map(parquet_rows, files)) for name, files in files_of.items()}, expected)
    con = connection.connect()
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
            raise InputError(f"{path / name}: not readable as this table ({' '.join(str(exc).split())})") from None
    return TraceDatabase(con, str(path))



# Analyses that read only tables and other analyses: each is a view of its name (catalog.prepare)
ANALYSES_AS_VIEWS = catalog.viewable()


def parquet_rows(path: Path) -> int:
    try:
        return pq.read_metadata(path).num_rows
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{path}: not a readable Parquet file ({first_line(exc)})") from None


def scoped_rows_sql(name: str, where_rank: str) -> str:
    """The rows of table NAME that belong to the events of `scope_events` and windows of `scope_windows`."""
    if name == "events":
        return "select e.* from events e semi join scope_events s on s.rank = e.rank and s.id = e.id"
    if name == "edges":
        return ("select g.* from edges g "
                "semi join scope_events a on a.rank = g.rank and a.id = g.src "
                "semi join scope_events b on b.rank = g.rank and b.id = g.dst "
                "where g.kind not like 'et\\_%' escape '\\' "
                f"union all select * from edges where kind like 'et\\_%' escape '\\' and {where_rank}")
    if name in ("instants", "flows"):
        return (f"select t.* from {name} t semi join scope_windows w "
                "on w.rank = t.rank and t.ts >= w.start_ns and t.ts < w.end_ns")
    return f"from {name} where rank in (select rank from scope_windows)"


def sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def sql_error_message(exc: duckdb.Error, query: str) -> str:
    """DuckDB's message and the query, each on one line."""
    return f"SQL: {' '.join(str(exc).split())} (query: {' '.join(query.split())})"
