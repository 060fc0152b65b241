"""The commands that answer questions: sql (ad-hoc SQL, or a prompt), run (one analysis), queries (the list of
analyses) and schema (every table and column)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tracekit import storage
from tracekit.cli.app import (trace_input_options, main, open_database, peak_option, read_peak_option, stderr, stdout,
                              user_errors, working)
from tracekit.errors import InputError
from tracekit.inputs import path_kind
from tracekit.output.files import check_output_file
from tracekit.output.frames import FORMATS, choose_format, print_frame, write_frame

if TYPE_CHECKING:  # each command imports what it uses: --help and `schema` need neither polars nor DuckDB
    import polars as pl


@main.command(name="schema")
@click.option("--markdown", is_flag=True, default=True, help="Print the schema document (docs/schema.md).")
def schema_command(markdown):
    """Print the documentation of every table and column."""
    from tracekit import schema
    click.echo(schema.markdown(), nl=False)


def output_options(fn):
    fn = click.option("-o", "--out", "out_path", type=click.Path(path_type=Path), default=None,
                      help="Write all rows to FILE (format from --format, else from the suffix: .csv, .json, "
                           ".ndjson, .parquet). Without it, the result goes to standard output.")(fn)
    fn = click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
                      help="table (aligned, the default on standard output), csv, json (an array of row objects), "
                           "ndjson or parquet.")(fn)
    fn = click.option("--wide", is_flag=True,
                      help="Print text whole in the table, however wide (default: shortened in the middle to fit "
                           "the terminal).")(fn)
    return click.option("-n", "--max-rows", type=int, default=40, show_default=True,
                        help="Rows to print as a table.")(fn)


def check_output(fmt: str | None, out_path: Path | None, inputs, max_rows: int = 1) -> None:
    """Refuse a bad --format / -o / -n before any trace is read."""
    if max_rows < 1:
        raise InputError(f"-n/--max-rows {max_rows}: give 1 or more rows")
    choose_format(fmt, out_path)
    if out_path is not None:
        check_output_file(out_path, inputs)


def emit(frame: pl.DataFrame, fmt: str | None, out_path: Path | None, max_rows: int, inputs, title=None,
         wide: bool = False) -> None:
    fmt = choose_format(fmt, out_path)
    if fmt == "table":
        print_frame(stdout, frame, max_rows, title, wide)
        return
    write_frame(frame, fmt, out_path, [storage.location(i) for i in inputs])
    if out_path is not None:
        stderr.print(f"wrote {out_path}: {frame.height:,} rows")


# A query may start with a `--` comment: unknown "options" reach split_query, which refuses the ones that look like
# mistyped options rather than queries.
@main.command(name="sql", context_settings={"ignore_unknown_options": True})
@click.argument("query_and_inputs", nargs=-1, required=True, metavar="[QUERY] INPUT...")
@click.option("-f", "--file", "query_file", type=click.Path(path_type=Path), default=None,
              help="Read the query from FILE (then every argument is an input).")
@click.option("--rank", type=int, default=None, help="Rank of a single trace file that does not say its rank.")
@click.option("--safe", is_flag=True,
              help="For SQL written by others: queries may read the tables and analyses only (no files, URLs, "
                   "extensions or settings: refused with exit code 2). A dataset is read into memory first.")
@peak_option
@output_options
@trace_input_options
@user_errors
def sql_command(query_and_inputs, query_file, rank, safe, peak_file, fmt, out_path, wide, max_rows):
    """Run a SQL query over traces: INPUT is trace files, directories of ranks, or an ingested dataset (opened in
    place). Without a QUERY, a prompt where each line is a query (from a pipe: each line of standard input).

    \b
    Tables: events, edges, instants, flows, threads, processes, ranks, diagnostics, et_nodes, et_tensors,
    graph_kernels
    (`tracekit schema`), and device_peaks (the devices' peak rates: docs/perf_models.md, --peak FILE). Each analysis is a view of its name (`tracekit queries`): select * from op_summary.
    Macros: ancestors(rank, id), descendants(rank, id), overlapping(rank, id), step_events(step), step_members(),
    gpu_ops(), op_calls(), step_windows(), op_category(name), ... (.macros at the prompt).
    """
    query, inputs = split_query(query_and_inputs, query_file)
    if not inputs:
        raise InputError("give at least one INPUT (trace file, directory of ranks, or ingested dataset)")
    check_output(fmt, out_path, inputs, max_rows)
    peak_table = read_peak_option(peak_file)
    with open_database(inputs, rank, safe) as db:
        if peak_table is not None:
            db.use_peaks(peak_table)
        if query is None:
            from tracekit.cli.shell import run_shell
            run_shell(db, stdout, max_rows, wide=wide)
            return
        with working("running the query"):
            frame = db.sql(query)
        emit(frame, fmt, out_path, max_rows, inputs, wide=wide)


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
    if could_be_path(args[0]) and path_kind(storage.location(args[0])) is not None:
        return None, list(args)
    if len(args) == 1:
        raise InputError(f"{args[0]}: no such file or directory (usage: tracekit sql [QUERY] INPUT...)")
    return args[0], list(args[1:])


def could_be_path(text: str) -> bool:
    """False for text no file system could hold as a path (a pasted query: long, several lines): it is never
    looked up, which for a name over 255 bytes would fail rather than answer "no such file"."""
    return "\n" not in text and "\0" not in text and len(os.fsencode(text)) < 4096 and all(
        len(os.fsencode(part)) <= 255 for part in text.split("/"))


@main.command(name="queries")
@click.option("--wide", is_flag=True, help="Print the questions whole, however wide the table.")
def queries_command(wide):
    """List the analyses (queries/*.sql) and the question each answers; each is a view in `tracekit sql`."""
    from tracekit.cli.shell import queries_frame
    print_frame(stdout, queries_frame(), 1000, wide=wide)


@main.command(name="run")
@click.argument("name")
@click.argument("traces", nargs=-1, required=True)
@click.option("--only-rank", "only_ranks", type=int, multiple=True,
              help="Run over this rank only (repeatable: several ranks).")
@click.option("--step", type=int, default=None, help="Run over training step N only (ProfilerStep#N of each rank).")
@peak_option
@output_options
@trace_input_options
@user_errors
def run_command(name, traces, only_ranks, step, peak_file, fmt, out_path, wide, max_rows):
    """Print the result of analysis NAME (see `tracekit queries`) over TRACES."""
    from tracekit.engine import catalog
    if name not in catalog.available():
        raise InputError(f"{name}: no such analysis (one of: {', '.join(catalog.available())})")
    check_output(fmt, out_path, traces, max_rows)
    peak_table = read_peak_option(peak_file)
    with open_database(list(traces)) as db, working(f"running {name}"):
        if peak_table is not None:
            db.use_peaks(peak_table)
        frame = db.query(name, rank=list(only_ranks) or None, step=step)
    emit(frame, fmt, out_path, max_rows, traces, title=f"{name}: {catalog.load_query(name).question}", wide=wide)
