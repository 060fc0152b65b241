"""The commands that read traces and write files: ingest (a Parquet dataset), report (Excel workbooks), graph
(GraphML / DOT), and synth (synthetic traces with their ground truth)."""

from __future__ import annotations

from pathlib import Path

import click

# Modules only one command uses are imported in it: a command pays only for what it runs (imports are most of
# the time of a small report, bench/RESULTS.md).
from tracekit import storage
from tracekit.cli.app import (
    as_ranks_given,
    trace_input_options,
    check_executor_options,
    executor,
    executor_options,
    head_started,
    load_traces,
    main,
    peak_option,
    planned,
    read_peak_option,
    stdout,
    user_errors,
    warn_about_failed_analyses,
    working,
)
from tracekit.errors import InputError


@main.command()
@click.argument("traces", nargs=-1, required=True)
@click.option("-o", "--out", "out_dir", required=True,
              help="Directory or URL (s3://bucket/dataset, any fsspec URL) to write the Parquet dataset to (one "
                   "folder per table, rank=N/ partitions).")
@click.option("--rank", type=int, default=None, help="Rank of a single trace file that does not say its rank.")
@click.option("--force", is_flag=True, help="Replace an existing tracekit dataset in OUT.")
@executor_options
@trace_input_options
@user_errors
def ingest(traces, out_dir, rank, force):
    """Read Kineto traces (files or directories) and write them as a Parquet dataset."""
    check_executor_options()
    # first: the reading starts while the imports go on (a fresh helper: few imports come after the head start)
    with executor(head_start=traces, forked=False) as runner:
        from tracekit.output.dataset import ingest as ingest_traces
        from tracekit.output.files import refuse_input_dir
        out_dir = storage.location(out_dir)
        refuse_input_dir(out_dir, traces)
        with planned(traces, f"writing {out_dir}") as (inputs, progress):
            written = ingest_traces(inputs, out_dir, runner, force, rank, as_ranks_given(), progress)
    counts = ", ".join(f"{name} {n:,}" for name, n in written.rows.items() if n)
    stdout.print(f"wrote {out_dir}: ranks {written.ranks}; {counts}"
                 + (f"; {written.dropped} entries dropped (see diagnostics)" if written.dropped else ""))


@main.command()
@click.argument("traces", nargs=-1, required=True)
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(),
              help="Directory to write the workbooks to (rank0.xlsx, ..., and ranks.xlsx with several ranks).")
@click.option("--rank", type=int, default=None, help="Rank of a single trace file that does not say its rank.")
@click.option("--force", is_flag=True, help="Replace workbooks of an earlier report in OUT.")
@click.option("--wide", is_flag=True, help="Print op and kernel names whole in the summary, however wide.")
@click.option("--critical-path/--no-critical-path", default=True, show_default=True,
              help="The Critical path sheet of each rank (time on the path by category, per step, the ops and "
                   "kernels on it): the report's costliest analyses, which --no-critical-path skips for a faster, "
                   "leaner report.")
@peak_option
@trace_input_options
@executor_options
@user_errors
def report(traces, out_dir, rank, force, wide, critical_path, peak_file):
    """Write the Excel performance report of traces (files, directories, or an ingested dataset)."""
    check_executor_options()
    with executor(head_start=traces) as runner:  # first: the reading starts while the imports go on
        # here, not at the top: ingest, graph and synth need neither the workbook writer (xlsxwriter) nor the summary
        from tracekit.output.terminal import QUERIES, print_summary
        from tracekit.output.workbooks import check_out_dir
        from tracekit.output.files import local_output
        from tracekit.output.workbooks import report as report_traces
        out_dir = local_output(out_dir)
        check_out_dir(out_dir, force, inputs=traces)
        peak_table = read_peak_option(peak_file)
        with planned(traces, "analysing and writing the workbooks") as (inputs, progress):
            done, paths, problems = report_traces(inputs, out_dir, runner, force, rank, QUERIES, peak_table,
                                                  as_ranks_given(), progress, critical_path)
    print_summary(stdout, done, paths, problems, wide)
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
@click.option("--drift", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Sigma of a log-normal factor drawn once per capture (from --seed and --noise-seed) on every "
                   "duration: run-to-run drift between captures of one job.")
@click.option("--slow-kernel", "slow_kernels", multiple=True, metavar="NAME=FACTOR",
              help="Multiply the durations of kernels whose name contains NAME (repeatable).")
@click.option("--queued-kernels", type=click.IntRange(min=0), default=0, show_default=True,
              help="Kernels queued before the profiling window: on the GPU, with no launch call in the trace.")
@click.option("--expert-parallel", is_flag=True,
              help="Each forward layer also runs DeepEP-style dispatch/combine and a vLLM-style custom all-reduce.")
@click.option("--merged", is_flag=True, help="Also write merged/merged.json holding every rank (TraceFuse style).")
@click.option("--gzip", "gzip_output", is_flag=True, help="Write .json.gz files.")
@click.option("--serving", type=click.Choice(["vllm", "sglang"]), default=None,
              help="Instead of training: an LLM serving engine's iterations (prefill, decode, mixed, as the engine "
                   "marks them; --steps iterations, 2 x --scale layers), decode replayed from CUDA graphs.")
@click.option("--graph-launch", type=click.Choice(["frame", "bare"]), default="frame", show_default=True,
              help="With --serving: graph launches inside torch's replay Python frame, or bare (no Python stacks).")
@click.option("--with-capture", "graph_capture", type=click.Choice(["hip", "cuda"]), default=None,
              help="With --serving: also write capture/rank{r}.json, the trace of capturing the decode graphs (read "
                   "it with --graph-capture); hip launch calls name their kernel, cuda ones do not.")
@click.option("--capture-mismatch", type=click.Choice(["missing", "extra"]), default=None,
              help="With --with-capture: the capture lacks each graph's last launch, or has one more than the replays.")
@click.option("--moe", is_flag=True,
              help="With --serving: each layer's MLP is a mixture of experts, run by the engine's MoE ops and kernels "
                   "(routing, alignment, expert GEMMs, combine); the ground truth says their time.")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(path_type=Path),
              help="Directory for rank{r}.json and ground_truth.json.")
@user_errors
def synth(ranks, steps, seed, scale, noise, noise_seed, drift, slow_kernels, queued_kernels, expert_parallel, merged,
          gzip_output, serving, graph_launch, graph_capture, capture_mismatch, moe, out_dir):
    """Write synthetic Kineto traces of a data-parallel training job (or, with --serving, of an LLM serving
    engine), with their exact ground truth."""
    from tracekit import synth as synthetic
    if serving:
        if merged or noise or slow_kernels or expert_parallel:
            raise InputError("--serving: --merged, --noise, --slow-kernel and --expert-parallel apply to training "
                             "traces only")
        config = synthetic.ServingConfig(engine=serving, ranks=ranks, iterations=steps, layers=max(1, round(2 * scale)),
                                         seed=seed, graph_launch=graph_launch, queued_kernels=queued_kernels,
                                         graph_capture=graph_capture or "", capture_mismatch=capture_mismatch or "",
                                         moe=moe, gzip=gzip_output)
        synthesis = synthetic.synthesize_serving(config)
        paths = synthetic.write(synthesis, out_dir)
        stdout.print(f"wrote {out_dir}: {', '.join(str(p.relative_to(out_dir)) for p in paths)} "
                     f"({ranks} ranks, {steps} {serving} iterations each), "
                     + "".join(f"{c}, " for c in synthesis.captures) + synthetic.GROUND_TRUTH_FILE)
        return
    if graph_capture or capture_mismatch or moe:
        raise InputError("--with-capture, --capture-mismatch and --moe apply to --serving traces only")
    paths = synthetic.generate(out_dir, ranks, steps, seed, scale=scale, noise=noise, noise_seed=noise_seed,
                               drift=drift,
                               slow_kernels=synthetic.parse_slow_kernels(slow_kernels), queued_kernels=queued_kernels,
                               merged=merged, gzip=gzip_output, expert_parallel=expert_parallel)
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
@trace_input_options
@user_errors
def graph_command(traces, step, start_ns, end_ns, outs, rank):
    """Write the dependency graph of a window (a step's events, or the events overlapping a range; the edges among
    them)."""
    with head_started(traces) as helpers:  # first: the reading starts while the imports go on
        from tracekit.output.files import check_output_file
        from tracekit.output.graph import check_window, graph_writer, write_graph
        check_window(step, start_ns, end_ns)
        for out in outs:
            graph_writer(out)  # refuse an unknown format before reading anything
            check_output_file(out, traces)
        tables = load_traces(traces, rank, helpers)
    for out in outs:
        with working(f"writing {out}"):
            graph = write_graph(tables, out, step=step, start_ns=start_ns, end_ns=end_ns)
        click.echo(f"wrote {out}: {graph.nodes.num_rows:,} nodes, {graph.edges.num_rows:,} edges")
