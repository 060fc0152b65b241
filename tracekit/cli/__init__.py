"""The `tracekit` command: a thin layer over the Python API.

User errors (InputError) print one line and exit with code 2; nothing else is caught here.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import click
import polars as pl
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tracekit import diff, schema
from tracekit.engine import catalog
from tracekit.errors import InputError
from tracekit.inputs import dataset_input, find_trace_files, path_kind, refuse_no_events
from tracekit.output.files import refuse_input_dir, refuse_input_file
from tracekit.output.frames import FORMATS, choose_format, print_frame, write_frame
from tracekit.pipeline import load

# Modules only some commands use are imported in those commands: a command pays only for what it runs (imports are
# most of the time of a small report, bench/RESULTS.md).

# soft_wrap: a message is one line however narrow the terminal (scripts and tests grep it); piped output is not
# squeezed into rich's default 80 columns.
stderr = Console(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() or "COLUMNS" in os.environ else 240)
stdout = Console(soft_wrap=True, width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 240)


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


# The work is done but incomplete: read from a cut trace file, or an analysis failed and was left out
# (1: regression gate, 2: user error)
INCOMPLETE_EXIT_CODE = 3


def load_with_progress(paths: tuple[str, ...], rank: int | None = None):
    """`load` with a progress bar when the input is several files or large; a warning line for each cut trace
    file, whose complete entries were read (the command then ends with INCOMPLETE_EXIT_CODE)."""
    tables = _load_with_progress(paths, rank)
    refuse_no_events(tables, list(paths))
    warn_about_cut_files(tables.polars("diagnostics").filter(pl.col("reason") == "truncated"))
    return tables


def warn_about_cut_files(cut: pl.DataFrame) -> None:
    """One warning line per cut trace file (`truncated` diagnostics); the command then ends with INCOMPLETE_EXIT_CODE."""
    for source, detail in cut.select("source_file", "detail").unique(maintain_order=True).iter_rows():
        click.echo(f"tracekit: warning: {source}: {detail}", err=True)
    if cut.height:
        click.get_current_context().meta["tracekit_incomplete"] = True


def warn_about_failed_analyses(failures: dict[str, str]) -> None:
    """One warning line per analysis that failed (the rest of the output is written without it); the command then
    ends with INCOMPLETE_EXIT_CODE."""
    for name, reason in failures.items():
        click.echo(f"tracekit: warning: analysis {name} failed and was left out: {' '.join(reason.split())}",
                   err=True)
    if failures:
        click.get_current_context().meta["tracekit_incomplete"] = True


def _load_with_progress(paths: tuple[str, ...], rank: int | None):
    if dataset_input(list(paths)) is not None:
        return load(paths)
    files = find_trace_files(paths)
    total = sum(f.stat().st_size for f in files)
    if len(files) == 1 and total < 20_000_000 or not stderr.is_terminal:
        return load(files, rank=rank)
    with Progress(TextColumn("reading traces"), BarColumn(), TextColumn("{task.completed}/{task.total} files"),
                  TimeElapsedColumn(), console=stderr, transient=True) as bar:
        task = bar.add_task("read", total=len(files))
        return load(files, rank=rank, progress=lambda path, size: bar.advance(task))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tracekit")
def main():
    """Turn PyTorch profiler traces into answers: tables, SQL, Excel reports, diffs."""


@main.result_callback()
def incomplete_exit_code(_result, **_params):
    """After a command finished normally: exit code 3 if it read a cut trace file or left out a failed analysis."""
    if click.get_current_context().meta.get("tracekit_incomplete"):
        sys.exit(INCOMPLETE_EXIT_CODE)


@main.command()
@click.argument("traces", nargs=-1, required=True)
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(path_type=Path),
              help="Directory to write the Parquet dataset to (one folder per table, rank=N/ partitions).")
@click.option("--rank", type=int, default=None, help="Rank of a single trace file that does not say its rank.")
@click.option("--force", is_flag=True, help="Replace an existing tracekit dataset in OUT.")
@user_errors
def ingest(traces, out_dir, rank, force):
    """Read Kineto traces (files or directories) and write them as a Parquet dataset."""
    from tracekit.output.dataset import write_dataset
    refuse_input_dir(out_dir, traces)
    tables = load_with_progress(traces, rank)
    write_dataset(tables, out_dir, force=force)
    counts = ", ".join(f"{name} {t.num_rows:,}" for name, t in tables.items() if t.num_rows)
    dropped = sum(tables.diagnostics.column("dropped").to_pylist())
    stdout.print(f"wrote {out_dir}: ranks {tables.rank_list}; {counts}"
                 + (f"; {dropped} entries dropped (see diagnostics)" if dropped else ""))


@main.command(name="diff")
@click.argument("baseline")
@click.argument("candidate")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=diff.DEFAULT_ALPHA,
              show_default=True,
              help="Level of the per-step rank test: a change is called when the 1 - ALPHA confidence interval of its "
                   "per-step shift excludes 0 (and the shift exceeds 1% of the per-step value).")
@click.option("--warmup-steps", type=click.IntRange(min=0), default=diff.DEFAULT_WARMUP_STEPS, show_default=True,
              help="Leading ProfilerSteps of each run left out of the verdicts (named in the output); 0 keeps all.")
@click.option("--fail-on-regression", "fail_percent", type=float, default=None, metavar="PCT",
              help="Exit with code 1 when --metric is called slower and is more than PCT percent above the baseline "
                   "(CI gating).")
@click.option("--metric", default="step_time", show_default=True,
              help="Measure gated by --fail-on-regression: step_time, a GPU timeline category (busy, idle, "
                   "computation, ...), op:NAME, kernel:NAME or category:NAME.")
@click.option("--top", type=int, default=15, show_default=True, help="Changes listed in the terminal.")
@click.option("-o", "--out", "out_path", type=click.Path(path_type=Path), default=None,
              help="Write the comparison workbook (e.g. diff.xlsx): summary with charts, ops, ops by shape, kernels, "
                   "categories, collectives, critical path, one side only.")
@click.option("--force", is_flag=True, help="Replace an existing workbook at --out.")
@user_errors
def diff_command(baseline, candidate, alpha, warmup_steps, fail_percent, metric, top, out_path, force):
    """Compare two runs: BASELINE and CANDIDATE are each a trace file, a directory of ranks or an ingested dataset."""
    try:
        diff.parse_metric_name(metric)
    except LookupError as exc:
        raise InputError(f"--metric {exc}") from None
    if out_path is not None:
        refuse_input_file(out_path, (baseline, candidate))
        if out_path.exists() and not force:
            raise InputError(f"{out_path}: exists (use --force to replace it)")
    # One run's tables at a time: each is summarised (its analyses run) before the next is read.
    sides = [diff.summarize(load_with_progress((path,)), Path(path).name) for path in (baseline, candidate)]
    for side in sides:
        warn_about_failed_analyses({f"{name} (on {side.label})": why for name, why in side.failures.items()})
    result = diff.compare(*sides, alpha=alpha, warmup_steps=warmup_steps)
    diff.print_summary(result, stdout, top)
    if out_path is not None:
        for problem in diff.write_workbook(result, out_path, force):
            stderr.print(f"note: {problem}")
        stdout.print(f"wrote {out_path}")
    if fail_percent is not None:
        try:
            regressed = result.regressed(fail_percent, metric)
        except LookupError as exc:
            raise InputError(f"--metric {exc}") from None
        if result.metric(metric)["verdict"] == diff.verdicts.NOT_ENOUGH:
            click.echo(f"tracekit: --fail-on-regression: {metric}: not enough steps to say (not gated)", err=True)
        if regressed:
            row = result.metric(metric)
            click.echo(f"tracekit: regression: {metric} {signed_percent(row['percent_delta'])} slower "
                       f"(more than {fail_percent:g}%; per-step shift {row['effect']:+.3g}, CI "
                       f"[{row['ci_low']:+.3g}, {row['ci_high']:+.3g}])", err=True)
            sys.exit(1)


def signed_percent(value: float | None) -> str:
    return "∞%" if value is None else f"{value:+.1f}%"


@main.command()
@click.argument("traces", nargs=-1, required=True)
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(path_type=Path),
              help="Directory to write the workbooks to (rank0.xlsx, ..., and ranks.xlsx with several ranks).")
@click.option("--rank", type=int, default=None, help="Rank of a single trace file that does not say its rank.")
@click.option("--force", is_flag=True, help="Replace workbooks of an earlier report in OUT.")
@user_errors
def report(traces, out_dir, rank, force):
    """Write the Excel performance report of traces (files, directories, or an ingested dataset)."""
    from tracekit.output.terminal import QUERIES, print_summary, progress_bar
    from tracekit.output.workbooks import check_out_dir, existing_workbooks, run_analyses, write_reports
    check_out_dir(out_dir, force)
    for workbook in existing_workbooks(out_dir) if out_dir.is_dir() else ():  # replaced or removed with --force
        refuse_input_file(workbook, traces)
    tables = load_with_progress(traces, rank)
    problems: list[str] = []
    with progress_bar(stderr) as progress:
        done = run_analyses(tables, progress, extra=QUERIES)
        paths = write_reports(tables, out_dir, force, analyses_done=done, problems=problems, progress=progress)
    print_summary(stdout, done, paths, problems)
    warn_about_failed_analyses(done.failures)


@main.command()
@click.option("--ranks", type=click.IntRange(min=1), default=2, show_default=True, help="Number of ranks (one file each).")
@click.option("--steps", type=click.IntRange(min=1), default=4, show_default=True, help="Profiler steps per rank.")
@click.option("--seed", type=int, default=0, show_default=True, help="The job: model shapes, kernel speeds, rank skew.")
@click.option("--scale", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="Multiplies the number of ops per step (layers): --ranks 2 --steps 4 --scale 117 gives about 1M events.")
@click.option("--noise", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Sigma of the log-normal jitter applied to every duration.")
@click.option("--noise-seed", type=int, default=0, show_default=True,
              help="With the same --seed, another capture of the same job.")
@click.option("--slow-kernel", "slow_kernels", multiple=True, metavar="NAME=FACTOR",
              help="Multiply the durations of kernels whose name contains NAME (repeatable).")
@click.option("--queued-kernels", type=click.IntRange(min=0), default=0, show_default=True,
              help="Kernels queued before the profiling window: on the GPU, with no launch call in the trace.")
@click.option("--merged", is_flag=True, help="Also write merged/merged.json holding every rank (TraceFuse style).")
@click.option("--gzip", "gzip_output", is_flag=True, help="Write .json.gz files.")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(path_type=Path),
              help="Directory for rank{r}.json and ground_truth.json.")
@user_errors
def synth(ranks, steps, seed, scale, noise, noise_seed, slow_kernels, queued_kernels, merged, gzip_output, out_dir):
    """Write synthetic Kineto traces of a data-parallel training job, with their exact ground truth."""
    from tracekit import synth as synthetic
    paths = synthetic.generate(out_dir, ranks, steps, seed, scale=scale, noise=noise, noise_seed=noise_seed,
                               slow_kernels=synthetic.parse_slow_kernels(slow_kernels), queued_kernels=queued_kernels,
                               merged=merged, gzip=gzip_output)
    entries = sum(r["trace_entries"] for r in synthetic.read_ground_truth(out_dir)["ranks"])
    stdout.print(f"wrote {out_dir}: {', '.join(str(p.relative_to(out_dir)) for p in paths)} "
                 f"({ranks} ranks, {entries:,} trace events) and {synthetic.GROUND_TRUTH_FILE}")


@main.command(name="graph")
@click.argument("traces", nargs=-1, required=True)
@click.option("--step", type=int, default=None,
              help="Window: training step N (ProfilerStep#N of each rank; its events as `run --step` selects them).")
@click.option("--start-ns", type=int, default=None, help="Window start, epoch ns (with --end-ns).")
@click.option("--end-ns", type=int, default=None, help="Window end, epoch ns (exclusive).")
@click.option("-o", "--out", "outs", multiple=True, required=True, type=click.Path(path_type=Path),
              help="File to write: *.graphml (GraphML) or *.dot / *.gv (Graphviz DOT). Repeat for both.")
@click.option("--rank", type=int, default=None, help="Rank of a single trace file that does not say its rank.")
@user_errors
def graph_command(traces, step, start_ns, end_ns, outs, rank):
    """Write the dependency graph of a window (a step's events, or the events overlapping a range; the edges among
    them)."""
    from tracekit.output.graph import graph_writer, write_graph
    for out in outs:
        graph_writer(out)  # refuse an unknown format before reading anything
        refuse_input_file(out, traces)
    tables = load_with_progress(traces, rank)
    for out in outs:
        graph = write_graph(tables, out, step=step, start_ns=start_ns, end_ns=end_ns)
        click.echo(f"wrote {out}: {graph.nodes.num_rows:,} nodes, {graph.edges.num_rows:,} edges")


@main.command(name="schema")
@click.option("--markdown", is_flag=True, default=True, help="Print the schema document (docs/schema.md).")
def schema_command(markdown):
    """Print the documentation of every table and column."""
    click.echo(schema.markdown(), nl=False)


def output_options(fn):
    fn = click.option("-o", "--out", "out_path", type=click.Path(path_type=Path), default=None,
                      help="Write all rows to FILE (format from --format, else from the suffix: .csv, .json, "
                           ".ndjson, .parquet). Without it, the result goes to standard output.")(fn)
    fn = click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
                      help="table (aligned, the default on standard output), csv, json (an array of row objects), "
                           "ndjson or parquet.")(fn)
    return click.option("-n", "--max-rows", type=int, default=40, show_default=True,
                        help="Rows to print as a table.")(fn)


def check_output(fmt: str | None, out_path: Path | None, inputs) -> None:
    """Refuse a bad --format / -o before any trace is read."""
    choose_format(fmt, out_path)
    if out_path is not None:
        refuse_input_file(out_path, inputs)


def emit(frame: pl.DataFrame, fmt: str | None, out_path: Path | None, max_rows: int, inputs, title=None) -> None:
    fmt = choose_format(fmt, out_path)
    if fmt == "table":
        print_frame(stdout, frame, max_rows, title)
        return
    write_frame(frame, fmt, out_path, [Path(i) for i in inputs])
    if out_path is not None:
        stderr.print(f"wrote {out_path}: {frame.height:,} rows")


# A query may start with a `--` comment: unknown "options" reach split_query, which refuses the ones that look like
# mistyped options rather than queries.
@main.command(name="sql", context_settings={"ignore_unknown_options": True})
@click.argument("query_and_inputs", nargs=-1, required=True, metavar="[QUERY] INPUT...")
@click.option("-f", "--file", "query_file", type=click.Path(path_type=Path), default=None,
              help="Read the query from FILE (then every argument is an input).")
@click.option("--rank", type=int, default=None, help="Rank of a single trace file that does not say its rank.")
@output_options
@user_errors
def sql_command(query_and_inputs, query_file, rank, fmt, out_path, max_rows):
    """Run a SQL query over traces: INPUT is trace files, directories of ranks, or an ingested dataset (opened in
    place). Without a QUERY, a prompt where each line is a query (from a pipe: each line of standard input).

    \b
    Tables: events, edges, instants, flows, threads, processes, ranks, diagnostics, et_nodes, et_tensors
    (`tracekit schema`). Each analysis is a view of its name (`tracekit queries`): select * from op_summary.
    Macros: ancestors(rank, id), descendants(rank, id), overlapping(rank, id), step_events(step), step_members(),
    gpu_ops(), op_calls(), step_windows(), op_category(name, memory_only), ... (.macros at the prompt).
    """
    from tracekit.cli.shell import run_shell
    query, inputs = split_query(query_and_inputs, query_file)
    if not inputs:
        raise InputError("give at least one INPUT (trace file, directory of ranks, or ingested dataset)")
    check_output(fmt, out_path, inputs)
    with open_database(inputs, rank) as db:
        if query is None:
            run_shell(db, stdout, max_rows)
            return
        emit(db.sql(query), fmt, out_path, max_rows, inputs)


def split_query(args: tuple[str, ...], query_file: Path | None) -> tuple[str | None, list[str]]:
    """(query, inputs): the first argument is the query unless it names an existing file or folder."""
    for arg in args:
        if arg.startswith("-") and len(arg) > 1 and not any(c.isspace() for c in arg):
            raise InputError(f"{arg}: no such option (tracekit sql --help)")
    if query_file is not None:
        try:
            return query_file.read_text(), list(args)
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{query_file}: cannot read the query ({getattr(exc, 'strerror', None) or exc})") from None
    if could_be_path(args[0]) and path_kind(Path(args[0])) is not None:
        return None, list(args)
    if len(args) == 1:
        raise InputError(f"{args[0]}: no such file or directory (usage: tracekit sql [QUERY] INPUT...)")
    return args[0], list(args[1:])


def could_be_path(text: str) -> bool:
    """False for text no file system could hold as a path (a pasted query: long, several lines): it is never
    looked up, which for a name over 255 bytes would fail rather than answer "no such file"."""
    return "\n" not in text and "\0" not in text and len(os.fsencode(text)) < 4096 and all(
        len(os.fsencode(part)) <= 255 for part in text.split("/"))


def open_database(inputs: list[str], rank: int | None = None):
    """Traces are read (with the checks and warnings of load_with_progress); a dataset is opened in place."""
    from tracekit.query.database import from_tables, open_traces
    if dataset_input(inputs) is not None:
        db = open_traces(inputs)
        warn_about_cut_files(db.sql("select source_file, detail from diagnostics where reason = 'truncated'"))
        return db
    return from_tables(load_with_progress(tuple(inputs), rank), ", ".join(inputs))


@main.command(name="queries")
def queries_command():
    """List the analyses (queries/*.sql) and the question each answers; each is a view in `tracekit sql`."""
    from tracekit.cli.shell import queries_frame
    print_frame(stdout, queries_frame(), 1000)


@main.command(name="run")
@click.argument("name")
@click.argument("traces", nargs=-1, required=True)
@click.option("--only-rank", "only_ranks", type=int, multiple=True,
              help="Run over this rank only (repeatable: several ranks).")
@click.option("--step", type=int, default=None, help="Run over training step N only (ProfilerStep#N of each rank).")
@output_options
@user_errors
def run_command(name, traces, only_ranks, step, fmt, out_path, max_rows):
    """Print the result of analysis NAME (see `tracekit queries`) over TRACES."""
    if name not in catalog.available():
        raise InputError(f"{name}: no such analysis (one of: {', '.join(catalog.available())})")
    check_output(fmt, out_path, traces)
    with open_database(list(traces)) as db:
        frame = db.query(name, rank=list(only_ranks) or None, step=step)
    emit(frame, fmt, out_path, max_rows, traces, title=f"{name}: {catalog.load_query(name).question}")
