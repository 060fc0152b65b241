"""`tracekit diff`: compare two runs, print the changes (or JSON for CI), write the comparison workbook, gate CI on a
regression."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from tracekit import diff
from tracekit.cli.app import (
    as_ranks_given,
    check_executor_options,
    executor,
    executor_options,
    main,
    planned,
    stderr,
    stdout,
    trace_input_options,
    user_errors,
    warn_about_failed_analyses,
    working,
)
from tracekit.errors import InputError
from tracekit.inputs import Inputs, resolve_captures, resolve_inputs

WORKBOOK_FILE_HINT = "the workbook's file name, e.g. diff.xlsx"  # as diff.write_workbook asks for it
SIDES_SEPARATOR = "\x00--"  # what `--` between the sides' captures becomes among the positional arguments
USAGE = "give BASELINE CANDIDATE, or each side's captures separated by --: A1 A2 ... -- B1 B2 ..."


class SidesCommand(click.Command):
    """A command whose positional arguments may be split by `--` into two groups (the diff's sides). Click ends
    option parsing at `--`; here it is kept as a marker instead, so options may come anywhere."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args = [SIDES_SEPARATOR if a == "--" else a for a in args]
        return super().parse_args(ctx, args)


@main.command(name="diff", cls=SidesCommand)
@click.argument("runs", nargs=-1, required=True, metavar="BASELINE CANDIDATE | A1 A2 ... -- B1 B2 ...")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=diff.DEFAULT_ALPHA,
              show_default=True,
              help="A change is called when the 1 - ALPHA confidence interval of its shift excludes 0 and the shift "
                   "exceeds 1% of the value (per measure, no multiple-comparison correction).")
@click.option("--host-floor", "host_floor", type=click.FloatRange(min=0), default=diff.DEFAULT_HOST_FLOOR_PERCENT,
              show_default=True, metavar="PCT",
              help="With one capture a side, host (CPU) times are called slower or faster only when they shift by "
                   "more than PCT percent: they move that much between runs of one unchanged job, which steps of "
                   "one capture cannot show (docs/diff.md). Repeated captures need no such floor.")
@click.option("--warmup-steps", type=click.IntRange(min=0), default=diff.DEFAULT_WARMUP_STEPS, show_default=True,
              help="Leading steady ProfilerSteps of each capture also left out of the verdicts (named in the "
                   "output); steps the report does not count as steady are always left out.")
@click.option("--fail-on-regression", "fail_percent", type=float, default=None, metavar="PCT",
              help="Exit with code 1 when --metric is called slower and is more than PCT percent above the baseline "
                   "(CI gating).")
@click.option("--metric", default="step_time", show_default=True,
              help="Measure gated by --fail-on-regression: step_time, a GPU timeline category (busy, idle, "
                   "computation, ...), op:NAME, kernel:NAME or category:NAME.")
@click.option("--top", type=int, default=15, show_default=True, help="Changes listed in the terminal (and in JSON).")
@click.option("--format", "fmt", type=click.Choice(("table", "json")), default="table", show_default=True,
              help="table: the summary for a terminal; json: the verdicts as one JSON document on standard output "
                   "(for CI; docs/diff.md gives its fields).")
@click.option("-o", "--out", "out_path", type=click.Path(path_type=Path), default=None,
              help="Write the comparison workbook (e.g. diff.xlsx): summary with charts, ops, ops by shape, kernels, "
                   "categories, collectives, critical path, one side only.")
@click.option("--force", is_flag=True, help="Replace an existing workbook at --out.")
@click.option("--wide", is_flag=True, help="Print item names whole in the table, however wide (default: shortened in "
                                           "the middle to fit the terminal, distinct names kept distinct).")
@click.option("--critical-path/--no-critical-path", default=True, show_default=True,
              help="Compare the critical paths by category: each side's costliest analyses, which --no-critical-path "
                   "skips for a faster diff.")
@trace_input_options
@executor_options
@user_errors
def diff_command(runs, alpha, host_floor, warmup_steps, fail_percent, metric, top, fmt, out_path, force, wide,
                 critical_path):
    """Compare two runs. BASELINE and CANDIDATE are each a trace file, a directory of ranks, an ingested dataset,
    or a directory of captures (one subdirectory per capture of one configuration). With several captures a side
    (A1 A2 ... -- B1 B2 ...), the verdicts test between-capture variance, captures as blocks."""
    check_executor_options()
    paths = [p for p in runs if p != SIDES_SEPARATOR]
    # first: the reading starts while the diff's modules are imported (tracekit.diff is imported on first use)
    with executor(head_start=paths) as runner:
        try:
            diff.parse_metric_name(metric)
        except LookupError as exc:
            raise InputError(f"--metric {exc}") from None
        if out_path is not None:
            from tracekit.output.files import check_output_file
            check_output_file(out_path, paths, force, WORKBOOK_FILE_HINT)
        sides = split_sides(runs)
        sections = diff.SECTIONS if critical_path else diff.without_critical_path(diff.SECTIONS)
        summaries = summarized(sides, runner, sections)
    for side in (s for captures in summaries for s in captures):
        warn_about_failed_analyses({f"{name} (on {side.label})": why for name, why in side.failures.items()})
    with working("comparing the runs"):
        result = diff.compare(*summaries, alpha=alpha, warmup_steps=warmup_steps, host_floor_percent=host_floor,
                              sections=sections)
    gated = None
    if fail_percent is not None or metric != "step_time":
        try:  # before anything is printed: a bad name is one line, not a diff followed by an error
            gated = result.metric(metric)
        except LookupError as exc:
            raise InputError(f"--metric {exc}") from None
    regressed = fail_percent is not None and result.regressed(fail_percent, metric)
    if fmt == "json":
        document = result.as_dict(top)
        if fail_percent is not None:
            document["gate"] = {"metric": metric, "threshold_percent": fail_percent, "verdict": gated["verdict"],
                                "regressed": regressed}
        click.echo(json.dumps(document, indent=1, allow_nan=False))
    else:
        diff.print_summary(result, stdout, top, wide)
    if out_path is not None:
        with working(f"writing {out_path}"):
            problems = diff.write_workbook(result, out_path, force)
        for problem in problems:
            stderr.print(f"note: {problem}")
        (stderr if fmt == "json" else stdout).print(f"wrote {out_path}")
    if fail_percent is not None:
        if gated["verdict"] in (diff.verdicts.NOT_ENOUGH, diff.verdicts.INCONCLUSIVE):
            click.echo(f"tracekit: --fail-on-regression: {metric}: {gated['verdict']} (not gated)", err=True)
        if regressed:
            click.echo(f"tracekit: regression: {metric} {signed_percent(gated['percent_delta'])} slower "
                       f"(more than {fail_percent:g}%; shift {gated['effect']:+.3g}, CI "
                       f"[{gated['ci_low']:+.3g}, {gated['ci_high']:+.3g}])", err=True)
            sys.exit(1)


def split_sides(runs: tuple[str, ...]) -> tuple[list[tuple[Inputs, str]], list[tuple[Inputs, str]]]:
    """Each side's captures with their labels: `A B` (each a run, or a directory of captures: `A/c1`, ...) or
    `A1 A2 ... -- B1 B2 ...`. Paths are checked here, before anything is read."""
    if SIDES_SEPARATOR in runs:
        at = runs.index(SIDES_SEPARATOR)
        groups = (runs[:at], runs[at + 1:])
        if not groups[0] or not groups[1] or SIDES_SEPARATOR in groups[1]:
            raise InputError(f"{USAGE} (one -- with captures on both sides of it)")
        return tuple([(resolve_inputs(p), Path(p).name) for p in group] for group in groups)
    if len(runs) != 2:
        raise InputError(f"{len(runs)} inputs: {USAGE}")
    sides = []
    for path in runs:
        captures = resolve_captures(path)
        sides.append([(resolve_inputs(path), Path(path).name)] if captures is None else
                     [(c, f"{Path(path).name}/{Path(str(c.given[0])).name}") for c in captures])
    return tuple(sides)


def summarized(sides, runner, sections) -> list[list[diff.Side]]:
    """Each capture summarised for SECTIONS on the executor RUNNER, one run at a time (each is summarised before the
    next is read)."""
    return [[summarize_capture(c, label, runner, sections) for c, label in captures] for captures in sides]


def summarize_capture(inputs: Inputs, label: str, runner, sections) -> diff.Side:
    with planned(inputs, f"analysing {label}") as (inputs, progress):
        return diff.summarize_inputs(inputs, label, runner, as_ranks_given(), progress, sections)


def signed_percent(value: float | None) -> str:
    return "∞%" if value is None else f"{value:+.1f}%"
