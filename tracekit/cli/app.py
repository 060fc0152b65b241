"""The `tracekit` command group and what every command shares: user errors as one line and exit code 2, warnings as
`tracekit: warning:` lines and exit code 3, and reading inputs through the API with a progress bar."""

from __future__ import annotations

import atexit
import functools
import gc
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tracekit import storage
from tracekit.errors import InputError

# Imported where used: --help, --version, `queries` and `schema` need neither pyarrow, polars nor DuckDB, and the
# commands that only read traces (report) need not load pyarrow.parquet (tests/cli/test_imports.py).
if TYPE_CHECKING:
    from tracekit.engine.tables import TraceTables
    from tracekit.inputs import Inputs
    from tracekit.query.database import TraceDatabase


class LazyConsole:
    """A rich Console made on first use: rich took ~20 ms to import before a command's head start, while the core
    the helper reading ahead would use stayed idle (tests/cli/test_imports.py)."""

    def __init__(self, **options):
        self._options, self._made = options, None

    @property
    def console(self):
        """The Console itself (what rich's own objects, a Progress, take)."""
        if self._made is None:
            from rich.console import Console
            self._made = Console(**self._options)
        return self._made

    def __getattr__(self, name: str):
        return getattr(self.console, name)

    def __setattr__(self, name: str, value) -> None:  # `console.width = ...` (frames.print_whole) is the Console's
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.console, name, value)


# soft_wrap: a message is one line however narrow the terminal (scripts and tests grep it); piped output is not
# squeezed into rich's default 80 columns.
stderr = LazyConsole(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() or "COLUMNS" in os.environ else 240)
stdout = LazyConsole(soft_wrap=True, width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 240)

# The work is done but incomplete: read from a cut trace file, or an analysis failed and was left out
# (1: regression gate, 2: user error)
INCOMPLETE_EXIT_CODE = 3


def user_errors(fn):
    """Turn InputError, and an OSError about a path the user gave (a name too long, a folder not writable), into
    one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            click.echo(f"tracekit: error: {exc}", err=True)
            sys.exit(2)
        except OSError as exc:
            if exc.filename is None:
                raise
            click.echo(f"tracekit: error: {exc.filename}: {(exc.strerror or str(exc)).lower()}", err=True)
            sys.exit(2)

    return wrapper


# Which module of tracekit.cli defines each command: a command imports only its own module (and what that
# imports), so `tracekit report` does not pay for the diff, replay or export code (bench/RESULTS.md).
COMMAND_MODULES = {"ingest": "traces", "report": "traces", "graph": "traces", "synth": "traces", "diff": "compare",
                   "sql": "query", "run": "query", "queries": "query", "schema": "query", "export": "export",
                   "timeline": "export", "replay": "replay"}


class CommandsOnDemand(click.Group):
    """A group whose commands are registered when their module is first imported (on use, or for --help)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | COMMAND_MODULES.keys())

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in COMMAND_MODULES and name not in self.commands:
            import_module(f"tracekit.cli.{COMMAND_MODULES[name]}")
        return super().get_command(ctx, name)


@click.group(cls=CommandsOnDemand, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tracekit")
def main():
    """Turn PyTorch profiler traces into answers: tables, SQL, Excel reports, diffs."""


def run() -> None:
    """The `tracekit` program (console script, `python -m tracekit.cli`): `main`, then the exit handlers, then the
    process ends without tearing the interpreter down.

    Teardown frees every module and object one by one: 0.16-0.27 CPU s with polars, duckdb and pyarrow loaded, a
    tenth of a small report (bench/RESULTS.md), for nothing a reader gets: every file is closed by then (written
    atomically) and the standard streams are flushed here. `main` itself (CliRunner in tests) is left as it is.

    Arrow allocates from the system allocator here (unless ARROW_DEFAULT_MEMORY_POOL says otherwise): the program
    owns its process, and its peak is lower with it, CPU alike (bench/RESULTS.md, ingest without polars: ingest
    -31 to -47 MB, report -14 to -31 MB on the 4 bench traces). Set before pyarrow loads, which reads it once; the
    notebook API leaves the process's allocator alone.

    numpy's OpenBLAS, which tracekit never calls, runs on one thread here: by default it starts a thread per core
    when numpy loads, which busy-waits for work for ~0.1 CPU s (`import numpy` alone: 0.17 against 0.06 CPU s), CPU
    that the reader and DuckDB lose on a small machine.

    Python's cyclic garbage collector is off here: objects are still freed by reference counting as their last
    reference goes, and only objects in reference cycles wait for the process's end. A report of OWLv2 ran it 173
    times (0.046 CPU s, 0.034 of it while the modules were imported, on the way to the read) and found 5k such
    objects, 26k in a report of 8 ranks (xlsxwriter's workbooks and sheets, which refer to each other: 2 MB); an
    ingest, timeline, replay or export 1-2k. The notebook API leaves the collector alone.

    Ctrl-C ends the program with "Aborted!" and exit code 1 wherever it lands, as click does outside DuckDB.
    """
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    gc.disable()
    interrupted = threading.Event()

    def on_interrupt(signum, frame):
        interrupted.set()
        signal.default_int_handler(signum, frame)  # KeyboardInterrupt, as without this handler

    signal.signal(signal.SIGINT, on_interrupt)
    try:
        main()  # standalone: ends in SystemExit
    except SystemExit as exc:
        code = exc.code
    except Exception:
        # Ctrl-C during a DuckDB query reaches us as the query's error ("Query interrupted", or a registered
        # table's scan failing on KeyboardInterrupt), not as the KeyboardInterrupt click reports as "Aborted!"
        if not interrupted.is_set():
            raise
        click.echo("Aborted!", err=True)
        code = 1
    else:
        code = 0
    if not isinstance(code, (int, type(None))):  # sys.exit("message"): printed, exit code 1, as Python does
        print(code, file=sys.stderr)
        code = 1
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)  # CPython's; elsewhere, a normal exit
    if run_exit_handlers is None:
        sys.exit(code)
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can reach the reader
            pass
    os._exit(code or 0)


@main.result_callback()
def incomplete_exit_code(_result, **_params):
    """After a command finished normally: exit code 3 if it read a cut trace file or left out a failed analysis."""
    if click.get_current_context().meta.get("tracekit_incomplete"):
        sys.exit(INCOMPLETE_EXIT_CODE)


def warn(lines: Iterable[str]) -> None:
    """One `tracekit: warning:` line each; the command then ends with INCOMPLETE_EXIT_CODE."""
    for line in lines:
        click.echo(f"tracekit: warning: {line}", err=True)
        click.get_current_context().meta["tracekit_incomplete"] = True


def warn_about_failed_analyses(failures: dict[str, str]) -> None:
    """One warning line per analysis that failed (the rest of the output is written without it)."""
    warn(f"analysis {name} failed and was left out: {' '.join(reason.split())}" for name, reason in failures.items())


@contextmanager
def input_warnings_reported() -> Iterator[None]:
    """The API's warnings about input files issued inside (a cut file, a file left out), as warning lines (other
    warnings go on as they were)."""
    from tracekit.inputs import INPUT_WARNINGS

    with warnings.catch_warnings(record=True) as caught:
        for category in INPUT_WARNINGS:
            warnings.simplefilter("always", category)
        yield
    warn(str(w.message) for w in caught if issubclass(w.category, INPUT_WARNINGS))
    for w in caught:
        if not issubclass(w.category, INPUT_WARNINGS):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


@contextmanager
def progress_bar(inputs: Inputs, doing: str = "") -> Iterator:
    """The `progress` callback of `load`: a bar on a terminal when the input is several files or large, else None;
    DOING says what is done with them as they are read."""
    files = inputs.files + inputs.graph_captures
    also = f", {doing}" if doing else ""
    if not files or len(files) == 1 and storage.size(files[0]) < 20_000_000 or not stderr.is_terminal:
        with working(f"reading {inputs.label}{also}"):
            yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn(f"reading traces{also}"), BarColumn(), TextColumn("{task.completed}/{task.total} files"),
                  TimeElapsedColumn(), console=stderr.console, transient=True) as bar:
        task = bar.add_task("read", total=len(files))
        yield lambda path, size: bar.advance(task)


# Work that takes longer than this many seconds shows a spinner on stderr (a terminal only): TRACEKIT_PROGRESS_AFTER
# changes it (0: at once).
PROGRESS_AFTER_SECONDS = 2.0


@contextmanager
def working(what: str) -> Iterator[None]:
    """A transient spinner saying `what`, with the time elapsed, on stderr once the work inside has run for
    PROGRESS_AFTER_SECONDS; nothing when stderr is not a terminal. Not inside another bar (rich draws one at a time)."""
    if not stderr.is_terminal:
        yield
        return
    try:
        after = float(os.environ.get("TRACEKIT_PROGRESS_AFTER", PROGRESS_AFTER_SECONDS))
    except ValueError:
        after = PROGRESS_AFTER_SECONDS
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    spinner = Progress(SpinnerColumn(), TextColumn(what), TimeElapsedColumn(), console=stderr.console,
                       transient=True)
    spinner.add_task(what, total=None)
    timer = threading.Timer(after, spinner.start)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()
        spinner.stop()


def load_traces(paths: Iterable[str] | Inputs, rank: int | None = None, helpers=None) -> TraceTables:
    """`tracekit.load` (its input rules: InputError for no events or for files that are not ranks of one run unless
    the command was given --as-ranks, a warning line per cut trace file), with a progress bar; large files' chunks
    shared with HELPERS when given (`head_started`)."""
    from tracekit.pipeline import load

    inputs = command_inputs(paths)
    with input_warnings_reported(), progress_bar(inputs) as progress:
        return load(inputs, rank=rank, progress=progress, as_ranks=as_ranks_given(), helpers=helpers)


def command_inputs(paths: Iterable[str] | Inputs) -> Inputs:
    """PATHS resolved, with the command's --graph-capture files: every command that reads traces resolves them here."""
    from tracekit.inputs import resolve_inputs

    return resolve_inputs(paths, graph_captures_given())


AS_RANKS = "tracekit_as_ranks"  # the context's meta key --as-ranks sets


def remember_as_ranks(ctx: click.Context, _param, value: bool) -> None:
    ctx.meta[AS_RANKS] = value


GRAPH_CAPTURES = "tracekit_graph_captures"  # the context's meta key --graph-capture sets


def remember_graph_captures(ctx: click.Context, _param, value: tuple[str, ...]) -> None:
    ctx.meta[GRAPH_CAPTURES] = value


def trace_input_options(command):
    """The options of every command that reads traces. load_traces / open_database / planned read them from the
    context (command_inputs), so a command's function does not pass them along. In a diff they apply to both sides:
    each replay takes the captured graph that fits it (tracekit.link.graph_capture)."""
    as_ranks = click.option(
        "--as-ranks", is_flag=True, expose_value=False, callback=remember_as_ranks,
        help="Read the trace files as ranks of one run even where they disagree (world size, device, PyTorch "
             "version) or their time spans do not overlap; without it such files are refused.")
    graph_capture = click.option(
        "--graph-capture", multiple=True, expose_value=False, callback=remember_graph_captures, metavar="FILE",
        help="A trace of capturing the CUDA/HIP graphs the traces replay (repeatable; a directory: its trace files): "
             "each replayed kernel is owned by the op, shapes and module stack it was captured under "
             "(docs/categories.md, Graph replays).")
    return as_ranks(graph_capture(command))



def as_ranks_given() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.meta.get(AS_RANKS))


def graph_captures_given() -> tuple[str, ...]:
    ctx = click.get_current_context(silent=True)
    return tuple(ctx.meta.get(GRAPH_CAPTURES, ())) if ctx else ()


peak_option = click.option(
    "--peak", "peak_file", type=click.Path(path_type=Path), default=None, metavar="FILE",
    help="Device peaks CSV replacing the shipped table (the columns of queries/data/device_peaks.csv): what op_perf's "
         "percent_of_peak is measured against.")


def read_peak_option(peak_file: Path | None):
    """The --peak table (None: the shipped one), read before any trace so that a bad file fails first."""
    from tracekit.engine.peaks import read_peaks

    return None if peak_file is None else read_peaks(peak_file)


def executor_options(fn):
    """--jobs N and --scheduler on a command that runs the plan (`pipeline.run_plan`): its `executor` argument, a
    context manager giving the executor its per-rank tasks run on."""
    fn = click.option(
        "--scheduler", default=None, metavar="local:N|tcp://HOST:PORT", expose_value=False,
        callback=remember_option,
        help="Run the per-rank work (reading, linking, per-rank analyses and outputs) on a Dask cluster: local:N "
             "starts N worker processes here, tcp://HOST:PORT uses a running cluster's scheduler. Needs "
             "tracekit[dask]. The outputs are the same bytes as without it.")(fn)
    return click.option(
        "--jobs", "-j", type=click.IntRange(min=1), default=None, metavar="N", expose_value=False,
        callback=remember_option,
        help="Run the per-rank work in N local processes (files read in groups, one group a process at a time). "
             "The outputs are the same bytes as without it.")(fn)


def remember_option(ctx: click.Context, param: click.Parameter, value) -> None:
    ctx.meta[f"tracekit_{param.name}"] = value


@contextmanager
def executor(head_start: Iterable[str] = (), forked: bool = True) -> Iterator:
    """The executor --jobs / --scheduler ask for (in this process without either, its reads given a head start on
    HEAD_START: `head_started`, with FORKED), for the block."""
    jobs, scheduler = check_executor_options()
    if scheduler is not None:
        from tracekit.cluster.scheduler import dask_executor
        with dask_executor(scheduler) as dask:
            yield dask
    elif jobs is not None and jobs > 1:
        from tracekit.executors import ProcessPool
        with ProcessPool(jobs) as pool:
            yield pool
    else:
        from tracekit.executors import InProcess
        with head_started(head_start, forked) as helpers:
            yield InProcess(helpers)


@contextmanager
def head_started(paths: Iterable[str], forked: bool = True) -> Iterator:
    """The helper processes the block's reads share large files' chunks with, started now, the first reading the
    first large local file of PATHS on its own (a head start: tracekit/read/chunk_workers.py); a command enters the
    block before its imports, which leave a CPU idle for ~0.3 s. Ended with the block, or with the first read.

    `forked`: the reader is imported first, and the helpers are forks of this process that have it (where it may
    fork: `chunk_workers.may_fork`), not fresh interpreters that import it beside the command's imports: for a
    command whose imports go on long after the reader's (report, timeline, diff: 4-6% less CPU, 0.5-4% less time
    on OWLv2 and SD3.5, bench/RESULTS.md); `tracekit ingest` imports little more, and a fresh helper started at once
    reads as far ahead (its time the same, 2026-12-05)."""
    from tracekit.read.chunk_workers import ChunkHelpers

    if forked:
        import tracekit.read.kineto  # noqa: F401  (the reader: the forks have it, and decode at once)
    with ChunkHelpers().head_start(paths, forked=forked) as helpers:
        yield helpers


def check_executor_options() -> tuple[int | None, str | None]:
    """(--jobs, --scheduler), refused (InputError) when both are given or the scheduler is malformed: called first
    by a command, before anything is read."""
    ctx = click.get_current_context()
    jobs, scheduler = ctx.meta.get("tracekit_jobs"), ctx.meta.get("tracekit_scheduler")
    if jobs is not None and scheduler is not None:
        raise InputError(f"--jobs {jobs} --scheduler {scheduler}: give one (--jobs runs local processes, "
                         "--scheduler a Dask cluster)")
    if scheduler is not None:
        from tracekit.cluster.scheduler import check_scheduler
        check_scheduler(scheduler)
    return jobs, scheduler


@contextmanager
def planned(paths: Iterable[str] | Inputs, doing: str) -> Iterator:
    """(inputs resolved, the `progress` callback of `pipeline.run_plan`) for a command's plan: the API's warnings
    about input files as warning lines, a bar or spinner saying it reads the inputs and DOING."""
    inputs = command_inputs(paths)
    with input_warnings_reported(), progress_bar(inputs, doing) as progress:
        yield inputs, progress


def open_database(paths: Iterable[str], rank: int | None = None, safe: bool = False) -> TraceDatabase:
    """`tracekit.open` as `load_traces` reads: traces are read, a dataset is opened in place (read, when safe)."""
    from tracekit.query.database import open_traces

    inputs = command_inputs(paths)
    with input_warnings_reported(), progress_bar(inputs) as progress:
        return open_traces(inputs, rank=rank, progress=progress, safe=safe, as_ranks=as_ranks_given())
