"""The pipeline's stage order, and its only home: paths → read → link → `TraceTables`.

read (`tracekit.read`: files → Arrow tables per rank) → link (`tracekit.link`: dependency edges, Execution Traces)
→ query (`tracekit.query`: SQL analyses in DuckDB) → output (`tracekit.output`: workbooks, files, terminal).
This module runs the first two; the query and output stages take the `TraceTables` it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from tracekit import schema, storage
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.inputs import UNREADABLE, FileRun, Inputs, check_tables, refuse_unrelated, resolve_inputs
from tracekit.link.edges import build_edges
from tracekit.link.et import attach_execution_traces
from tracekit.link.graph_capture import attach_graph_captures
from tracekit.read.dataset import read_dataset
from tracekit.read.kineto import FileTables, TraceParts, file_rank, rank_tables, read_trace
from tracekit.read.ranks import pytorch_version

Progress = Callable[[Path, int], None]  # called after each file with (path, bytes read)


def load(paths: str | Path | Iterable[str | Path] | Inputs, rank: int | None = None,
         progress: Progress | None = None, edges: bool = True, workers: int | None = None,
         require_events: bool = True, as_ranks: bool = False,
         graph_captures: str | Path | Iterable[str | Path] = ()) -> TraceTables:
    """Read Kineto traces (files, directories of ranks, or an ingested dataset) into tables; Execution Traces
    among the files are read and linked to them (tracekit.link.et).

    `rank` sets the rank of a single trace file that says nothing about its rank. With `edges` (the default) the
    dependency graph is built too; an ingested dataset already holds it. With `workers` > 1, that many processes
    read several files at once (like any multiprocessing code, a script using them needs the
    `if __name__ == "__main__":` guard).

    The input rules of the commands apply (`tracekit.inputs`): a bad path, or an input with no events, raises
    InputError with the message a command prints (among them: files that cannot be ranks of one run, whose world
    sizes, devices or PyTorch versions differ or whose time spans do not overlap, unless `as_ranks`: `--as-ranks`);
    with `require_events=False` such an input gives its tables anyway,
    to look at their `diagnostics` (why each entry was dropped). A cut trace file, whose complete entries are read,
    issues a `tracekit.CutTraceWarning` (and has a `truncated` row in `diagnostics`).

    `graph_captures`: trace files of capturing the CUDA/HIP graphs the traces replay (`--graph-capture FILE`):
    each replayed GPU op is matched to its captured launch and owned by the op it was captured under
    (`graph_kernels` table; tracekit.link.graph_capture), what cannot be matched noted in `diagnostics`.
    """
    inputs = resolve_inputs(paths, graph_captures)
    if inputs.dataset is not None:
        tables = read_dataset(inputs.dataset)
    else:
        tables = read_files(list(inputs.files), rank, progress, edges, workers, as_ranks)
    return check_tables(with_graph_captures(tables, inputs, progress), inputs, require_events)


def with_graph_captures(tables: TraceTables, inputs: Inputs, progress: Progress | None = None) -> TraceTables:
    """TABLES with the replays of the graphs in INPUTS' capture traces owned by their captured ops. Each capture
    file is read (and linked) on its own: captures of several batch sizes may all say the same rank."""
    if not inputs.graph_captures:
        return tables
    captures = [read_files([path], None, progress, True, None, as_ranks=True) for path in inputs.graph_captures]
    return attach_graph_captures(tables, captures)


def read_files(files: list[Path], rank: int | None, progress: Progress | None, edges: bool,
               workers: int | None, as_ranks: bool = False) -> TraceTables:
    """The stages in order over trace files: read each (ranks applied), link (edges, Execution Traces).

    A file that cannot be read is left out, with a `file_unreadable` note in diagnostics, when another file can be
    (a bad trace among many does not stop the rest); when none can, the first file's error is raised.
    """
    check_rank_option(rank, files)
    parts: list[FileTables] = []
    unranked = []
    unread: list[tuple[Path, str]] = []
    claimed: dict[int, Path] = {}

    def add(path: Path, part: FileTables):
        claim_ranks(claimed, path, part.tables["ranks"].column("rank").to_pylist())
        parts.append(part)
        if progress:
            progress(path, storage.size(path))

    execution_traces = []
    for path, trace in zip(files, read_traces(files, workers)):
        if isinstance(trace, InputError):
            unread.append((path, str(trace)))
            continue
        if trace.is_execution_trace:
            execution_traces.append(path)
            continue
        r, source = file_rank(path, trace, rank)
        if r is None:
            unranked.append((path, trace))
            continue
        add(path, rank_tables(trace, r, source))
        del trace
    if unread and not parts and not unranked and not execution_traces:
        raise InputError(unread[0][1])
    for (path, trace), r in zip(unranked, file_order_ranks(claimed, len(unranked))):
        add(path, rank_tables(trace, r, "file_order"))
    if not as_ranks:
        refuse_unrelated([file_run(part) for part in parts])
    # After build_edges, which rebuilds `edges` from events: the ET stage appends its et_ctrl / et_data edges.
    return attach_execution_traces(linked(parts, edges, unread_notes(unread)), execution_traces)


def file_run(part: FileTables) -> FileRun:
    """What one file's tables say about its run (inputs.refuse_unrelated compares them)."""
    ranks, events = part.tables["ranks"], part.tables["events"]
    sizes = {s for s in ranks.column("world_size").to_pylist() if s is not None}
    versions = {v for v in map(pytorch_version, ranks.column("trace_metadata").to_pylist()) if v is not None}
    start = pc.min(events.column("ts")).as_py()
    end = pc.max(pc.add(events.column("ts"), pc.fill_null(events.column("dur"), 0))).as_py()
    return FileRun(str(ranks.column("source_file")[0]) if ranks.num_rows else "?",
                   min(sizes) if len(sizes) == 1 else None,
                   frozenset(d for d in ranks.column("device_name").to_pylist() if d is not None),
                   min(versions) if len(versions) == 1 else None, (start, end) if start is not None else None)


def check_rank_option(rank: int | None, files: list) -> None:
    if rank is not None and len(files) > 1:
        raise InputError(f"--rank {rank}: applies to one trace file, but {len(files)} were given")


def claim_ranks(claimed: dict[int, Path], path: Path, ranks: list[int]) -> None:
    """Record that PATH holds RANKS; InputError when another file holds one of them."""
    for r in ranks:
        if r in claimed:
            raise InputError(f"{path}: holds rank {r}, which {claimed[r]} holds too: not ranks of one run (pass one "
                             "run's files; `tracekit diff` compares two runs)")
        claimed[r] = path


def file_order_ranks(claimed: dict[int, Path], count: int) -> list[int]:
    """Ranks for COUNT files that do not say theirs, in file order: the lowest ones no file claimed."""
    free, r = [], 0
    while len(free) < count:
        if r not in claimed:
            free.append(r)
        r += 1
    return free


def unread_notes(unread: list[tuple[Path, str]]) -> pa.Table:
    """A `file_unreadable` note per file left out: about no rank (the file gave none), dropped whole."""
    return pa.Table.from_pylist([dict(rank=None, source_file=str(path), position=None, stage="ingest",
                                      reason=UNREADABLE, detail=why, dropped=True, raw=None) for path, why in unread],
                                schema=schema.DIAGNOSTICS.arrow_schema)


def linked(parts: list[FileTables], edges: bool = True, notes: pa.Table | None = None) -> TraceTables:
    """The tables of files read with their ranks, joined (and NOTES added to diagnostics), then linked. A file's
    ranks are its own (every key includes rank), so any group of files can be joined and linked apart from the
    others, in other processes, and give the same rows."""
    tables = TraceTables(**{name: concat(name, [p.tables[name] for p in parts if name in p.tables])
                            for name in TraceTables.names()})
    if notes is not None:
        tables = tables.with_tables(diagnostics=concat("diagnostics", [tables.diagnostics, notes]))
    return build_edges(tables) if edges else tables


def read_traces(files: list[Path], workers: int | None = None) -> Iterator[TraceParts | InputError]:
    """Each file read (ranks not applied yet), in order, or the InputError saying why it could not be: in this
    process, or in `workers` processes.

    Not the default: on a 2-core machine, starting workers and pickling their tables back cost more than the
    parallelism saved, even for 4 files of 100 MB (bench/RESULTS.md).
    """
    if workers and workers > 1 and len(files) > 1:
        return _read_in_processes(files, min(workers, len(files)))
    return map(read_or_error, files)


def read_or_error(path: Path) -> TraceParts | InputError:
    try:
        return read_trace(path)
    except InputError as error:
        return error


def _read_in_processes(files: list[Path], workers: int) -> Iterator[TraceParts | InputError]:
    import multiprocessing  # here: most runs read in this process, and the import is not free
    from concurrent.futures import ProcessPoolExecutor

    # spawn, not fork: forking a process whose Polars/Arrow thread pools are running can deadlock the child
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield from pool.map(read_or_error, files)
    finally:
        pool.shutdown(cancel_futures=True)


def concat(name: str, tables: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(tables) if tables else schema.empty(name)
