"""`tracekit replay`: re-time a trace's dependency graph, with what-ifs, and compare each step with its measurement."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.cli.app import head_started, load_traces, main, trace_input_options, user_errors, working


@main.command(name="replay")
@click.argument("traces", nargs=-1, required=True)
@click.option("--scale", "scales", multiple=True, metavar="SELECTOR=FACTOR",
              help="Multiply the time of the selection by FACTOR (repeatable). SELECTOR: kernel:PATTERN (GPU ops "
                   "whose name contains PATTERN), op:PATTERN (a CPU op with the GPU work it launched), "
                   "category:NAME (computation, communication, memcpy, or an op category such as GEMM), "
                   "cpu:PATTERN (host time alone). Names match case-insensitively; a selector that matches "
                   "nothing is an error naming the closest names.")
@click.option("--remove", "removes", multiple=True, metavar="SELECTOR",
              help="Take the selection's own time out, keeping its dependencies (repeatable).")
@click.option("--step", type=int, default=None,
              help="Only training step N (ProfilerStep#N of each rank): its rows, and its events on the timeline.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default=None,
              help="table (default), csv or json.")
@click.option("-o", "--out", "out_path", type=click.Path(path_type=Path), default=None,
              help="Also write the replayed timeline (Chrome-trace JSON, FILE.json.gz) for Perfetto UI: the "
                   "'after' picture of the what-if.")
@click.option("-n", "--max-rows", type=int, default=40, show_default=True, help="Rows to print as a table.")
@click.option("--wide", is_flag=True, help="Print text whole in the table, however wide.")
@trace_input_options
@user_errors
def replay_command(traces, scales, removes, step, fmt, out_path, max_rows, wide):
    """Replay TRACES (trace files, directories of ranks or an ingested dataset): one row per rank and step with
    the measured and the predicted step time. Without --scale/--remove the prediction is the replay of the
    graph as measured."""
    with head_started(traces) as helpers:  # first: the reading starts while the imports go on
        from tracekit import replay as replaying  # here: --help and the other commands need not import the replay
        from tracekit.cli.query import check_output, emit
        from tracekit.output.files import check_output_file
        scale = [replaying.parse_scale(text) for text in scales]
        remove = [replaying.Selector.parse(text) for text in removes]
        check_output(fmt, None, traces, max_rows)
        if out_path is not None:
            check_output_file(out_path, traces)
        tables = load_traces(traces, helpers=helpers)
    with working("replaying the graph"):
        replayed = replaying.replay(tables, scale=scale, remove=remove, timeline=out_path, step=step)
    emit(replayed, fmt, None, max_rows, traces, title="replay: measured and predicted step time", wide=wide)

