"""The driver's side of a command on a cluster: one task per trace file (tasks.py), the rank rules applied to what
they found (as the local reader applies them, `tracekit.pipeline`), then the cross-rank work over their results."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from tracekit import schema, storage
from tracekit.cluster import tasks
from tracekit.cluster.scheduler import is_worker_death
from tracekit.diff.compare import combined_side
from tracekit.diff.side import Side
from tracekit.engine.catalog import across_ranks
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.inputs import Inputs, refuse_no_events, warn_about_files
from tracekit.output.atomic import created_dir, replacing_files, staging_dir
from tracekit.output.dataset import building_dataset, remove_other_ranks, write_marker, write_tables
from tracekit.output.workbooks import (
    Analyses,
    check_out_dir,
    per_rank_report_queries,
    remove_stale_workbooks,
    report_queries,
    run_analyses,
    workbook_jobs,
    write_workbooks,
)
from tracekit.pipeline import check_rank_option, claim_ranks, file_order_ranks, unread_notes
from tracekit.query.analyses import combine_ranks
from tracekit.read.dataset import check_dataset, check_dataset_rows, read_rank
from tracekit.read.execution_trace import opens_as_execution_trace


@dataclass(frozen=True)
class FilesDone:
    """The tasks' outcomes for the files read (in file order), and the notes of every file (those left out too)."""

    outcomes: list[tasks.FileOutcome]
    diagnostics: pa.Table
    ranks: list[int]

    def results(self) -> list:
        """The job's results, one per task that read a file."""
        return [o.result for o in self.outcomes if o.diagnostics is not None]

    def rows(self) -> dict[str, int]:
        return {name: sum(o.rows.get(name, 0) for o in self.outcomes) for name in TraceTables.names()}


EXECUTION_TRACE_REFUSED = ("{path}: an Execution Trace: --scheduler links Kineto traces only (run without it to "
                           "link Execution Traces)")


def refuse_execution_traces(inputs: Inputs) -> None:
    """Before any work (before the cluster starts): InputError for an Execution Trace among the local input files,
    known from each file's first 64 KiB. Files at URLs are refused by the worker that reads them (`run_files`):
    sniffing each from here would cost a round trip per file."""
    for path in inputs.files:
        if not storage.is_url(path) and opens_as_execution_trace(path):
            raise InputError(EXECUTION_TRACE_REFUSED.format(path=path))


def run_files(client, inputs: Inputs, rank_option: int | None, job, *args) -> FilesDone:
    """JOB on every trace file of INPUTS (or every rank of an ingested dataset), each on a worker; the rank rules
    and the input rules of the local reader.

    A file that cannot be read (or whose worker died, more often than Dask retries it) is left out with a note, unless
    no file can be read; the rest are InputErrors of the whole set (two files with one rank, --rank with several
    files, no events), raised once every task has ended.
    """
    if inputs.dataset is not None:
        return run_ranks(client, inputs.dataset, job, *args)
    files = list(inputs.files)
    check_rank_option(rank_option, files)
    threads = worker_threads(client)
    outcomes = gathered(client, [(tasks.on_files, group, (rank_option, None)) for group in batches(files, threads)],
                        job, args)
    claimed: dict[int, Path] = {}
    for outcome in outcomes:
        if outcome.kind == tasks.EXECUTION_TRACE:
            raise InputError(EXECUTION_TRACE_REFUSED.format(path=outcome.path))
        if outcome.kind == tasks.DONE:
            claim_ranks(claimed, outcome.path, list(outcome.ranks))
    unranked = [i for i, o in enumerate(outcomes) if o.kind == tasks.UNRANKED]
    assigned = [(r, "file_order") for r in file_order_ranks(claimed, len(unranked))]
    again = [outcomes[i].path for i in unranked]
    by_path = dict(zip(again, assigned))
    for i, outcome in zip(unranked, gathered(client, [(tasks.on_files, group, (None, [by_path[p] for p in group]))
                                                      for group in batches(again, threads)], job, args)):
        claim_ranks(claimed, outcome.path, list(outcome.ranks))
        outcomes[i] = outcome
    read = [o for o in outcomes if o.kind == tasks.DONE]
    unread = [(o.path, o.error) for o in outcomes if o.kind == tasks.UNREADABLE]
    if not read:
        raise InputError(unread[0][1])
    done = FilesDone(read, pa.concat_tables([o.diagnostics for o in read if o.diagnostics is not None]
                                            + [unread_notes(unread)]), sorted(claimed))
    refuse_no_events(done.rows(), done.diagnostics, list(inputs.given))
    warn_about_files(done.diagnostics)
    return done


def run_ranks(client, dataset, job, *args) -> FilesDone:
    """JOB on every rank of an ingested DATASET, each read (its partitions only) on a worker; the dataset's notes
    about no rank are read here. InputError when the rows read are not those its marker counts."""
    manifest = check_dataset(dataset)
    outcomes = gathered(client, [(tasks.on_rank, [f"{dataset} (rank {r})"], (dataset, r)) for r in manifest["ranks"]],
                        job, args, sources_first=False)
    about_no_rank = read_rank(dataset, None)
    diagnostics = pa.concat_tables([o.diagnostics for o in outcomes if o.diagnostics is not None]
                                   + [about_no_rank.diagnostics])
    done = FilesDone(outcomes, diagnostics, list(manifest["ranks"]))
    rows = done.rows()
    rows["diagnostics"] = diagnostics.num_rows
    check_dataset_rows(dataset, rows, manifest["tables"])
    warn_about_files(diagnostics)
    return done


GROUP_BYTES = 256 << 20  # input a task reads at most when files are grouped (a worker holds its tables at once)


def worker_threads(client) -> int:
    return max(1, sum(client.nthreads().values()))


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


def gathered(client, calls: list[tuple], job, args: tuple, sources_first: bool = True) -> list[tasks.FileOutcome]:
    """Each call's task run to its end, an outcome per source in call order. A call is (task function, its sources
    (files, named in messages), its arguments before JOB); with `sources_first` the sources are its first
    argument. A task that fails otherwise than by its worker's death fails the command (after the others are
    cancelled), naming its sources; one whose worker died leaves its sources out.

    Only as many tasks are in flight as the cluster has worker threads, each submitted when one ends: no task waits
    in a worker's queue, so a worker that dies takes only the files it was reading with it (Dask counts a death
    against every task assigned to that worker), and a worker holds one group's tables at a time.
    """
    from distributed import as_completed

    pending = list(enumerate(calls))[::-1]
    outcomes: dict[int, list[tasks.FileOutcome]] = {}
    running: dict = {}

    def submit_next():
        i, (function, sources, leading) = pending.pop()
        arguments = (sources, *leading) if sources_first else leading
        future = client.submit(function, *arguments, job, *args, pure=False)
        running[future] = (i, sources)
        return future

    for _ in range(min(len(pending), worker_threads(client))):
        submit_next()
    flow = as_completed(list(running))
    try:
        for future in flow:
            i, sources = running.pop(future)
            outcomes[i] = outcomes_of(sources, future)
            if pending:
                flow.add(submit_next())
    finally:
        client.cancel(list(running))
    return [outcome for i in range(len(calls)) for outcome in outcomes[i]]


def outcomes_of(sources: list, future) -> list[tasks.FileOutcome]:
    if future.status != "error":
        return future.result()
    error = future.exception()
    if is_worker_death(error):
        return [tasks.FileOutcome(s, tasks.UNREADABLE, f"{s}: the worker reading it died ({error})") for s in sources]
    if isinstance(error, InputError):
        raise error
    named = ", ".join(map(str, sources[:3])) + (f" (and {len(sources) - 3} more)" if len(sources) > 3 else "")
    raise RuntimeError(f"{named}: {type(error).__name__}: {error}") from error


@dataclass(frozen=True)
class Ingested:
    rows: dict[str, int]
    ranks: list[int]
    dropped: int


def ingest(client, inputs: Inputs, out_dir: Path, force: bool = False, rank: int | None = None) -> Ingested:
    """`tracekit ingest` on a cluster: each worker writes its files' partitions into the dataset being built; the
    notes about no rank and the marker are written here, last."""
    with building_dataset(out_dir, force) as building:
        done = run_files(client, inputs, rank, tasks.ingest_job, building)
        remove_other_ranks(building, done.ranks)
        about_no_rank = done.diagnostics.filter(pc.is_null(done.diagnostics.column("rank")))
        write_tables(TraceTables(diagnostics=schema.conform("diagnostics", about_no_rank)), building)
        rows = done.rows() | {"diagnostics": done.diagnostics.num_rows}
        write_marker(building, rows, done.ranks)
    return Ingested(rows, done.ranks, sum(done.diagnostics.column("dropped").to_pylist()))


def report(client, inputs: Inputs, out_dir: Path, force: bool = False, rank: int | None = None,
           extra: tuple[str, ...] = ()) -> tuple[Analyses, list[Path], list[str]]:
    """`tracekit report` on a cluster: each worker runs its files' per-rank analyses and writes their workbooks;
    the cross-rank analyses and ranks.xlsx run here, over the per-rank results. Returns the analyses (as a local
    run gives them), the workbooks written and the problems."""
    out_dir = Path(out_dir)
    check_out_dir(out_dir, force, inputs=inputs.given)
    with created_dir(out_dir), staging_dir(out_dir) as staging:
        done = run_files(client, inputs, rank, tasks.report_job, per_rank_report_queries(extra), staging)
        parts: list[tasks.ReportPart] = done.results()
        per_rank = combine_ranks([p.results for p in parts])
        small = TraceTables(ranks=pa.concat_tables([p.ranks for p in parts]).sort_by("rank"),
                            diagnostics=done.diagnostics)
        across = [q for q in dict.fromkeys(report_queries(len(done.ranks)) + list(extra)) if across_ranks(q)]
        failures = {name: why for p in parts for name, why in p.failures.items()}
        if across:
            cross = run_analyses(small, names=across, given=per_rank)
            failures |= cross.failures
            per_rank |= cross.results
        analyses = Analyses(per_rank, failures, tuple(done.ranks))
        rank_jobs, other_jobs = workbook_jobs(analyses.ranks, per_rank=True), workbook_jobs(analyses.ranks, False)
        staged = [staging / spec.file.format(rank=r) for spec, r in rank_jobs]
        paths = [out_dir / spec.file.format(rank=r) for spec, r in rank_jobs + other_jobs]
        problems = [note for p in parts for note in p.problems]
        with replacing_files(paths) as temporary:
            for source, temp in zip(staged, temporary):
                os.replace(source, temp)
            problems += write_workbooks(analyses, other_jobs, temporary[len(staged):])
    remove_stale_workbooks(out_dir, paths)
    return analyses, paths, list(dict.fromkeys(problems))


def summarize(client, inputs: Inputs, label: str) -> Side:
    """`diff.summarize` on a cluster: each worker summarises its files' ranks, joined here."""
    return combined_side(label, run_files(client, inputs, None, tasks.summarize_job).results())
