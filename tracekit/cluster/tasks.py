"""What a worker does with a group of trace files: read them, apply their ranks, link them (`pipeline.linked`), then the
command's job on its tables. Every job returns only what the driver combines: small per-rank results, row counts,
notes. The tables themselves never leave the worker."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.diff.compare import summarize_ranks
from tracekit.diff.side import SidePart
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.output.dataset import write_tables
from tracekit.output.workbooks import run_analyses, workbook_jobs, write_workbooks
from tracekit.pipeline import linked
from tracekit.read.dataset import read_rank
from tracekit.read.kineto import file_rank, rank_tables, read_trace

DONE, UNRANKED, UNREADABLE, EXECUTION_TRACE = "done", "unranked", "unreadable", "execution_trace"


@dataclass(frozen=True)
class FileOutcome:
    """One file's task: what became of it (`kind`), its ranks, its row counts and notes, and the job's result."""

    path: Path
    kind: str = DONE
    error: str = ""  # why the file could not be read (kind UNREADABLE)
    ranks: tuple[int, ...] = ()
    rows: dict[str, int] = field(default_factory=dict)  # rows per table
    diagnostics: pa.Table | None = None  # the file's notes (small: one row per entry that could not be used)
    result: object = None


def on_files(paths: list[Path], rank_option: int | None, assigned: list[tuple[int, str]] | None, job: Callable,
             *args) -> list[FileOutcome]:
    """Read PATHS (with the ranks `assigned` by the driver, else their own or `rank_option`), join and link the
    tables of those that give ranks, and run JOB(tables, *args) once on them. An outcome per file; the first file
    read carries the rows, notes and result of the group (several files a task: the fixed cost of a connection and
    its query plans is paid once for them)."""
    outcomes, parts = [], []
    for i, path in enumerate(paths):
        try:
            trace = read_trace(path)
        except InputError as exc:
            outcomes.append(FileOutcome(path, UNREADABLE, str(exc)))
            continue
        if trace.is_execution_trace:
            outcomes.append(FileOutcome(path, EXECUTION_TRACE))
            continue
        rank, source = assigned[i] if assigned else file_rank(path, trace, rank_option)
        if rank is None:
            outcomes.append(FileOutcome(path, UNRANKED))
            continue
        part = rank_tables(trace, rank, source)
        del trace
        parts.append(part)
        outcomes.append(FileOutcome(path, DONE, ranks=tuple(sorted(part.tables["ranks"].column("rank").to_pylist()))))
    if not parts:
        return outcomes
    tables = linked(parts)
    del parts
    first = next(i for i, o in enumerate(outcomes) if o.kind == DONE)
    outcomes[first] = replace(outcomes[first], rows={name: t.num_rows for name, t in tables.items()},
                              diagnostics=tables.diagnostics, result=job(tables, *args))
    return outcomes


def on_rank(dataset, rank: int, job: Callable, *args) -> list[FileOutcome]:
    """One rank of an ingested DATASET read (its partitions only) and JOB(tables, *args) run on it."""
    tables = read_rank(dataset, rank)
    return [FileOutcome(f"{dataset} (rank {rank})", DONE, ranks=(rank,),
                        rows={name: t.num_rows for name, t in tables.items()}, diagnostics=tables.diagnostics,
                        result=job(tables, *args))]


def ingest_job(tables: TraceTables, building: Path) -> None:
    """The file's ranks' partitions, written into the dataset being built. Notes about no rank are left to the
    driver, which writes every file's into one partition."""
    diagnostics = tables.diagnostics
    write_tables(tables.with_tables(diagnostics=diagnostics.filter(pc.is_valid(diagnostics.column("rank")))),
                 building)


@dataclass(frozen=True)
class ReportPart:
    results: dict[str, pl.DataFrame]
    failures: dict[str, str]
    problems: list[str]
    ranks: pa.Table


def report_job(tables: TraceTables, names: list[str], staging: Path) -> ReportPart:
    """The per-rank analyses NAMES, and the file's ranks' workbooks written into STAGING."""
    done = run_analyses(tables, names=names)
    jobs = workbook_jobs(done.ranks, per_rank=True)
    problems = write_workbooks(done, jobs, [staging / spec.file.format(rank=rank) for spec, rank in jobs])
    return ReportPart(done.results, done.failures, problems, tables.ranks)


def summarize_job(tables: TraceTables) -> SidePart:
    return summarize_ranks(tables)
