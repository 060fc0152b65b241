"""`TraceTables`: the Arrow tables of one or more ranks, and SQL over them."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from tracekit import schema
from tracekit.engine import connection, peaks

if TYPE_CHECKING:
    import polars as pl  # imported where used: `tracekit ingest` holds these tables and needs no polars


def _empty(name: str):
    return field(default_factory=lambda: schema.empty(name))


@dataclass(frozen=True)
class TraceTables:
    """Every table of a trace set. Immutable: stages return new instances (`with_tables`).

    `device_peaks` is no trace table but reference data every connection gets beside them (engine/peaks.py): the
    shipped table unless one is given (`with_peaks`, the CLI's `--peak FILE`).
    """

    events: pa.Table = _empty("events")
    instants: pa.Table = _empty("instants")
    flows: pa.Table = _empty("flows")
    threads: pa.Table = _empty("threads")
    processes: pa.Table = _empty("processes")
    ranks: pa.Table = _empty("ranks")
    diagnostics: pa.Table = _empty("diagnostics")
    edges: pa.Table = _empty("edges")
    et_nodes: pa.Table = _empty("et_nodes")
    et_tensors: pa.Table = _empty("et_tensors")
    graph_kernels: pa.Table = _empty("graph_kernels")
    device_peaks: pa.Table | None = None

    @classmethod
    def names(cls) -> list[str]:
        """The trace tables (schema.py), without the reference table."""
        return [f.name for f in fields(cls) if f.name != peaks.TABLE]

    @classmethod
    def reference_names(cls) -> list[str]:
        """Tables every connection has that no trace holds (queries read them like the trace tables)."""
        return [peaks.TABLE]

    def items(self):
        return ((name, getattr(self, name)) for name in self.names())

    def with_tables(self, **tables: pa.Table) -> TraceTables:
        return replace(self, **{k: schema.conform(k, v) for k, v in tables.items()})

    def with_peaks(self, table: pa.Table | None) -> TraceTables:
        """The same tables with another device peaks table (None: the shipped one)."""
        return replace(self, device_peaks=table)

    def polars(self, name: str) -> pl.DataFrame:
        import polars as pl

        return pl.from_arrow(getattr(self, name))

    @cached_property
    def nbytes(self) -> int:
        """The tables' bytes, summed once per instance (the tables never change): Arrow sums every buffer of every
        chunk, ~7-15 ms on a 53 MB trace, and opening the analyses' connection asks twice."""
        return sum(table.nbytes for _, table in self.items())

    @property
    def rank_list(self) -> list[int]:
        return sorted(self.ranks.column("rank").to_pylist())

    def connect(self, con: duckdb.DuckDBPyConnection | None = None,
                threads: int | None = None) -> duckdb.DuckDBPyConnection:
        """An embedded DuckDB connection (`connection.connect`) with every table registered as a view of the same
        name; `threads` by default DuckDB's, at most as `connection.threads_for_input` says for tables of this size."""
        con = con or connection.connect(threads, at_most=connection.threads_for_input(self.nbytes))
        for name, table in self.items():
            con.register(name, table)
        con.register(peaks.TABLE, self.device_peaks if self.device_peaks is not None else peaks.default_peaks())
        return con

    def sql(self, query: str) -> pl.DataFrame:
        """Run ad-hoc SQL over the tables (with the catalog's macros and analyses: `catalog.sql`, the one SQL entry
        point); the result as a Polars frame."""
        from tracekit.engine import catalog  # the catalog registers these tables: imported here, not at the top

        return catalog.sql(self, query)
