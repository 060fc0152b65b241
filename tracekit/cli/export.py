"""`tracekit export chakra` and `tracekit timeline`: the graph for simulators, one timeline for viewers."""

from __future__ import annotations

import time
from pathlib import Path

import click

from tracekit.cli.app import (head_started, load_traces, main, peak_option, read_peak_option, stdout,
                              trace_input_options, user_errors, working)


@click.group(name="export")
def export_group():
    """Write the traces in another tool's format."""


@export_group.command(name="chakra")
@click.argument("traces", nargs=-1, required=True)
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(path_type=Path),
              help="Directory for the Chakra ET files, one per rank: NAME.RANK.et (created if missing).")
@click.option("--prefix", default="tracekit", show_default=True,
              help="NAME of the files (ASTRA-sim's --workload-configuration is DIR/NAME).")
@click.option("--data-deps", is_flag=True,
              help="Write every dependency as a data dependency (data_deps), for feeders that follow only those "
                   "(mlcommons' legacy ETFeeder); default: order and launch as ctrl_deps, tensors as data_deps.")
@click.option("--rank", type=int, default=None, help="Rank of a single trace file that does not say its rank.")
@trace_input_options
@peak_option
@user_errors
def chakra_command(traces, out_dir, prefix, data_deps, rank, peak_file):
    """Write Chakra execution traces (schema 0.0.4) of TRACES, one file per rank, for ASTRA-sim and other
    simulators."""
    with head_started(traces) as helpers:  # first: the reading starts while the imports go on
        from tracekit.output.chakra import write_chakra
        from tracekit.output.files import refuse_input_dir
        refuse_input_dir(out_dir, traces)
        peak_table = read_peak_option(peak_file)  # the fallback num_ops of compute nodes without an op model
        tables = load_traces(traces, rank, helpers).with_peaks(peak_table)
    started = time.perf_counter()
    with working("writing the Chakra files"):
        written = write_chakra(tables, out_dir, prefix, data_deps)
    count = len(written.paths)
    stdout.print(f"wrote {count} Chakra ET file{'s' * (count != 1)} to {out_dir} "
                 f"({prefix}.{{rank}}.et, {time.perf_counter() - started:.1f} s)")
    for group in written.groups.iter_rows(named=True):
        inferred = ", inferred from the ranks that use it" if group["members_from"] == "export" else ""
        stdout.print(f"process group {group['process_group']!r} → pg_name {group['group_id']} "
                     f"({len(group['npus'])} NPUs{inferred})")
    stdout.print(f"communicator groups: {written.groups_path} (ASTRA-sim --comm-group-configuration)")
    # the nodes say so too (tracekit_inferred), and write_chakra returns them as diagnostics rows
    for fallback, nodes in written.inferred.items():
        stdout.print(f"inferred on {nodes:,} node{'s' * (nodes != 1)} (diagnostics: export, chakra_fallback): "
                     f"{fallback}")


@click.command(name="timeline")
@click.argument("traces", nargs=-1, required=True)
@click.option("-o", "--out", "out_path", required=True, type=click.Path(path_type=Path),
              help="Chrome-trace JSON to write (FILE.json.gz, or .json uncompressed), for Perfetto UI or "
                   "chrome://tracing.")
@click.option("--step", type=int, default=None,
              help="Only training step N (ProfilerStep#N of each rank; its events as `run --step` selects them).")
@click.option("--critical-path/--no-critical-path", default=True, show_default=True,
              help="A 'rank R · critical path' track per rank, with flows where the path moves from one track to "
                   "another.")
@click.option("--replayed", is_flag=True,
              help="The replay of the graph (`tracekit replay`, no what-if) instead of the measured times; processes "
                   "are labelled 'replayed'. For a what-if's timeline: `tracekit replay --scale ... -o FILE`.")
@click.option("--rank", type=int, default=None, help="Rank of a single trace file that does not say its rank.")
@trace_input_options
@user_errors
def timeline_command(traces, out_path, step, critical_path, replayed, rank):
    """Write one timeline of every rank of TRACES: a process per rank and device, launch and sync flows, and the
    critical path."""
    with head_started(traces) as helpers:  # first: the reading starts while the imports go on
        from tracekit.output.files import check_output_file
        from tracekit.output.timeline import write_timeline
        check_output_file(out_path, traces)
        tables = load_traces(traces, rank, helpers)
    started = time.perf_counter()
    with working("replaying the graph" if replayed else "writing the timeline"):
        if replayed:
            from tracekit.replay import retimed_tables
            tables = retimed_tables(tables)
        summary = write_timeline(tables, out_path, step=step, critical_path=critical_path, inputs=traces,
                                 label="replayed" if replayed else None)
    stdout.print(f"wrote {out_path}: {summary.slices:,} slices on {summary.tracks:,} tracks, {summary.flows:,} "
                 f"flows, a critical path of {summary.path_segments:,} segments in {summary.path_slices:,} runs "
                 f"({time.perf_counter() - started:.1f} s)")
    if summary.flows_left_out:
        stdout.print(f"left out {summary.flows_left_out:,} arrows whose second event ends before the first starts "
                     "(a viewer would drop them)")


main.add_command(export_group)
main.add_command(timeline_command)
