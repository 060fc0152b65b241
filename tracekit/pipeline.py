"""The pipeline's stage order, and its only home: paths → read → link → `TraceTables`.

read (`tracekit.read`: files → Arrow tables per rank) → link (`tracekit.link`: dependency edges, Execution Traces)
→ query (`tracekit.query`: SQL analyses in DuckDB) → output (`tracekit.output`: workbooks, files, terminal).
This module runs the first two; the query and output stages take the `TraceTables` it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pyarrow as pa

from tracekit import schema, storage
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.inputs import Inputs, check_tables, resolve_inputs
from tracekit.link.edges import build_edges
from tracekit.link.et import attach_execution_traces
from tracekit.read.dataset import read_dataset
from tracekit.read.kineto import FileTables, TraceParts, file_rank, rank_tables, read_trace

Progress = Callable[[Path, int], None]  # called after each file with (path, bytes read)


def load(paths: str | Path | Iterable[str | Path] | Inputs, rank: int | None = None,
         progress: Progress | None = None, edges: bool = True, workers: int | None = None,
         require_events: bool = True) -> TraceTables:
    """Read Kineto traces (files, directories of ranks, or an ingested dataset) into tables; Execution Traces
    among the files are read and linked to them (tracekit.et).

    `rank` sets the rank of a single trace file that says nothing about its rank. With `edges` (the default) the
    dependency graph is built too; an ingested dataset already holds it. With `workers` > 1, that many processes
    read several files at once (like any multiprocessing code, a script using them needs the
    `if __name__ == "__main__":` guard).

    The input rules of the commands apply (`tracekit.inputs`): a bad path, or an input with no events, raises
    InputError with the message a command prints; with `require_events=False` such an input gives its tables anyway,
    to look at their `diagnostics` (why each entry was dropped). A cut trace file, whose complete entries are read,
    issues a `tracekit.CutTraceWarning` (and has a `truncated` row in `diagnostics`).
    """
    inputs = resolve_inputs(paths)
    if inputs.dataset is not None:
        tables = read_dataset(inputs.dataset)
    else:
        tables = read_files(list(inputs.files), rank, progress, edges, workers)
    return check_tables(tables, inputs, require_events)


def read_files(files: list[Path], rank: int | None, progress: Progress | None, edges: bool,
               workers: int | None) -> TraceTables:
    """The stages in order over trace files: read each (ranks applied), link (edges, Execution Traces)."""
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
            progress(path, storage.size(path))

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
    import multiprocessing  # here: most runs read in this process, and the import is not free
    from concurrent.futures import ProcessPoolExecutor

    # spawn, not fork: forking a process whose Polars/Arrow thread pools are running can deadlock the child
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield from pool.map(read_trace, files)
    finally:
        pool.shutdown(cancel_futures=True)


def concat(name: str, tables: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(tables) if tables else schema.empty(name)
