"""Paths → `TraceTables`, and `TraceTables` ↔ a Parquet dataset partitioned by rank."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from . import schema
from .atomic import created_dir, replacing_dir
from .edges import build_edges
from .errors import InputError
from .et import attach_execution_traces
from .ingest import FileTables, TraceParts, file_rank, rank_tables, read_trace
from .tables import TraceTables

TRACE_SUFFIXES = (".json", ".json.gz")
NOT_TRACES = ("ground_truth.json",)  # written beside its traces by `tracekit synth`; skipped in directory scans
DATASET_MARKER = "_tracekit.json"

Progress = Callable[[Path, int], None]  # called after each file with (path, bytes read)


def is_dataset(path: Path) -> bool:
    return path_kind(path / DATASET_MARKER) == "file"


def dataset_input(paths: list[str | Path]) -> Path | None:
    """The ingested dataset folder when PATHS is exactly one, else None: the one test of "is this a dataset"."""
    if len(paths) == 1 and path_kind(Path(paths[0])) == "dir" and is_dataset(Path(paths[0])):
        return Path(paths[0])
    return None


def path_kind(path: Path) -> str | None:
    """'dir', 'file', 'other' (FIFO, device, socket) or None (nothing there). A path the system refuses to look up
    (a name over the file system's limit, a loop of links) is a user error naming the path, not a traceback."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise InputError(f"{path}: {(exc.strerror or str(exc)).lower()}") from None
    except ValueError as exc:  # an embedded NUL byte
        raise InputError(f"{path!r}: not a usable path ({exc})") from None
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


def find_trace_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand directories into the trace files they hold (sorted); check that every path exists."""
    files: list[Path] = []
    for p in map(Path, paths):
        kind = path_kind(p)
        if kind == "dir":
            found = sorted(f for f in p.iterdir()
                           if f.is_file() and f.name.endswith(TRACE_SUFFIXES) and f.name not in NOT_TRACES)
            if not found:
                raise InputError(f"{p}: directory holds no trace files (*.json, *.json.gz)")
            files += found
        elif kind is not None:
            # a FIFO or a device would block or never end: refused before anything opens it
            if kind != "file":
                raise InputError(f"{p}: not a regular file (a trace is a file or a directory of files)")
            files.append(p)
        elif p.is_symlink():
            raise InputError(f"{p}: broken symbolic link (to {os.readlink(p)}, which does not exist)")
        else:
            raise InputError(f"{p}: no such file or directory")
    if not files:
        raise InputError("no trace files given")
    return files


def load(paths: str | Path | Iterable[str | Path], rank: int | None = None,
         progress: Progress | None = None, edges: bool = True, workers: int | None = None) -> TraceTables:
    """Read Kineto traces (files, directories of ranks, or an ingested dataset) into tables; Execution Traces
    among the files are read and linked to them (tracekit.et).

    `rank` sets the rank of a single trace file that says nothing about its rank. With `edges` (the default) the
    dependency graph is built too; an ingested dataset already holds it. With `workers` > 1, that many processes
    read several files at once (like any multiprocessing code, a script using them needs the
    `if __name__ == "__main__":` guard).
    """
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if (dataset := dataset_input(paths)) is not None:
        return read_dataset(dataset)
    files = find_trace_files(paths)
    if rank is not None and len(files) > 1:
        raise InputError(f"--rank {rank}: applies to one trace file, but {len(files)} were given")

    parts: list[FileTables] = []
    unranked = []
    claimed: dict[int, Path] = {}

    def add(path: Path, part: FileTables):
        for r in part.tables["ranks"].column("rank").to_pylist():
            if r in claimed:
                raise InputError(f"{path}: holds rank {r}, which {claimed[r]} holds too (pass one rank's files, or --rank)")
            claimed[r] = path
        parts.append(part)
        if progress:
            progress(path, path.stat().st_size)

    execution_traces = []
    for path, trace in zip(files, read_traces(files, workers)):
        if trace.is_execution_trace:
            execution_traces.append(path)
            continue
        r, source = file_rank(path, trace, rank)
        if r is None:
            unranked.append((path, trace))
            continue
        add(path, rank_tables(trace, r, source))
        del trace
    next_rank = 0
    for path, trace in unranked:
        while next_rank in claimed:
            next_rank += 1
        add(path, rank_tables(trace, next_rank, "file_order"))
    tables = TraceTables(**{name: concat(name, [p.tables[name] for p in parts if name in p.tables])
                            for name in TraceTables.names()})
    # After build_edges, which rebuilds `edges` from events: the ET stage appends its et_ctrl / et_data edges.
    tables = build_edges(tables) if edges else tables
    tables = attach_execution_traces(tables, execution_traces)
    if not tables.diagnostics.num_rows:  # entries that make no row are in diagnostics: none of either is nothing
        refuse_no_events(tables, files)
    return tables


def refuse_no_events(tables: TraceTables, files: list[str | Path]) -> None:
    """InputError when the files hold nothing to analyse: no event, instant or Execution Trace node.

    `load` refuses only inputs with no entry at all; the commands refuse these too (an empty report helps nobody),
    while a notebook can still look at the diagnostics of a file whose every entry was unusable.
    """
    if tables.events.num_rows or tables.instants.num_rows or tables.et_nodes.num_rows:
        return
    named = ", ".join(map(str, files[:3])) + (f" (and {len(files) - 3} more files)" if len(files) > 3 else "")
    dropped = sum(tables.diagnostics.column("dropped").to_pylist())
    why = f"none of its {dropped:,} entries is a usable event" if dropped else "traceEvents is empty"
    raise InputError(f"{named}: no trace events ({why})")


def read_traces(files: list[Path], workers: int | None = None) -> Iterator[TraceParts]:
    """Each file read (ranks not applied yet), in order: in this process, or in `workers` processes.

    Not the default: on a 2-core machine, starting workers and pickling their tables back cost more than the
    parallelism saved, even for 4 files of 100 MB (bench/RESULTS.md).
    """
    if workers and workers > 1 and len(files) > 1:
        return _read_in_processes(files, min(workers, len(files)))
    return map(read_trace, files)


def _read_in_processes(files: list[Path], workers: int) -> Iterator[TraceParts]:
    # spawn, not fork: forking a process whose Polars/Arrow thread pools are running can deadlock the child
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield from pool.map(read_trace, files)
    finally:
        pool.shutdown(cancel_futures=True)


def concat(name: str, tables: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(tables) if tables else schema.empty(name)


def write_dataset(tables: TraceTables, out_dir: Path, force: bool = False) -> list[Path]:
    """Write every table as Parquet under out_dir/TABLE/rank=N/part-0.parquet (hive style). Returns the files written.

    The dataset is written into a new directory beside out_dir, which replaces out_dir (an existing dataset only with
    `force`) once complete: a failure leaves nothing behind and an existing dataset as it was. The same tables give
    the same bytes.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        if not force:
            raise InputError(f"{out_dir}: directory is not empty (use --force to replace a dataset there)")
        if not is_dataset(out_dir):
            raise InputError(f"{out_dir}: not empty and not a tracekit dataset; refusing to overwrite it")
    written: list[Path] = []
    with created_dir(out_dir.parent), replacing_dir(out_dir) as building:
        for name, table in tables.items():
            if table.num_rows:
                written += write_partitions(name, in_key_order(name, table), building / name)
        manifest = {"format": "tracekit", "schema_version": schema.SCHEMA_VERSION,
                    "schema_fingerprint": schema.fingerprint(),
                    "tables": {name: t.num_rows for name, t in tables.items()},
                    "ranks": tables.rank_list}
        (building / DATASET_MARKER).write_text(json.dumps(manifest, indent=1))
    return [out_dir / p.relative_to(building) for p in written]


def in_key_order(name: str, table: pa.Table) -> pa.Table:
    """Rows sorted by the table's key, then by its other columns: the same rows give the same file whatever order
    they came in (edges and diagnostics come from multi-threaded DuckDB queries in no fixed order)."""
    key = schema.TABLES[name].key
    ties = [f.name for f in table.schema if f.name not in key and not pa.types.is_nested(f.type)]
    order = pc.sort_indices(table, sort_keys=[(c, "ascending") for c in (*key, *ties)])
    return table.take(order)


NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"  # what hive-style readers take for a null partition value


def write_partitions(name: str, table: pa.Table, table_dir: Path) -> list[Path]:
    """One Parquet file per rank (rows in the table's order, `rank` in the directory name only), its footer naming
    the table and the schema version for readers that never see the marker.

    pyarrow.dataset.write_dataset is not used: its background writer threads can abort the interpreter at exit
    (apache/arrow#36980) and it may write rows in any order.
    """
    table = table.replace_schema_metadata({b"tracekit.table": name.encode(),
                                           b"tracekit.schema_version": str(schema.SCHEMA_VERSION).encode()})
    rank = table.column("rank")
    ranks = sorted(r for r in pc.unique(rank).to_pylist() if r is not None)
    masks = [(str(r), pc.equal(rank, r)) for r in ranks]
    if rank.null_count:
        masks.append((NULL_PARTITION, pc.is_null(rank)))
    written = []
    for value, mask in masks:
        part_dir = table_dir / f"rank={value}"
        part_dir.mkdir(parents=True)
        path = part_dir / "part-0.parquet"
        pq.write_table(table.filter(mask).drop_columns(["rank"]), path)
        written.append(path)
    return written


def check_dataset(path: Path) -> dict:
    """The dataset's _tracekit.json, checked: InputError when it is not ours or was written with another schema
    version than this tracekit's."""
    marker = path / DATASET_MARKER
    try:
        manifest = json.loads(marker.read_text())
    except OSError as exc:
        raise InputError(f"{marker}: cannot read ({exc.strerror})") from None
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        raise InputError(f"{marker}: not valid JSON (a tracekit dataset marker is)") from None
    if not isinstance(manifest, dict) or manifest.get("format") != "tracekit" \
            or not isinstance(manifest.get("tables"), dict):
        raise InputError(f"{marker}: not a tracekit dataset marker (format, schema_version, tables)")
    version = manifest.get("schema_version", "unknown")
    if version != schema.SCHEMA_VERSION:
        advice = ("upgrade tracekit to read it" if isinstance(version, int) and version > schema.SCHEMA_VERSION
                  else "ingest the traces again with this tracekit (`tracekit ingest TRACES -o DIR --force`)")
        raise InputError(f"{path}: dataset written with tracekit schema version {version}, this tracekit reads "
                         f"version {schema.SCHEMA_VERSION}: {advice}")
    return manifest


def dataset_table_files(path: Path, name: str) -> list[Path]:
    """The Parquet files of table NAME in a dataset (none when the table had no rows)."""
    return sorted((path / name).glob("rank=*/*.parquet"))


def read_dataset(path: Path) -> TraceTables:
    """The tables of a dataset `write_dataset` wrote; InputError when a file is unreadable or a table does not hold
    the rows the marker says it does."""
    path = Path(path)
    expected = check_dataset(path)["tables"]
    loaded = {name: read_table(path / name, name) for name in TraceTables.names() if (path / name).is_dir()}
    check_dataset_rows(path, {name: table.num_rows for name, table in loaded.items()}, expected)
    return TraceTables(**loaded)


def check_dataset_rows(path: Path, rows: dict[str, int], expected: dict) -> None:
    """InputError when a table does not hold the rows the marker says it does, or the dataset has no events."""
    for name in TraceTables.names():
        if rows.get(name, 0) != expected.get(name, 0):
            raise InputError(f"{path / name}: holds {rows.get(name, 0):,} rows but {DATASET_MARKER} says "
                             f"{expected.get(name, 0)!r} (the dataset is incomplete or was altered)")
    if not (rows.get("events") or rows.get("instants") or rows.get("et_nodes")):
        raise InputError(f"{path}: the dataset holds no trace events")


def read_table(table_dir: Path, name: str) -> pa.Table:
    try:
        table = ds.dataset(table_dir, format="parquet", partitioning="hive").to_table()
        return schema.conform(name, table)
    except (pa.ArrowException, OSError) as exc:
        for file in sorted(f for f in table_dir.rglob("*") if f.is_file()):
            try:
                pq.read_metadata(file)
            except (pa.ArrowException, OSError) as bad:
                raise InputError(f"{file}: not a readable Parquet file ({first_line(bad)})") from None
        raise InputError(f"{table_dir}: cannot read table {name} ({first_line(exc)})") from None


def first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
