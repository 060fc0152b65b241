"""Paths → `TraceTables`, and `TraceTables` ↔ a Parquet dataset partitioned by rank."""

from __future__ import annotations

import json
import multiprocessing
import shutil
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

from . import schema
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
    return (path / DATASET_MARKER).is_file()


def find_trace_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand directories into the trace files they hold (sorted); check that every path exists."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.iterdir()
                           if f.is_file() and f.name.endswith(TRACE_SUFFIXES) and f.name not in NOT_TRACES)
            if not found:
                raise InputError(f"{p}: directory holds no trace files (*.json, *.json.gz)")
            files += found
        elif p.exists():
            files.append(p)
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
    if len(paths) == 1 and Path(paths[0]).is_dir() and is_dataset(Path(paths[0])):
        return read_dataset(Path(paths[0]))
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
    return attach_execution_traces(tables, execution_traces)


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
    """Write every table as Parquet under out_dir/TABLE/rank=N/ (hive style). Returns the files written."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        if not force:
            raise InputError(f"{out_dir}: directory is not empty (use --force to replace a dataset there)")
        if not is_dataset(out_dir):
            raise InputError(f"{out_dir}: not empty and not a tracekit dataset; refusing to overwrite it")
        shutil.rmtree(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{out_dir}: cannot create directory ({exc.strerror})") from None
    written: list[Path] = []
    # In each Parquet footer too, for readers that never see the marker file
    version = {b"tracekit.table": b"", b"tracekit.schema_version": str(schema.SCHEMA_VERSION).encode()}
    for name, table in tables.items():
        if table.num_rows == 0:
            continue
        table_dir = out_dir / name
        ds.write_dataset(
            table.replace_schema_metadata({**version, b"tracekit.table": name.encode()}), table_dir, format="parquet", partitioning=ds.partitioning(pa.schema([("rank", pa.int32())]), flavor="hive"),
            basename_template="part-{i}.parquet", existing_data_behavior="overwrite_or_ignore",
            file_visitor=lambda f: written.append(Path(f.path)),
        )
    manifest = {"format": "tracekit", "schema_version": schema.SCHEMA_VERSION, "schema_fingerprint": schema.fingerprint(),
                "tables": {name: t.num_rows for name, t in tables.items()},
                "ranks": tables.rank_list}
    (out_dir / DATASET_MARKER).write_text(json.dumps(manifest, indent=1))
    return written


def check_dataset(path: Path) -> dict:
    """The dataset's marker, after checking it was written with this tracekit's schema version."""
    marker = path / DATASET_MARKER
    try:
        manifest = json.loads(marker.read_text())
        version = manifest["schema_version"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise InputError(f"{marker}: not a readable tracekit dataset marker (no schema_version); "
                         "ingest the traces again with `tracekit ingest`") from None
    if version != schema.SCHEMA_VERSION:
        advice = ("ingest the traces again with this tracekit (`tracekit ingest TRACES -o DIR --force`)"
                  if isinstance(version, int) and version < schema.SCHEMA_VERSION else "upgrade tracekit to read it")
        raise InputError(f"{path}: dataset written with tracekit schema version {version}, this tracekit reads "
                         f"version {schema.SCHEMA_VERSION}: {advice}")
    return manifest


def dataset_table_files(path: Path, name: str) -> list[Path]:
    """The Parquet files of table NAME in a dataset (none when the table had no rows)."""
    return sorted((path / name).glob("rank=*/*.parquet"))


def read_dataset(path: Path) -> TraceTables:
    path = Path(path)
    check_dataset(path)
    loaded = {}
    for name in TraceTables.names():
        table_dir = path / name
        if not table_dir.is_dir():
            continue
        table = ds.dataset(table_dir, format="parquet", partitioning="hive").to_table()
        loaded[name] = schema.conform(name, table)
    return TraceTables(**loaded)
