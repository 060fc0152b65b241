"""`tracekit report`: one Excel workbook per rank, and one comparing the ranks.

The workbooks are described as data in reports/ (rank.toml, ranks.toml, style.toml): which sheets, which query feeds
each, columns, headers, formats, charts. This module runs the queries those definitions name (each once, over all
ranks), cuts the results to each rank and hands them to the generic writer (tracekit/output/xlsx.py).

A query that does not exist (or fails) does not stop the report: its sheets are left out and the reason is reported
(returned in `problems`, printed by the CLI).
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import polars as pl
import pyarrow as pa
import tomllib

from tracekit.engine.catalog import across_ranks, analysis_order, data_dir, walks_critical_path
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.inputs import Inputs
from tracekit.output.atomic import created_dir, replacing_files, staging_dir
from tracekit.output.files import refuse_input_file
from tracekit.output.xlsx import (
    Block,
    Chart,
    Column,
    MoreColumns,
    NameRule,
    NumberFormat,
    Sheet,
    Style,
    WorkbookWriter,
    shape_rows,
)
from tracekit.pipeline import Progress as ReadProgress
from tracekit.pipeline import one_task, run_plan
from tracekit.query import analyses

WORKBOOKS = ("rank", "ranks")  # reports/NAME.toml, in the order they are written

Progress = Callable[[int, int, str], None]  # (done, total, what is happening)


def reports_dir() -> Path:
    return data_dir("reports")


@dataclass(frozen=True)
class SheetSpec:
    name: str
    blocks: tuple[Block, ...]
    split_by: str | None = None  # one sheet per value of this column
    skip: tuple[str, ...] = ()
    order: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkbookSpec:
    name: str
    file: str  # file name; "{rank}" is the rank for per-rank workbooks
    per_rank: bool
    min_ranks: int
    sheets: tuple[SheetSpec, ...]

    def queries(self) -> list[str]:
        return list(dict.fromkeys(b.query for s in self.sheets for b in s.blocks))

    def file_pattern(self) -> re.Pattern:
        return re.compile(re.escape(self.file).replace(re.escape("{rank}"), r"\d+") + "$")


def parse_column(entry) -> Column:
    if isinstance(entry, str):
        return Column(entry)
    return Column(entry["col"], entry.get("header"), entry.get("format"), entry.get("width"), entry.get("bar", False))


def parse_block(raw: dict) -> Block:
    columns = raw.get("columns", "*")
    chart = raw.get("chart")
    more = raw.get("more_columns")
    return Block(
        query=raw["query"],
        title=raw.get("title", ""),
        columns=None if columns == "*" else tuple(parse_column(c) for c in columns),
        order_by=tuple(raw.get("order_by", ())),
        where={k: tuple(v) for k, v in raw.get("where", {}).items()},
        limit=raw.get("limit"),
        transpose=raw.get("transpose", False),
        chart=Chart(chart["type"], chart["categories"], tuple(chart["values"]), chart.get("title", ""),
                    chart.get("x_title", ""), chart.get("y_title", ""), chart.get("stacked", False),
                    tuple(chart.get("skip", ())), chart.get("series_by"), tuple(chart.get("lines", ())),
                    chart.get("log_axes", False)) if chart else None,
        more_columns=MoreColumns(more["values"], more["labels"], more["header"], more["format"], more.get("mark"))
        if more else None,
    )


def parse_sheet(raw: dict) -> SheetSpec:
    blocks = raw.get("blocks") or [raw]
    return SheetSpec(raw["name"], tuple(parse_block(b) for b in blocks), raw.get("split_by"),
                     tuple(raw.get("skip", ())), tuple(raw.get("order", ())))


# Text of a workbook that people read: sheet names, titles, headers, axis titles (never column or query names).
WORDED_KEYS = ("name", "title", "header", "x_title", "y_title")


def device_word(results: dict[str, pl.DataFrame]) -> str:
    """GPU, or device when the ranks' accelerators are all something else (MTIA: rank_info.device_type)."""
    info = results.get("rank_info")
    types = set(info["device_type"].drop_nulls()) if info is not None and "device_type" in info.columns else set()
    return "device" if types and "GPU" not in types else "GPU"


def worded(raw, device: str):
    """The workbook definition with "GPU" in its people-facing text said as `device` (Device at a text's start)."""
    if isinstance(raw, list):
        return [worded(v, device) for v in raw]
    if not isinstance(raw, dict):
        return raw
    return {k: re.sub(r"\bGPU\b", lambda m: device.capitalize() if m.start() == 0 else device, v)
            if k in WORDED_KEYS and isinstance(v, str) else worded(v, device) for k, v in raw.items()}


@cache
def workbook_spec(name: str, device: str = "GPU") -> WorkbookSpec:
    """reports/NAME.toml; with `device` other than GPU, its headings name the device so."""
    path = reports_dir() / f"{name}.toml"
    raw = tomllib.loads(path.read_text())
    if device != "GPU":
        raw = worded(raw, device)
    try:
        return WorkbookSpec(name, raw["file"], raw.get("per_rank", False), raw.get("min_ranks", 1),
                            tuple(parse_sheet(s) for s in raw["sheets"]))
    except KeyError as exc:
        raise ValueError(f"{path}: missing key {exc}") from None


@cache
def style() -> Style:
    raw = tomllib.loads((reports_dir() / "style.toml").read_text())
    formats = {name: NumberFormat(f.get("excel"), f.get("python"), f.get("scale"), f.get("text", False),
                                  f.get("one_line", False)) for name, f in raw["formats"].items()}
    return Style(formats, tuple(NameRule(**r) for r in raw["by_name"]), raw["cells"], raw["widths"],
                 raw["data_bar"], raw["chart"], raw["significant_digits"])


def workbook_specs() -> list[WorkbookSpec]:
    return [workbook_spec(name) for name in WORKBOOKS]


def report_queries(rank_count: int | None = None, critical_path: bool = True) -> list[str]:
    """Every query the workbooks read, in the order they first appear; with `rank_count`, only those of the
    workbooks a report of that many ranks writes (one rank: no ranks.xlsx, so none of its comparisons); without
    `critical_path`, none that walks the critical path (its sheet is then left out, as a sheet without rows)."""
    return list(dict.fromkeys(q for spec in workbook_specs() for q in spec.queries()
                              if (rank_count is None or rank_count >= spec.min_ranks)
                              and (critical_path or not walks_critical_path(q))))


@dataclass(frozen=True)
class Analyses:
    """The results of the report's queries over all ranks, and why any query gave nothing."""
    results: dict[str, pl.DataFrame]
    failures: dict[str, str]
    ranks: tuple[int, ...]


def run_analyses(tables: TraceTables, progress: Progress | None = None, extra: tuple[str, ...] = (),
                 names: list[str] | None = None, given: dict[str, pl.DataFrame] | None = None,
                 critical_path: bool = True, arrivals: analyses.Arrivals | None = None) -> Analyses:
    """Run every query the workbooks read (those of the critical path only with `critical_path`; and `extra` ones),
    each once over all ranks; or the analyses `names`.

    `given`: results already computed elsewhere (per-rank analyses run where each rank was read), which the
    analyses reading them take as they are. `arrivals`: handed each result as it ends (`analyses.run_all`).
    """
    names = names or list(dict.fromkeys(report_queries(len(tables.rank_list), critical_path) + list(extra)))
    failures: dict[str, str] = {}
    done = iter(range(1, len(names) + 1))
    # Every thread DuckDB has: the analyses' aggregates do not depend on the order rows arrive in (queries/lib/exact.sql),
    # and every sort breaks ties, so the same input still gives the same bits (and bytes).
    results = analyses.run_all(tables, names, failures, given=given,
                               progress=lambda name: progress(next(done), len(names), f"analysis {name}")
                               if progress else None, arrivals=arrivals)
    return Analyses(results, failures, tuple(tables.rank_list))


def across_rank_queries(rank_count: int, extra: tuple[str, ...] = (), critical_path: bool = True) -> list[str]:
    """The cross-rank analyses (`scope: across ranks`) a report of RANK_COUNT ranks reads (as `report_queries`),
    and those of EXTRA."""
    return [q for q in dict.fromkeys(report_queries(rank_count, critical_path) + list(extra)) if across_ranks(q)]


def per_rank_report_queries(extra: tuple[str, ...] = (), critical_path: bool = True) -> list[str]:
    """The analyses of a report that run on each rank's own tables: the per-rank ones the workbooks read (as
    `report_queries`), and those the cross-rank ones read."""
    wanted = report_queries(critical_path=critical_path) + list(extra)
    inputs = [step for name in wanted if across_ranks(name) for step in analysis_order(name) if not across_ranks(step)]
    return list(dict.fromkeys([name for name in wanted if not across_ranks(name)] + inputs))


def split_by_rank(frame: pl.DataFrame) -> dict[int, pl.DataFrame]:
    if "rank" not in frame.columns:
        return {}
    return {key[0]: part for key, part in frame.partition_by("rank", as_dict=True, maintain_order=True).items()}


def sheets_for(spec: WorkbookSpec, data: dict[str, pl.DataFrame], failures: dict[str, str],
               problems: list[str]) -> list[Sheet]:
    """Concrete sheets of one workbook from its query results (already cut to the workbook's rank)."""
    return [made for sheet in spec.sheets for made in sheets_of(spec, sheet, data, failures, problems)]


def sheets_of(spec: WorkbookSpec, sheet: SheetSpec, data: dict[str, pl.DataFrame], failures: dict[str, str],
              problems: list[str]) -> list[Sheet]:
    """The concrete sheets of one sheet of SPEC (none, one, or one per value of its `split_by`)."""
    for block in sheet.blocks:
        if block.query in failures:
            problems.append(f"{spec.name}.toml sheet {sheet.name!r}: left out query {block.query}: "
                            f"{failures[block.query]}")
    frames = [(b, data.get(b.query)) for b in sheet.blocks if data.get(b.query) is not None]
    if sheet.split_by:
        return [made for value in split_values(sheet, frames)
                for made in non_empty(sheet.name.format(value=value),
                                      [(b, f.filter(pl.col(sheet.split_by) == value)) for b, f in frames])]
    return non_empty(sheet.name, frames)


def split_values(sheet: SheetSpec, frames: list[tuple[Block, pl.DataFrame]]) -> list[str]:
    present = {v for _, f in frames if sheet.split_by in f.columns for v in f.get_column(sheet.split_by).unique()
               if v is not None and v not in sheet.skip}
    known = [v for v in sheet.order if v in present]
    return known + sorted(present - set(known), key=str)


def non_empty(name: str, parts: list[tuple[Block, pl.DataFrame]]) -> list[Sheet]:
    shaped = tuple((b, shape_rows(b, f)) for b, f in parts)
    shaped = tuple((b, f) for b, f in shaped if f.height)
    return [Sheet(name, shaped)] if shaped else []


def check_out_dir(out_dir: Path, force: bool, inputs: Iterable[str | Path] = ()) -> None:
    """Fail early (InputError) when OUT cannot take the workbooks; without `force`, when it already holds some; when
    a workbook there that would be replaced or removed is one of `inputs`. Creates nothing: OUT is made when the
    workbooks are written."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a directory")
    existing = out_dir
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(f"{out_dir}: cannot create directory ({existing} is not a directory)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"{existing}: directory is not writable")
    if out_dir.is_dir():
        found = existing_workbooks(out_dir)
        if found and not force:
            raise InputError(f"{found[0]}: exists (use --force to replace the workbooks in {out_dir})")
        for workbook in found:
            refuse_input_file(workbook, inputs)


def existing_workbooks(out_dir: Path) -> list[Path]:
    patterns = [spec.file_pattern() for spec in workbook_specs()]
    return sorted(p for p in out_dir.iterdir() if p.is_file() and any(r.match(p.name) for r in patterns))


def write_reports(tables: TraceTables, out_dir: Path, force: bool = False, *, analyses_done: Analyses | None = None,
                  problems: list[str] | None = None, progress: Progress | None = None,
                  critical_path: bool = True) -> list[Path]:
    """Write rankN.xlsx for every rank and, with several ranks, ranks.xlsx into `out_dir`; return their paths.
    Without `critical_path`, the analyses of the Critical path sheet are not run and the sheet is left out.

    Existing workbooks of a previous report in `out_dir` are replaced only with `force` (those this report does not
    write again, e.g. rank7.xlsx of an 8-rank run, are removed then, so the folder describes one run).
    Problems (a query that does not exist yet, a column a query lacks) go to `problems`, or are issued as warnings.
    """
    out_dir = Path(out_dir)
    check_out_dir(out_dir, force)
    jobs = workbook_jobs(tuple(analyses_done.ranks if analyses_done else tables.rank_list))
    with staged_workbooks(out_dir) as staging:
        paths = [staging / workbook_name(job) for job in jobs]
        if analyses_done:
            notes = write_workbooks(analyses.Arrivals(results=analyses_done.results,
                                                      failures=analyses_done.failures), jobs, paths, progress)
        else:
            _, notes = analysed_and_written(tables, report_queries(len(tables.rank_list), critical_path), jobs,
                                            paths, progress)
        paths = published(out_dir, staging, [workbook_name(job) for job in jobs])
    report_problems(notes, problems)
    return paths


def report(inputs: Inputs, out_dir: Path, executor=None, force: bool = False, rank: int | None = None,
           extra: tuple[str, ...] = (), peaks=None, as_ranks: bool = False,
           progress: ReadProgress | None = None, critical_path: bool = True) -> tuple[Analyses, list[Path], list[str]]:
    """`tracekit report`: the plan (`pipeline.run_plan`) on EXECUTOR, each task running its ranks' analyses and
    writing their workbooks (`report_job`); the cross-rank analyses (`scope: across ranks`, over the per-rank
    results) and ranks.xlsx here; the critical path's analyses only with `critical_path`. Returns the analyses,
    the workbooks written and the problems."""
    out_dir = Path(out_dir)
    check_out_dir(out_dir, force, inputs=inputs.given)
    in_process = one_task(executor)
    with staged_workbooks(out_dir) as staging:
        done = run_plan(inputs, report_job,
                        (per_rank_report_queries(extra, critical_path), staging, peaks, in_process, extra,
                         critical_path),
                        executor, rank, as_ranks, progress)
        parts: list[ReportPart] = done.results
        results = analyses.combine_ranks([p.results for p in parts])
        failures = {name: why for p in parts for name, why in p.failures.items()}
        across = [q for q in across_rank_queries(len(done.ranks), extra, critical_path)
                  if q not in results and q not in failures]
        if across:
            small = TraceTables(ranks=pa.concat_tables([p.ranks for p in parts]).sort_by("rank"),
                                diagnostics=done.diagnostics)
            cross = run_analyses(small, names=across, given=results)
            failures |= cross.failures
            results |= cross.results
        report_done = Analyses(results, failures, tuple(done.ranks))
        jobs = workbook_jobs(report_done.ranks, per_rank=False)
        problems = [note for p in parts for note in p.problems]
        problems += write_workbooks(analyses.Arrivals(results=results, failures=failures), jobs,
                                    [staging / workbook_name(job) for job in jobs])
        paths = published(out_dir, staging, [workbook_name(job) for job in workbook_jobs(report_done.ranks)])
    return report_done, paths, list(dict.fromkeys(problems))


@dataclass(frozen=True)
class ReportPart:
    """What a task of a report sends back: its ranks' per-rank results, failures and problems, and its ranks."""

    results: dict[str, pl.DataFrame]
    failures: dict[str, str]
    problems: list[str]
    ranks: pa.Table


def report_job(tables: TraceTables, names: list[str], staging: Path, peaks=None, whole: bool = False,
               extra: tuple[str, ...] = (), critical_path: bool = True) -> ReportPart:
    """A task's part of a report: the per-rank analyses NAMES over its ranks, and their workbooks written into
    STAGING. A task that holds every rank (`whole`) runs the cross-rank ones too (those of its rank count, and of
    EXTRA), on the same connection: on a connection of their own after the workbooks, they were 0.03 s of a
    single-rank report."""
    if whole:
        names = names + [q for q in across_rank_queries(len(tables.rank_list), extra, critical_path)
                         if q not in names]
    jobs = workbook_jobs(tuple(tables.rank_list), per_rank=True)
    done, problems = analysed_and_written(tables.with_peaks(peaks), names, jobs,
                                          [staging / workbook_name(job) for job in jobs])
    return ReportPart(done.results, done.failures, problems, tables.ranks)


def analysed_and_written(tables: TraceTables, names: list[str], jobs: list[tuple[WorkbookSpec, int | None]],
                         paths: list[Path], progress: Progress | None = None) -> tuple[Analyses, list[str]]:
    """The analyses NAMES (`run_analyses`), and the workbooks JOBS written to PATHS beside them, each sheet once
    the analyses it shows have ended (`write_workbooks`): written after them all, the workbooks left a core idle
    for most of their writing on a 2-core machine (bench/RESULTS.md). The analyses and the writer's problems."""
    arrivals = analyses.Arrivals(names)
    with ThreadPoolExecutor(1, thread_name_prefix="tracekit-write") as pool:
        writing = pool.submit(write_workbooks, arrivals, jobs, paths, progress)
        try:
            done = run_analyses(tables, progress, names=names, arrivals=arrivals)
        finally:
            arrivals.stop()  # an error: the writer stops too (its workbooks are in the staging folder)
        return done, writing.result()


@contextmanager
def staged_workbooks(out_dir: Path) -> Iterator[Path]:
    """A hidden folder in OUT (made if missing, and removed again on failure) where a report's workbooks are
    written, by any process, before `published` moves them into place: a failure leaves the previous report (if
    any) whole."""
    with created_dir(out_dir), staging_dir(out_dir) as staging:
        yield staging


def published(out_dir: Path, staging: Path, names: list[str]) -> list[Path]:
    """The workbooks NAMES moved from STAGING into OUT together, and the workbooks of an earlier report there that
    this one does not write removed (the folder describes one run); their paths."""
    paths = [out_dir / name for name in names]
    with replacing_files(paths) as temporary:
        for name, temp in zip(names, temporary):
            os.replace(staging / name, temp)
    for stale in set(existing_workbooks(out_dir)) - set(paths):
        stale.unlink()
    return paths


def workbook_name(job: tuple[WorkbookSpec, int | None]) -> str:
    spec, rank = job
    return spec.file.format(rank=rank)


def workbook_jobs(ranks: tuple[int, ...], per_rank: bool | None = None) -> list[tuple[WorkbookSpec, int | None]]:
    """(workbook, rank) for each workbook a report of RANKS writes (rank None: a workbook of all ranks); with
    `per_rank`, only the per-rank workbooks (True) or only the others (False)."""
    return [(spec, rank) for spec in workbook_specs() if len(ranks) >= spec.min_ranks
            and per_rank in (None, spec.per_rank) for rank in (ranks if spec.per_rank else [None])]


def write_workbooks(arrived: analyses.Arrivals, jobs: list[tuple[WorkbookSpec, int | None]], paths: list[Path],
                    progress: Progress | None = None) -> list[str]:
    """Write each job's workbook to its path from the results in ARRIVED (cut to its rank), in order, each sheet
    once the analyses it shows have ended; returns the problems."""
    notes: list[str] = []
    per_rank: dict[str, dict[int, pl.DataFrame]] = {}  # each result cut by rank once, when first needed

    def frame_of(name: str, rank: int | None) -> pl.DataFrame | None:
        frame = arrived.results.get(name)
        if frame is None or rank is None:
            return frame
        if "rank" not in frame.columns:
            return None
        if name not in per_rank:
            per_rank[name] = split_by_rank(frame)
        return per_rank[name].get(rank, frame.clear())

    def data_of(names: Iterable[str], rank: int | None) -> dict[str, pl.DataFrame]:
        arrived.wait_for(names)
        return {name: frame for name in names if (frame := frame_of(name, rank)) is not None}

    for step, ((spec, rank), path) in enumerate(zip(jobs, paths), 1):
        if progress:
            progress(step, len(jobs), f"writing {path.name}")
        spec = workbook_spec(spec.name, device_word(data_of(["rank_info"], rank)))
        writer, taken, left_out = WorkbookWriter(path, style()), set(), []
        for sheet in spec.sheets:
            queries = list(dict.fromkeys(block.query for block in sheet.blocks))
            for made in sheets_of(spec, sheet, data_of(queries, rank), arrived.failures, left_out):
                writer.write_sheet(made, taken)
        writer.close()
        notes += left_out + writer.problems
    return list(dict.fromkeys(notes))


def report_problems(notes: list[str], problems: list[str] | None) -> None:
    if problems is not None:
        problems += notes
    else:
        for note in notes:
            warnings.warn(note, stacklevel=3)
