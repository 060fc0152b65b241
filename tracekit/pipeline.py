"""The pipeline's stage order, and its only home: paths → read → link → `TraceTables`.

read (`tracekit.read`: files → Arrow tables per rank) → link (`tracekit.link`: dependency edges, Execution Traces)
→ query (`tracekit.query`: SQL analyses in DuckDB) → output (`tracekit.output`: workbooks, files, terminal).
This module runs the first two; the query and output stages take the `TraceTables` it returns.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from tracekit import schema, storage
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.executors import InProcess, Lost, ProcessPool
from tracekit.inputs import (
    UNREADABLE,
    FileRun,
    Inputs,
    check_tables,
    refuse_no_events,
    refuse_unrelated,
    resolve_inputs,
    warn_about_files,
)
from tracekit.link.edges import build_edges
from tracekit.link.graph_capture import attach_graph_captures
from tracekit.read.dataset import check_dataset, check_dataset_rows, read_dataset, read_rank
from tracekit.read.execution_trace import named_rank, opens_as_execution_trace
from tracekit.read.kineto import ChunkHelpers, FileTables, TraceParts, file_rank, rank_tables, read_trace
from tracekit.read.ranks import pytorch_version
from tracekit.storage import Location

Progress = Callable[[Path, int], None]  # called after each file with (path, bytes read)

# What became of a file in a task (FileOutcome.kind); UNREADABLE is the diagnostics reason of such a file too.
DONE, UNRANKED, EXECUTION_TRACE = "done", "unranked", "execution_trace"


def load(paths: str | Path | Iterable[str | Path] | Inputs, rank: int | None = None,
         progress: Progress | None = None, edges: bool = True, workers: int | None = None,
         require_events: bool = True, as_ranks: bool = False,
         graph_captures: str | Path | Iterable[str | Path] = (), helpers: ChunkHelpers | None = None) -> TraceTables:
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

    `helpers`: the helper processes a large file's chunks are shared with (a `ChunkHelpers`, perhaps given a head
    start: tracekit/read/chunk_workers.py); by default the read starts its own.
    """
    inputs = resolve_inputs(paths, graph_captures)
    if inputs.dataset is not None:
        tables = read_dataset(inputs.dataset)
    else:
        tables = read_files(list(inputs.files), rank, progress, edges, workers, as_ranks, helpers)
    return check_tables(with_graph_captures(tables, inputs, progress), inputs, require_events)


def with_graph_captures(tables: TraceTables, inputs: Inputs, progress: Progress | None = None) -> TraceTables:
    """TABLES with the replays of the graphs in INPUTS' capture traces owned by their captured ops. Each capture
    file is read (and linked) on its own: captures of several batch sizes may all say the same rank."""
    if not inputs.graph_captures:
        return tables
    captures = [read_files([path], None, progress, True, None, as_ranks=True) for path in inputs.graph_captures]
    return attach_graph_captures(tables, captures)


def read_files(files: list[Path], rank: int | None, progress: Progress | None, edges: bool,
               workers: int | None, as_ranks: bool = False, helpers: ChunkHelpers | None = None) -> TraceTables:
    """The stages in order over trace files: read each (ranks applied), link (edges, Execution Traces).

    A file that cannot be read is left out, with a `file_unreadable` note in diagnostics, when another file can be
    (a bad trace among many does not stop the rest); when none can, the first file's error is raised.
    """
    check_rank_option(rank, files)
    return read_group(files, rank, progress=progress, edges=edges, workers=workers, as_ranks=as_ranks,
                      helpers=helpers).tables


@dataclass(frozen=True)
class FileOutcome:
    """What became of one trace file of a group: read (`ranks`, and what it says about its run), left without a
    rank (the driver gives it one: UNRANKED), or unreadable (`error`: why)."""

    path: Location
    kind: str = DONE
    error: str = ""
    ranks: tuple[int, ...] = ()
    run: FileRun | None = None


@dataclass(frozen=True)
class Group:
    """A group of files read, ranked and linked: each file's outcome, in order; the tables (None when no file gave
    any); the Execution Traces attached."""

    files: list[FileOutcome]
    tables: TraceTables | None
    execution_traces: tuple = ()


def read_group(files: list, rank: int | None = None, assigned: list[tuple[int, str]] | None = None,
               execution_traces: tuple = (), whole: bool = True, progress: Progress | None = None,
               edges: bool = True, workers: int | None = None, as_ranks: bool = False,
               helpers: ChunkHelpers | None = None) -> Group:
    """Read FILES, give each its rank (as `assigned`, else its own or `rank`), join and link their tables, then
    attach Execution Traces.

    `whole`: FILES are all the input, so the rules over every file apply here: files with no rank take the lowest
    free ones in file order, files of other runs are refused (unless `as_ranks`), no readable file is an error, and
    the Execution Traces among FILES are read with the ranks their file names, pids or the Kineto ranks give them.
    Otherwise FILES are some of the Kineto files: one with no rank is left UNRANKED (the driver ranks it, knowing
    every file's), and of EXECUTION_TRACES ((rank, path) by file name) those of this group's ranks are attached.
    """
    parts: list[FileTables] = []
    outcomes: list[FileOutcome | None] = [None] * len(files)
    unranked, unread, found, runs = [], [], [], []
    claimed: dict[int, Path] = {}

    def add(i: int, path: Path, part: FileTables):
        ranks = part.tables["ranks"].column("rank").to_pylist()
        claim_ranks(claimed, path, ranks)
        parts.append(part)
        runs.append(file_run(part))
        outcomes[i] = FileOutcome(path, DONE, ranks=tuple(sorted(ranks)), run=runs[-1])
        if progress:
            progress(path, storage.size(path))

    # closed here, also on an error: left to the garbage collector, the read's helpers and threads end wherever it
    # runs (joining a thread there can deadlock: tracekit/read/text.py's read_ahead)
    with closing(read_traces(files, workers, helpers)) as traces:
        for i, (path, trace) in enumerate(zip(files, traces)):
            if isinstance(trace, InputError):
                unread.append((path, str(trace)))
                outcomes[i] = FileOutcome(path, UNREADABLE, str(trace))
                continue
            if trace.is_execution_trace:
                found.append(path)
                outcomes[i] = FileOutcome(path, EXECUTION_TRACE)
                continue
            r, source = assigned[i] if assigned else file_rank(path, trace, rank)
            if r is None:
                unranked.append((i, path, trace))
                continue
            add(i, path, rank_tables(trace, r, source))
            del trace
    if whole and unread and not parts and not unranked and not found:
        raise InputError(unread[0][1])
    if whole:
        for (i, path, trace), r in zip(unranked, file_order_ranks(claimed, len(unranked))):
            add(i, path, rank_tables(trace, r, "file_order"))
        if not as_ranks:
            refuse_unrelated(runs)
    else:
        for i, path, _ in unranked:
            outcomes[i] = FileOutcome(path, UNRANKED)
        if found:  # one its first 64 KiB did not show to be: the driver reads the input whole instead
            return Group([o for o in outcomes if o is not None], None)
        # a task of Execution Traces alone (their ranks' Kineto files gave none) attaches them all
        found = [p for r, p in execution_traces if r in claimed or not files]
    if not parts and not found:
        return Group([o for o in outcomes if o is not None], None)
    # After build_edges, which rebuilds `edges` from events: the ET stage appends its et_ctrl / et_data edges.
    tables = linked(parts, edges, unread_notes(unread) if whole else None)
    if found:  # imported here: linking Execution Traces uses polars, which a Kineto-only ingest does not load
        from tracekit.link.et import attach_execution_traces

        tables = attach_execution_traces(tables, found)
    return Group([o for o in outcomes if o is not None], tables, tuple(found))


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


def read_traces(files: list[Path], workers: int | None = None, helpers: ChunkHelpers | None = None
                ) -> Iterator[TraceParts | InputError]:
    """Each file read (ranks not applied yet), in order, or the InputError saying why it could not be: in this
    process (a large file's chunks shared with helper processes on the spare CPUs, HELPERS when given:
    tracekit/read/chunk_workers.py), or in `workers` processes.

    Not the default: on a 2-core machine, starting workers and pickling their tables back cost more than the
    parallelism saved, even for 4 files of 100 MB (bench/RESULTS.md).
    """
    if workers and workers > 1 and len(files) > 1:
        return _read_in_processes(files, min(workers, len(files)))
    return _read_here(files, helpers)


def _read_here(files: list[Path], helpers: ChunkHelpers | None = None) -> Iterator[TraceParts | InputError]:
    # the large files' chunks shared with helper processes, on the spare CPUs: the caller's, else these; ended with
    # the read either way (idle, each holds ~100 MB through the stages after it)
    with helpers if helpers is not None else ChunkHelpers() as shared:
        for path in files:
            yield read_or_error(path, shared)


def read_or_error(path: Path, helpers: ChunkHelpers | None = None) -> TraceParts | InputError:
    try:
        return read_trace(path, helpers=helpers)
    except InputError as error:
        return error


def _read_in_processes(files: list[Path], workers: int) -> Iterator[TraceParts | InputError]:
    with ProcessPool(workers) as pool:
        yield from pool.map(read_or_error, [(f,) for f in files], [str(f) for f in files])


def concat(name: str, tables: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(tables) if tables else schema.empty(name)


# --------------------------------------------------------------------------- the plan: per-rank tasks, then combine

@dataclass(frozen=True)
class TaskDone:
    """What a task sends back: its files' outcomes, the ranks and rows of its tables, their notes, the job's value,
    and the Execution Traces it attached. Never the tables themselves."""

    files: list[FileOutcome]
    ranks: tuple[int, ...] = ()
    rows: dict[str, int] = field(default_factory=dict)
    diagnostics: pa.Table | None = None
    result: object = None
    execution_traces: tuple = ()


@dataclass(frozen=True)
class PlanDone:
    """A command's per-rank job done on every rank: its values (one per task that read something, in file order),
    every note (files left out included), the ranks and the rows per table."""

    results: list
    diagnostics: pa.Table
    ranks: list[int]
    rows: dict[str, int]


def one_task(executor=None) -> bool:
    """Whether `run_plan` on EXECUTOR runs its job once, over every rank of the input (in this process: None or
    InProcess); elsewhere each task holds some of the ranks."""
    return executor is None or executor.in_process


def run_plan(inputs: Inputs | Iterable[str | Path], job: Callable, args: tuple = (), executor=None, rank: int | None = None,
             as_ranks: bool = False, progress: Progress | None = None) -> PlanDone:
    """JOB(tables, *ARGS) on the ranks of INPUTS, as EXECUTOR runs tasks (in this process by default), with the
    input rules of `load`. JOB is a command's per-rank work (read → link are done here first); what it returns is
    combined by the caller across ranks (`scope: across ranks`).

    In this process the input is one task, as `load` reads it. Elsewhere the Kineto files are read in groups
    (`batches`) and the rules over every file applied here: the ranks of files that give none (in file order, then
    a task for those), two files of one rank, files of other runs, no events. Execution Traces go with the task that
    holds their rank, named in their file names (`et_rank3.json`); an input with one that is not named so, or two of
    one rank, is one task, since their ranks depend on every Kineto file; so is an input with graph captures.
    """
    executor = executor or InProcess()
    inputs = resolve_inputs(inputs)
    if inputs.dataset is not None:
        return run_on_ranks(inputs, job, args, executor)
    files = list(inputs.files)
    check_rank_option(rank, files)
    # graph captures pair with the replay's ranks as a whole (a single-rank capture of a single-rank run is that
    # rank): an input with captures is one task
    apart = None if executor.in_process or len(files) < 2 or inputs.graph_captures else separated(files)
    if apart is not None:
        done = run_in_groups(inputs, *apart, job, args, executor, rank, as_ranks, progress)
        if done is not None:
            return done
    task = (files, rank, None, (), True, as_ranks, inputs, job, args) + (
        (progress, executor.helpers) if executor.in_process else (None, None))
    (done,) = tasks_done(executor, [task], [files], None if executor.in_process else progress)
    if done.diagnostics is None:
        raise InputError(done.files[0].error)
    warn_about_files(done.diagnostics)
    return PlanDone([done.result], done.diagnostics, list(done.ranks), done.rows)


def separated(files: list) -> tuple[list, list[tuple[int, Location]]] | None:
    """(Kineto files, [(rank, Execution Trace)]) as the first 64 KiB of each file show; None when an Execution Trace
    has no rank in its file name or shares it with another (their ranks then depend on all the Kineto files)."""
    execution_traces = [(named_rank(f), f) for f in files if opens_as_execution_trace(f)]
    ranks = [r for r, _ in execution_traces]
    if None in ranks or len(set(ranks)) < len(ranks):
        return None
    kineto = [f for f in files if f not in {p for _, p in execution_traces}]
    return (kineto, execution_traces) if kineto else None


def run_in_groups(inputs: Inputs, files: list, execution_traces: list, job: Callable, args: tuple, executor,
                  rank: int | None, as_ranks: bool, progress: Progress | None) -> PlanDone | None:
    """`run_plan` over groups of Kineto files; None when a task found an Execution Trace among them (the input is
    then read whole)."""
    def run(groups: list[list], assigned: dict | None = None) -> list[TaskDone]:
        calls = [(g, None if assigned else rank, [assigned[p] for p in g] if assigned else None,
                  tuple(execution_traces), False, as_ranks, inputs, job, args, None) for g in groups]
        return tasks_done(executor, calls, groups, progress)

    done = run(batches(files, executor.workers))
    outcomes = [o for d in done for o in d.files]
    if any(o.kind == EXECUTION_TRACE for o in outcomes):
        return None
    claimed: dict[int, Path] = {}
    for outcome in outcomes:
        if outcome.kind == DONE:
            claim_ranks(claimed, outcome.path, list(outcome.ranks))
    unranked = [o.path for o in outcomes if o.kind == UNRANKED]
    if unranked:
        assigned = dict(zip(unranked, [(r, "file_order") for r in file_order_ranks(claimed, len(unranked))]))
        again = run(batches(unranked, executor.workers), assigned)
        for outcome in (o for d in again for o in d.files if o.kind == DONE):
            claim_ranks(claimed, outcome.path, list(outcome.ranks))
        order = {str(f): i for i, f in enumerate(files)}  # the tasks' values in file order, as they combine
        done = sorted(done + again, key=lambda d: order[str(d.files[0].path)])
        outcomes = [o for o in outcomes if o.kind != UNRANKED] + [o for d in again for o in d.files]
    attached = {str(p) for d in done for p in d.execution_traces}
    alone = tuple((r, p) for r, p in execution_traces if str(p) not in attached)
    if alone:  # Execution Traces of ranks no Kineto file gave: read in a task of their own
        done += tasks_done(executor, [([], None, None, alone, False, as_ranks, inputs, job, args, None)],
                           [[p for _, p in alone]], progress)
    if not as_ranks:
        refuse_unrelated([o.run for o in outcomes if o.kind == DONE])
    read = [d for d in done if d.diagnostics is not None]
    unread = [(o.path, o.error) for o in outcomes if o.kind == UNREADABLE]
    if not read:
        raise InputError(unread[0][1])
    diagnostics = pa.concat_tables([d.diagnostics for d in read] + [unread_notes(unread)])
    rows = {name: sum(d.rows.get(name, 0) for d in read) for name in TraceTables.names()}
    refuse_no_events(rows, diagnostics, list(inputs.given))
    warn_about_files(diagnostics)
    return PlanDone([d.result for d in read], diagnostics, sorted(claimed), rows)


def files_task(files: list, rank: int | None, assigned: list | None, execution_traces: tuple, whole: bool,
               as_ranks: bool, inputs: Inputs, job: Callable, args: tuple, progress: Progress | None,
               helpers: ChunkHelpers | None = None) -> TaskDone:
    """One task: FILES (some or all of INPUTS' files) read, ranked and linked (`read_group`, its large files'
    chunks shared with HELPERS when given), then JOB(tables, *ARGS). The resolved INPUTS travel with every task, so
    what they carry besides the files reaches each one. A task of the whole input refuses one with no events before
    the job's work."""
    group = read_group(files, rank, assigned, execution_traces, whole, progress, as_ranks=as_ranks, helpers=helpers)
    tables = group.tables
    if tables is None:
        return TaskDone(group.files)
    if whole:
        tables = with_graph_captures(tables, inputs, progress)
    rows = {name: t.num_rows for name, t in tables.items()}
    if whole:
        refuse_no_events(rows, tables.diagnostics, list(inputs.given))
    return TaskDone(group.files, tuple(tables.rank_list), rows, tables.diagnostics, job(tables, *args),
                    group.execution_traces)


def rank_task(inputs: Inputs, rank: int, job: Callable, args: tuple) -> TaskDone:
    """One rank of the ingested dataset INPUTS name read (its partitions only), then JOB(tables, *ARGS)."""
    dataset = inputs.dataset
    tables = read_rank(dataset, rank)
    return TaskDone([FileOutcome(f"{dataset} (rank {rank})", DONE, ranks=(rank,))], (rank,),
                    {name: t.num_rows for name, t in tables.items()}, tables.diagnostics, job(tables, *args))


def run_on_ranks(inputs: Inputs, job: Callable, args: tuple, executor) -> PlanDone:
    """`run_plan` over an ingested dataset: in this process read whole; elsewhere a task per rank, each reading its
    partitions only, and the notes about no rank read here. InputError when the rows read are not those its marker
    counts."""
    dataset = inputs.dataset
    if executor.in_process:
        tables = check_tables(read_dataset(dataset), inputs)
        return PlanDone([job(tables, *args)], tables.diagnostics, tables.rank_list,
                        {name: t.num_rows for name, t in tables.items()})
    manifest = check_dataset(dataset)
    done = tasks_done(executor, [(inputs, r, job, args) for r in manifest["ranks"]],
                      [[f"{dataset} (rank {r})"] for r in manifest["ranks"]], None, rank_task)
    lost = next((d.files[0].error for d in done if d.diagnostics is None), None)
    if lost:
        raise InputError(lost)
    diagnostics = pa.concat_tables([d.diagnostics for d in done] + [read_rank(dataset, None).diagnostics])
    rows = {name: sum(d.rows.get(name, 0) for d in done) for name in TraceTables.names()}
    check_dataset_rows(dataset, rows | {"diagnostics": diagnostics.num_rows}, manifest["tables"])
    warn_about_files(diagnostics)
    return PlanDone([d.result for d in done], diagnostics, list(manifest["ranks"]), rows)


def tasks_done(executor, calls: list[tuple], sources: list[list], progress: Progress | None,
               function: Callable | None = None) -> list[TaskDone]:
    """Each call's task run by EXECUTOR (`files_task`, or FUNCTION), in call order; SOURCES are each task's files
    (named in messages, and given to `progress` as each task ends). A task whose worker died leaves its files out."""
    names = [", ".join(map(str, s[:3])) + (f" (and {len(s) - 3} more)" if len(s) > 3 else "") for s in sources]
    done = []
    for files, value in zip(sources, executor.map(function or files_task, calls, names)):
        if isinstance(value, Lost):
            value = TaskDone([FileOutcome(f, UNREADABLE, f"{f}: the worker reading it died ({value.why})")
                              for f in files])
        elif progress:
            for f in files:
                progress(f, storage.size(f))
        done.append(value)
    return done


GROUP_BYTES = 256 << 20  # input a task reads at most when files are grouped (a worker holds its tables at once)


def batches(files: list, threads: int) -> list[list]:
    """FILES in consecutive groups of about equal bytes, one task each: twice as many groups as worker threads (for
    balance), or more where that puts over GROUP_BYTES of input in a group, and never more groups than files.
    Grouping pays a task's fixed cost (a DuckDB connection, its macros, every query's plan) once for several small
    files; large files go one a task."""
    sizes = [max(1, storage.size(f)) for f in files]
    total = sum(sizes)
    count = min(len(files), max(2 * threads, math.ceil(total / GROUP_BYTES)))
    groups: list[list] = [[] for _ in range(count)]
    before = 0
    for file, size in zip(files, sizes):
        groups[min(count - 1, int((before + size / 2) * count / total))].append(file)  # by the file's middle byte
        before += size
    return [g for g in groups if g]
