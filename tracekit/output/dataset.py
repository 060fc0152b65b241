"""`TraceTables` → a Parquet dataset partitioned by rank (what `tracekit ingest` writes), in a local folder or at a
URL (tracekit.storage: `s3://bucket/dataset`, any file system fsspec knows)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracekit import schema, storage
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.inputs import Inputs, is_dataset, path_kind
from tracekit.pipeline import Progress, run_plan
from tracekit.output.atomic import created_dir, replacing_dir
from tracekit.read.dataset import NULL_PARTITION
from tracekit.storage import Location


def write_dataset(tables: TraceTables, out_dir: Location, force: bool = False) -> list[Location]:
    """Write every table as Parquet under out_dir/TABLE/rank=N/part-0.parquet (hive style). Returns the files written.

    Locally, the dataset is written into a new directory beside out_dir, which replaces out_dir (an existing dataset
    only with `force`) once complete: a failure leaves nothing behind and an existing dataset as it was. At a URL
    (object stores cannot rename a folder), as `building_dataset` says. The same tables give the same bytes.
    """
    out_dir = storage.location(out_dir)
    with building_dataset(out_dir, force) as building:
        written = write_tables(tables, building)
        write_marker(building, {name: t.num_rows for name, t in tables.items()}, tables.rank_list)
    return [storage.join(out_dir, storage.relative(p, building)) for p in written]


@dataclass(frozen=True)
class Ingested:
    rows: dict[str, int]
    ranks: list[int]
    dropped: int


def ingest(inputs: Inputs, out_dir: Location, executor=None, force: bool = False, rank: int | None = None,
           as_ranks: bool = False, progress: Progress | None = None) -> Ingested:
    """`tracekit ingest`: the plan (`pipeline.run_plan`) on EXECUTOR, each task writing its ranks' partitions into
    the dataset being built; the notes about no rank and the marker are written here, last. The bytes of
    `write_dataset` over the same input, on every executor."""
    with building_dataset(out_dir, force) as building:
        done = run_plan(inputs, write_ranked, (building,), executor, rank, as_ranks, progress)
        remove_other_ranks(building, done.ranks)
        about_no_rank = done.diagnostics.filter(pc.is_null(done.diagnostics.column("rank")))
        write_tables(TraceTables(diagnostics=schema.conform("diagnostics", about_no_rank)), building)
        rows = done.rows | {"diagnostics": done.diagnostics.num_rows}
        write_marker(building, rows, done.ranks)
    return Ingested(rows, done.ranks, sum(done.diagnostics.column("dropped").to_pylist()))


def write_ranked(tables: TraceTables, building: Location) -> None:
    """A task's ranks' partitions, written into the dataset being built. Notes about no rank are left to the
    driver, which writes every task's into one partition."""
    diagnostics = tables.diagnostics
    write_tables(tables.with_tables(diagnostics=diagnostics.filter(pc.is_valid(diagnostics.column("rank")))),
                 building)


@contextmanager
def building_dataset(out_dir: Location, force: bool = False) -> Iterator[Location]:
    """Where to write a dataset (by `write_tables`, from any process that sees it, then `write_marker`).

    Locally: a new directory, which takes out_dir's place when the block ends without error and is removed when it
    fails. At a URL: out_dir itself (an object store has no atomic rename), written with the marker last (readers
    refuse a folder without it); an existing dataset is removed first (marker first, so it is never read half
    removed), and when the block fails every object under out_dir is removed: no partial dataset remains.

    Refused (InputError) before anything is made: out_dir is a file, or a non-empty folder that is not a dataset, or
    a dataset without `force`.
    """
    if storage.is_url(out_dir):
        with building_at_url(out_dir, force) as building:
            yield building
        return
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        if not force:
            raise InputError(f"{out_dir}: directory is not empty (use --force to replace a dataset there)")
        if not is_dataset(out_dir):
            raise InputError(f"{out_dir}: not empty and not a tracekit dataset; refusing to overwrite it")
    with created_dir(out_dir.parent), replacing_dir(out_dir) as building:
        yield building


@contextmanager
def building_at_url(out_dir: str, force: bool) -> Iterator[str]:
    kind = path_kind(out_dir)
    if kind not in ("dir", None):
        raise InputError(f"{out_dir}: exists and is not a directory")
    if kind == "dir" and storage.find_files(out_dir):
        if not force:
            raise InputError(f"{out_dir}: directory is not empty (use --force to replace a dataset there)")
        if not is_dataset(out_dir):
            raise InputError(f"{out_dir}: not empty and not a tracekit dataset; refusing to overwrite it")
    try:
        if kind == "dir":
            storage.remove(storage.join(out_dir, storage.DATASET_MARKER))
            storage.remove_tree(out_dir)
        yield out_dir
    except BaseException:
        storage.remove_tree(out_dir)
        raise


def write_tables(tables: TraceTables, building: Location) -> list[Location]:
    """Every non-empty table's partitions under `building` (one file per rank). Tables of different ranks can be
    written by different processes into one dataset: a rank's files depend on its rows only."""
    building = storage.location(building)
    written: list[Location] = []
    for name, table in tables.items():
        if table.num_rows:
            written += write_partitions(name, in_key_order(name, table), storage.join(building, name))
    return written


def remove_other_ranks(building: Location, ranks: list[int]) -> None:
    """Every partition under `building` of a rank not in RANKS removed: what a task left half-written before its
    worker died (its file is then left out), so the dataset holds the ranks its marker names and nothing else."""
    kept = {f"rank={r}" for r in ranks} | {f"rank={NULL_PARTITION}"}
    for file in storage.find_files(building):
        parts = storage.relative(file, building).split("/")
        if len(parts) == 3 and parts[1].startswith("rank=") and parts[1] not in kept:
            storage.remove_tree(storage.join(building, parts[0], parts[1]))


def write_marker(building: Location, rows: dict[str, int], ranks: list[int]) -> None:
    """The `_tracekit.json` marker, written last: readers take a folder without it for no dataset."""
    manifest = {"format": "tracekit", "schema_version": schema.SCHEMA_VERSION,
                "schema_fingerprint": schema.fingerprint(), "tables": rows, "ranks": ranks}
    storage.write_text(storage.join(building, storage.DATASET_MARKER), json.dumps(manifest, indent=1))


def in_key_order(name: str, table: pa.Table) -> pa.Table:
    """Rows sorted by the table's key, then by its other columns: one trace gives the same files however its rows
    came (edges and diagnostics come from multi-threaded DuckDB queries in no fixed order). A table already in that
    order is returned as it is; its Parquet pages then follow its chunks (the read's), the rows the same."""
    key = schema.TABLES[name].key
    ties = [f.name for f in table.schema if f.name not in key and not pa.types.is_nested(f.type)]
    order = pc.sort_indices(table, sort_keys=[(c, "ascending") for c in (*key, *ties)]).to_numpy()
    # events come from the reader in id order: the sort is cheap, but taking its wide string columns through an
    # identity order cost 0.16-0.22 s of an ingest of 33-53 MB of JSON
    if np.array_equal(order, np.arange(len(order), dtype=order.dtype)):
        return table
    return table.take(order)


def write_partitions(name: str, table: pa.Table, table_dir: Location) -> list[Location]:
    """One Parquet file per rank (rows in the table's order, `rank` in the directory name only), its footer naming
    the table and the schema version for readers that never see the marker. TABLE is in key order (`in_key_order`:
    `rank` first), so each rank's rows are one slice of it, written without a copy.

    pyarrow.dataset.write_dataset is not used: its background writer threads can abort the interpreter at exit
    (apache/arrow#36980) and it may write rows in any order.
    """
    table = table.replace_schema_metadata({b"tracekit.table": name.encode(),
                                           b"tracekit.schema_version": str(schema.SCHEMA_VERSION).encode()})
    rank = table.column("rank")
    table = table.drop_columns(["rank"])
    missing = rank.is_null().to_numpy(zero_copy_only=False)
    values = pc.fill_null(rank, 0).to_numpy()
    starts = [0, *(np.flatnonzero((values[1:] != values[:-1]) | (missing[1:] != missing[:-1])) + 1)]
    # a rank in two slices would write its file twice, the second over the first
    if len({(missing[s], values[s]) for s in starts}) < len(starts):
        raise ValueError(f"{name}: rows not grouped by rank; write_partitions takes a table in_key_order")
    written = []
    for start, end in zip(starts, [*starts[1:], table.num_rows]):
        value = NULL_PARTITION if missing[start] else str(values[start])
        part = table.slice(start, end - start)
        part_dir = storage.join(table_dir, f"rank={value}")
        path = storage.join(part_dir, "part-0.parquet")
        if not storage.is_url(path):
            # exist_ok: on a cluster, two files that claim one rank both write it before the driver, which sees
            # every claim, refuses the set (and removes the dataset being built)
            part_dir.mkdir(parents=True, exist_ok=True)
            pq.write_table(part, path)
        else:
            storage.make_dirs(part_dir)
            with storage.open_binary(path, "wb") as fh:
                pq.write_table(part, fh)
        written.append(path)
    return written
