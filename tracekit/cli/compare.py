"""`tracekit diff`: compare two runs, print the changes, write the comparison workbook, gate CI on a regression."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tracekit import diff
from tracekit.cli.app import (
    load_traces,
    main,
    on_cluster,
    scheduler_option,
    stderr,
    stdout,
    user_errors,
    warn_about_failed_analyses,
)
from tracekit.errors import InputError
from tracekit.inputs import resolve_inputs
from tracekit.output.files import check_output_file

WORKBOOK_FILE_HINT = "the workbook's file name, e.g. diff.xlsx"  # as diff.write_workbook asks for it


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
@scheduler_option
@user_errors
def diff_command(baseline, candidate, alpha, warmup_steps, fail_percent, metric, top, out_path, force, scheduler):
    """Compare two runs: BASELINE and CANDIDATE are each a trace file, a directory of ranks or an ingested dataset."""
    try:
        diff.parse_metric_name(metric)
    except LookupError as exc:
        raise InputError(f"--metric {exc}") from None
    if out_path is not None:
        check_output_file(out_path, (baseline, candidate), force, WORKBOOK_FILE_HINT)
    # One run's tables at a time: each is summarised (its analyses run) before the next is read.
    if scheduler:
        from tracekit.cluster import runs
        with on_cluster(scheduler, (baseline,)) as (client, base):
            sides = [runs.summarize(client, base, Path(baseline).name),
                     runs.summarize(client, resolve_inputs((candidate,)), Path(candidate).name)]
    else:
        sides = [diff.summarize(load_traces((path,)), Path(path).name) for path in (baseline, candidate)]
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
