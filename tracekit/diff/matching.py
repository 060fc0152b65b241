"""Running a diff: summarise each side (its analyses over the whole trace and per step), turn both into measures
section by section, match them (queries/diff/compare.sql) and judge each match (tracekit/diff/verdicts.py)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext

import polars as pl
import pyarrow as pa

from tracekit.diff import verdicts
from tracekit.diff.blocks import capture_tests
from tracekit.diff.comparison import (
    CAPTURES,
    DEFAULT_ALPHA,
    DEFAULT_FLOOR_PERCENT,
    DEFAULT_HOST_FLOOR_PERCENT,
    DEFAULT_WARMUP_STEPS,
    EFFECT_COLUMNS,
    SIGNIFICANT,
    STEPS,
    DiffResult,
    Settings,
)
from tracekit.diff.measures import gpu_idle_most_of_step, merged_step_ops
from tracekit.diff.mismatch import mismatches, run_info
from tracekit.diff.sections import (
    HOST,
    HOST_IF_GPU_IDLE,
    SECTIONS,
    Metric,
    Section,
    per_step_analyses,
    totals_analyses,
)
from tracekit.diff.side import Side, SidePart, left_out_steps, result, step_basis, step_counts_of
from tracekit.engine import catalog, connection
from tracekit.engine.tables import TraceTables
from tracekit.inputs import Inputs
from tracekit.pipeline import Progress, one_task, run_plan
from tracekit.query import analyses, step_scope

# ---------------------------------------------------------------------------------------------------------------
# One side: analyses over the whole trace and per step


def summarize(tables: TraceTables, label: str, sections: dict[str, Section] = SECTIONS) -> Side:
    """Run the analyses the diff's sections read over one side, and (with 2+ steps) the per-step ones the verdicts
    compare.

    An analysis that is missing from queries/ or fails leaves its sections empty and is named, with the reason, in
    `Side.failures` (the diff's notes) rather than stopping the diff.
    """
    return combined_side(label, [summarize_ranks(tables, sections, whole_run=True)])


def summarize_inputs(inputs: Inputs, label: str, executor=None, as_ranks: bool = False,
                     progress: Progress | None = None, sections: dict[str, Section] = SECTIONS) -> Side:
    """`summarize` of one run's traces: the plan (`pipeline.run_plan`) on EXECUTOR, each task summarising its
    ranks (`summarize_ranks`), joined here."""
    return combined_side(label, run_plan(inputs, summarize_ranks, (sections, one_task(executor)), executor, None,
                                         as_ranks, progress).results)


def summarize_ranks(tables: TraceTables, sections: dict[str, Section] = SECTIONS, whole_run: bool = False
                    ) -> SidePart:
    """What `summarize` computes, for the ranks of TABLES (a whole run, or the ranks of one of its files).

    The analyses that walk the critical path run over the whole trace alone. The others run once over the whole
    trace and every step together (`step_scope.with_every_step`), and the verdicts read the per-step results of those
    with per-step measures. Where TABLES are the `whole_run` and no rank holds 2 steps, nothing is computed per
    step: a run has per-step results only then (`combined_side`; a part's ranks with one step each count where
    another part's hold more)."""
    names = totals_analyses(sections)
    stepwise = [n for n in per_step_analyses(sections) if n in names]
    # With steps, two runs side by side. The walk goes on the whole trace's database, over the whole trace alone (over
    # every step's pseudo-rank too it would cost twice: the diff's costliest analysis, one statement after another),
    # on a cursor of its own from before the steps are scoped: the scoping, on one core, left the other idle (a side
    # of the V100 pair ~0.13 s; the pair 2.97 -> 2.83 s, 4.40 -> 4.20 CPU s, bench/RESULTS.md). It reads only the
    # step windows, made first (steps_of), so it and the walk compute no shared table twice. Everything else runs over
    # the whole trace and every step's pseudo-rank together, on a database of its own, whose shared tables (op calls,
    # launch ancestors, GPU op owners) the whole trace's database computed again for op_summary, steps and
    # gpu_timeline: a side of the V100 pair 1.33 -> 1.11 s, 2.25 -> 1.89 CPU s; H100 Qwen 0.69 -> 0.59 s.
    walks = [n for n in names if catalog.walks_critical_path(n)]
    others = [n for n in names if n not in walks]
    min_steps = 2 if whole_run else 1
    failed: dict[str, str] = {}
    failed_beside: dict[str, str] = {}
    with catalog.connect(tables, materialize=True) as con:
        steps = step_scope.steps_of(con)  # (the step windows: made here, before the walk starts beside the scoping)
        stepped = bool(walks) and len(steps) >= min_steps
        walking = (analyses.in_background(con, tables, lambda cur: analyses.run_all(tables, walks, failed, con=cur,
                                                                                     free_shared=True))
                   if stepped else nullcontext(None))
        with walking as walked:
            with_steps = step_scope.with_every_step(con, tables, rows=bool(stepwise), min_steps=min_steps,
                                                    steps=steps)
            if with_steps is not None:
                whole, per_step = whole_and_per_step(*with_steps, others, failed_beside)
            done = walked() if walked else {}
        # no steps to scope (or too few on every rank): what is left runs on con, after the walk
        left = walks if with_steps is not None else names
        done |= analyses.run_all(tables, [n for n in left if n not in done and n not in failed], failed, con=con,
                                 free_shared=True)  # the last run on con
        if with_steps is not None:
            done |= whole
    results = {n: done[n] for n in names if n in done}
    failures = failed | failed_beside
    if with_steps is None:
        return SidePart(results, failures=failures, run_info=run_info(tables))
    # per step only what has per-step measures and rows over the whole trace (no per-step collectives)
    per_step = rolled_up({n: f for n, f in per_step.items() if n in stepwise and results[n].height}, sections)
    return SidePart(results, per_step, step_rows(with_steps[1]), failures, run_info(tables))


def whole_and_per_step(tables: TraceTables, scopes: pl.DataFrame, names: list[str], failures: dict[str, str]
                       ) -> tuple[dict[str, pl.DataFrame], dict[str, pl.DataFrame]]:
    """The analyses `names` over TABLES and their steps (`step_scope.with_every_step`), in one run: the whole
    trace's results, and the steps' each with a `step` column."""
    done = analyses.run_all(tables, names, failures)
    in_step = pl.col("rank").is_in(scopes["scope_rank"].implode())
    return ({n: f.filter(~in_step) for n, f in done.items()},
            {n: step_scope.unscoped(f.filter(in_step), scopes) for n, f in done.items()})


def rolled_up(per_step: dict[str, pl.DataFrame], sections: dict[str, Section]) -> dict[str, pl.DataFrame]:
    """PER_STEP with, for a section whose per-step source is not its source, its source per step as that result
    summed by its keys (op_summary from op_by_shape: rollups of the same op calls; op_categories runs per step
    itself, over the per-step op_by_shape, since its call count is not a sum of op_by_shape's)."""
    per_step = dict(per_step)
    for section in sections.values():
        finer = per_step.get(section.per_step_source)
        if finer is None or section.source in per_step:
            continue
        sums = [pl.col(m.name).sum() for m in section.metrics if m.aggregation == "sum"]
        # maintain_order: polars' default (partitioned) group_by adds float partial sums in a thread-timing order
        per_step[section.source] = (finer.group_by("rank", "step", *section.keys, maintain_order=True)
                                    .agg(*(pl.col(a).first() for a in section.attributes), *sums))
    return per_step


def step_rows(scopes: pl.DataFrame) -> pl.DataFrame:
    return scopes.select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64))


def combined_side(label: str, parts: list[SidePart]) -> Side:
    """One run's summary from the summaries of its parts (each computed on some of its ranks, `summarize_ranks`);
    per-step results only when some rank holds 2 steps."""
    results = analyses.combine_ranks([p.results for p in parts])
    failures = {name: why for p in parts for name, why in p.failures.items()}
    steps = pl.concat([p.steps for p in parts])
    info = pl.concat([p.run_info for p in parts])
    if steps.height == 0 or steps.group_by("rank").len()["len"].max() < 2:
        return Side(label, results, failures=failures, run_info=info)
    per_step = analyses.combine_ranks([p.per_step for p in parts])
    return Side(label, results, per_step, steps, failures, info)


def per_step_results(tables: TraceTables, names: list[str], failures: dict[str, str],
                     sections: dict[str, Section] = SECTIONS) -> tuple[dict[str, pl.DataFrame], pl.DataFrame] | None:
    """The analyses `names` per step, each with a `step` column (and the sections' sources they roll up to:
    `rolled_up`), and the (rank, step)s covered; None when no rank holds a step.

    Each (rank, step) is scoped on a pseudo-rank of its own (tracekit/query/step_scope.py): every analysis keys on
    rank, so one run computes it for every step at once.
    """
    # the step windows made once, not by each of the scopes' statements (V100 workers0: 0.28 -> 0.21 s)
    with catalog.connect(tables, materialize=True, held_to_input=False) as con:
        with_steps = step_scope.with_every_step(con, tables)
    if with_steps is None:
        return None
    _, per_step = whole_and_per_step(*with_steps, names, failures)
    return rolled_up(per_step, sections), step_rows(with_steps[1])


# ---------------------------------------------------------------------------------------------------------------
# The comparison

Run = TraceTables | Side  # one capture: its tables, or its summary


def compare(base: Run | Sequence[Run], cand: Run | Sequence[Run], alpha: float = DEFAULT_ALPHA,
            floor_percent: float = DEFAULT_FLOOR_PERCENT, warmup_steps: int = DEFAULT_WARMUP_STEPS,
            host_floor_percent: float = DEFAULT_HOST_FLOOR_PERCENT, labels: tuple[str, str] = ("base", "cand"),
            sections: dict[str, Section] = SECTIONS) -> DiffResult:
    """Compare a baseline and a candidate run: each one capture (tables, or a side already summarised) or several
    captures of one configuration (a list of them).

    One capture a side: a measure is slower/faster when the 1 − `alpha` confidence interval of its per-step shift
    excludes 0 and the shift exceeds `floor_percent` of its per-step value (tracekit/diff/verdicts.py); run-to-run
    variance is then unmeasured, and the result says so; host (CPU) times, which move between processes far more
    than GPU times, need `host_floor_percent`. Several captures a side: captures are blocks, and the
    test is on per-capture values (tracekit/diff/blocks.py). Steps that are not steady (the report's rule), and the
    first `warmup_steps` steps of each capture, are left out. `sections`: what is compared (sections.py).
    """
    sides = {"base": captures_of(base, labels[0], sections), "cand": captures_of(cand, labels[1], sections)}
    method = STEPS if len(sides["base"]) == len(sides["cand"]) == 1 else CAPTURES
    settings = Settings(alpha, floor_percent, warmup_steps, method, host_floor_percent)
    warmup = {name: [left_out_steps(s, warmup_steps) for s in captures] for name, captures in sides.items()}
    # One DuckDB thread for each query of the comparison (small frames): float sums then add up in one order, so a
    # run gives the same bits every time. The sections are matched side by side, each on a cursor of its own (what
    # it registers is the cursor's): its Python, Polars and DuckDB work is spread thin over ~30 small steps a
    # section (SD3.5 pair: 0.20 of the comparison's 0.30 s, one section after the other).
    covered = coverage(sides["base"], sides["cand"]).to_arrow()  # Arrow: a Polars frame read by two threads at
    # once fails in polars 1.30 ("Already mutably borrowed")
    with connection.connect(threads=1) as con, ThreadPoolExecutor(connection.query_workers()) as pool:
        matched = dict(zip(sections, pool.map(
            lambda section: matched_on_cursor(con, covered, section, sides, warmup, settings), sections.values())))
    compared = {name: mark_deciders(sections[name], frame) for name, frame in judged(matched, settings).items()}
    measures = pl.concat([long_form(section, compared[name]) for name, section in sections.items()])
    frames = {name: wide_form(section, compared[name], attributes(section, sides["cand"] + sides["base"]))
              for name, section in sections.items()}
    side_labels = (side_label(sides["base"]), side_label(sides["cand"]))
    return DiffResult(side_labels[0], side_labels[1], frames, measures, settings,
                      tuple((label, step_basis(s[0])) for label, s in zip(side_labels, sides.values())),
                      diff_notes(sides["base"], sides["cand"], measures, settings),
                      tuple((s.label, w) for name in sides for s, w in zip(sides[name], warmup[name])), sections,
                      captures=(len(sides["base"]), len(sides["cand"])),
                      mismatches=mismatches(sides["base"], sides["cand"], side_labels))


def captures_of(run: Run | Sequence[Run], label: str, sections: dict[str, Section]) -> list[Side]:
    """A side's captures, summarised (a list of one for a single capture); labels `label` or `label#i`."""
    runs = [run] if isinstance(run, (TraceTables, Side)) else list(run)
    if not runs:
        raise ValueError(f"{label}: no capture to compare")
    return [r if isinstance(r, Side) else summarize(r, label if len(runs) == 1 else f"{label}#{i + 1}", sections)
            for i, r in enumerate(runs)]


def side_label(captures: list[Side]) -> str:
    if len(captures) == 1:
        return captures[0].label
    return f"{captures[0].label} … {captures[-1].label} ({len(captures)} captures)"


def coverage(base: list[Side], cand: list[Side]) -> pl.DataFrame:
    """Per rank (and null: all ranks), the factor that scales the candidate's totals to the baseline's step count
    (1 unless both sides hold steps and their counts differ; several captures: their mean step counts)."""
    if any(result(s, "steps") is None for s in base + cand):
        return pl.DataFrame(schema={"rank": pl.Int32, "scale": pl.Float64})
    counts = [pl.concat([step_counts_of(s.results["steps"]) for s in captures])
              .group_by("rank", maintain_order=True).agg(pl.col("steps").mean()) for captures in (base, cand)]
    return (counts[0].join(counts[1], on="rank", nulls_equal=True, suffix="_cand")
            .select("rank", scale=pl.col("steps") / pl.col("steps_cand")))


def matched_on_cursor(con, covered: pa.Table, section: Section, sides: dict[str, list[Side]],
                      warmup: dict[str, list[tuple[int, ...]]], settings: Settings) -> pl.DataFrame:
    """`matched_section` on a cursor of CON's database, with the step counts' COVERED scale registered."""
    with con.cursor() as cur:
        cur.register("coverage", covered)
        return matched_section(cur, section, sides, warmup, settings)


def matched_section(con, section: Section, sides: dict[str, list[Side]], warmup: dict[str, list[tuple[int, ...]]],
                    settings: Settings) -> pl.DataFrame:
    """The section's measures of both sides, matched (queries/diff/compare.sql), not yet judged."""
    for name, captures in sides.items():
        frames = [section.measures(con, side, section, left_out) for side, left_out in zip(captures, warmup[name])]
        frame = frames[0] if len(frames) == 1 else pooled_captures(section, frames)
        con.register(f"{name}_measures", frame.with_columns(pl.col("key").cast(section.key_type)))
    con.register("metric_specs", pl.DataFrame(
        [(m.name, m.direction, m.aggregation, m.abs_floor, settings.floor_percent_of(host_time(m, sides)))
         for m in section.metrics],
        orient="row", schema={"metric": pl.String, "direction": pl.Int32, "aggregation": pl.String,
                              "abs_floor": pl.Float64, "floor_percent": pl.Float64}))
    return pl.from_arrow(catalog.run_stage(con, ["diff/compare"])["compare"])


def host_time(metric: Metric, sides: dict[str, list[Side]]) -> bool:
    """Whether the metric is a host time here: a CPU time, or the step on a side whose GPU sat idle for most of it
    (its steady steps' median busy share under one half)."""
    if metric.carried_by == HOST_IF_GPU_IDLE:
        return any(gpu_idle_most_of_step(side) for captures in sides.values() for side in captures)
    return metric.carried_by == HOST


def pooled_captures(section: Section, frames: list[pl.DataFrame]) -> pl.DataFrame:
    """One side's measures from several captures: the value is the mean over captures (a key absent from a capture
    counts 0 there for sums), and `samples` holds one block value per capture: the median of its steady steps'
    values, or its value over the trace where it has no per-step values (tracekit/diff/blocks.py)."""
    sums = [m.name for m in section.metrics if m.aggregation == "sum"]
    blocks = (pl.concat(frames)
              .with_columns(block=pl.coalesce(pl.col("samples").list.drop_nulls().list.median(), "value"))
              .group_by("key", "rank", "metric", maintain_order=True)
              .agg(total=pl.col("value").sum(), mean=pl.col("value").mean(), present=pl.len(), samples=pl.col("block")))
    absent = len(frames) - pl.col("present")
    summed = pl.col("metric").is_in(sums)
    return blocks.select(
        "key", "rank", "metric",
        value=pl.when(summed).then(pl.col("total") / len(frames)).otherwise("mean"),
        samples=pl.when(summed & (absent > 0))
        .then(pl.concat_list("samples", pl.lit(0.0).repeat_by(absent))).otherwise("samples"))


def judged(matched: dict[str, pl.DataFrame], settings: Settings) -> dict[str, pl.DataFrame]:
    """Each section's matched measures with the shift, its confidence interval, the test's p-value and the verdict:
    per step (verdicts.shift_tests) with one capture a side, per capture (blocks.capture_tests) with several; the
    floor is floor_percent of the larger per-step (per-capture) median, at least abs_floor; a change is called only
    beyond the metric's own floor (Settings.floor_percent_of: the host floor for host times with one capture a side).
    The test runs once over every section's rows (elementwise, so a row's result is the same either way): its cost is
    mostly per call (the t quantile's bisection), not per row."""
    matched = {name: frame.with_columns(samples(frame[column]) for column in ("base_samples", "cand_samples"))
               for name, frame in matched.items()}
    test = verdicts.shift_tests if settings.method == STEPS else capture_tests
    stats = test([s for frame in matched.values() for s in frame["base_samples"].to_list()],
                 [s for frame in matched.values() for s in frame["cand_samples"].to_list()], settings.alpha)
    scale = pl.max_horizontal(pl.col("base_samples").list.median().abs(), pl.col("cand_samples").list.median().abs())
    floor = pl.max_horizontal(settings.floor_percent / 100 * scale, pl.col("abs_floor"))
    call_floor = pl.max_horizontal(pl.col("floor_percent") / 100 * scale, pl.col("abs_floor"))
    starts = itertools.accumulate((frame.height for frame in matched.values()), initial=0)
    return {name: (pl.concat([frame, stats.slice(start, frame.height)], how="horizontal")
                   .with_columns(verdict=verdicts.verdict(pl.col("direction"), floor, call_floor))
                   .drop("base_samples", "cand_samples", "direction", "abs_floor", "floor_percent"))
            for (name, frame), start in zip(matched.items(), starts)}


def samples(column: pl.Series) -> pl.Series:
    """A side's per-step values of each measure without the steps that have none (a collective of unknown size has
    no bandwidth), [] where there are none."""
    if column.dtype == pl.List(pl.Null):
        # Where one side has no samples at all, polars 1.30 holds a List(Null) column whose chunks hold floats, and
        # any expression on it panics: rebuilt from Python lists.
        return pl.Series(column.name, [[x for x in values or () if x is not None] for values in column.to_list()],
                         dtype=pl.List(pl.Float64))
    kept = column.cast(pl.List(pl.Float64)).list.drop_nulls()
    if not column.null_count():
        return kept
    # not fill_null, which panics on a list column in polars 1.30; nor Python lists (0.27 s of a V100 diff)
    empty = pl.lit([], pl.List(pl.Float64))
    return pl.select(pl.when(kept.is_null()).then(empty).otherwise(kept)).to_series().alias(column.name)


def mark_deciders(section: Section, compared: pl.DataFrame) -> pl.DataFrame:
    """Flag, per (key, rank), the metric that decides the row: among `section.deciders` with a significant verdict
    the one with the largest |delta| in ms (an added op is decided by its CPU time when it launches nothing), else
    the first of them."""
    priority = {name: i for i, name in enumerate(section.deciders)}
    to_ms = {m.name: m.to_ms or 1.0 for m in section.metrics}
    ranked = compared.with_columns(
        priority=pl.col("metric").replace_strict(priority, default=None, return_dtype=pl.Int32),
        significant=pl.col("verdict").is_in(SIGNIFICANT).fill_null(False)
    ).with_columns(change=pl.when("significant").then(
        (pl.col("delta") * pl.col("metric").replace_strict(to_ms, return_dtype=pl.Float64)).abs()))
    candidates = ranked.filter(pl.col("priority").is_not_null()).with_row_index("row")
    chosen = (candidates.sort(["significant", "change", "priority"], descending=[True, True, False], nulls_last=True)
              .group_by("key", "rank", maintain_order=True).first().select("row"))
    chosen_rows = candidates.join(chosen, on="row", how="semi").select("key", "rank", "metric", decides=pl.lit(True))
    return (ranked.drop("priority", "significant", "change")
            .join(chosen_rows, on=["key", "rank", "metric"], how="left", nulls_equal=True, maintain_order="left")
            .with_columns(pl.col("decides").fill_null(False)))


def long_form(section: Section, compared: pl.DataFrame) -> pl.DataFrame:
    to_ms = {m.name: m.to_ms for m in section.metrics}
    item = pl.concat_str([pl.col("key").struct.field(k) for k in section.keys], separator=" ", ignore_nulls=True)
    return compared.select(
        section=pl.lit(section.name), item=item, rank=pl.col("rank").cast(pl.Int32), metric="metric",
        base="base", cand="cand", delta="delta", percent_delta="percent_delta", effect="effect", ci_low="ci_low",
        ci_high="ci_high", p_value="p_value", level="level", coverage="coverage", n_base="n_base", n_cand="n_cand",
        verdict="verdict",
        decides="decides", to_ms=pl.col("metric").replace_strict(to_ms, default=None, return_dtype=pl.Float64))


VALUE_COLUMNS = ("base", "cand", "delta", "percent_delta", *EFFECT_COLUMNS, "p_value", "verdict")
JUDGED_COLUMNS = (*EFFECT_COLUMNS, "p_value", "verdict")  # absent for measures without a better direction (counts)


def wide_columns(section: Section) -> dict[str, pl.DataType]:
    """Every column of a section's wide frame, in order, with its type."""
    columns = {**section.key_types, "rank": pl.Int32, **{a: pl.String for a in section.attributes},
               "verdict": pl.String, "verdict_on": pl.String}
    for m in section.metrics:
        for v in VALUE_COLUMNS:
            if not (v in JUDGED_COLUMNS and m.direction == 0):
                columns[f"{v}_{m.name}"] = pl.String if v == "verdict" else pl.Float64
    if not section.per_rank:
        del columns["rank"]
    return columns


def attributes(section: Section, captures: list[Side]) -> pl.DataFrame | None:
    """The section's descriptive columns per key, from the first capture that has the key (candidates first)."""
    if not section.attributes:
        return None
    frames = [(merged_step_ops(f) if "name" in section.keys else f).select(*section.keys, *section.attributes)
              for f in (result(side, section.source) for side in captures) if f is not None]
    if not frames:
        return None
    return pl.concat(frames).unique(section.keys, keep="first", maintain_order=True).cast(section.key_types)


def wide_form(section: Section, compared: pl.DataFrame, attrs: pl.DataFrame | None) -> pl.DataFrame:
    """One row per (key, rank): base_m, cand_m, delta_m, percent_delta_m, effect_m, ci_low_m, ci_high_m, p_value_m,
    verdict_m per metric m, then the deciding verdict; significant rows first, then by |delta| (in ms) of the deciding
    metric."""
    columns = wide_columns(section)
    index = [*section.keys, "rank"]
    frame = compared.with_columns(pl.col("key").struct.unnest())
    if frame.height == 0:
        return pl.DataFrame(schema=columns)
    wide = frame.pivot(on="metric", index=index, values=list(VALUE_COLUMNS))
    to_ms = {m.name: m.to_ms or 1.0 for m in section.metrics}
    decided = frame.filter(pl.col("decides")).select(
        *index, verdict="verdict", verdict_on="metric",
        change=pl.col("delta").abs() * pl.col("metric").replace_strict(to_ms, return_dtype=pl.Float64))
    out = wide.join(decided, on=index, how="left", nulls_equal=True)
    if attrs is not None:
        out = out.join(attrs, on=list(section.keys), how="left", nulls_equal=True)
    return (out.with_columns(significant=pl.col("verdict").is_in(SIGNIFICANT).fill_null(False),
                             *(pl.lit(None, t).alias(c) for c, t in columns.items() if c not in out.columns))
            .sort(["significant", "change", *index], descending=[True, True] + [False] * len(index), nulls_last=True)
            .select(pl.col(c).cast(t) for c, t in columns.items()))


def diff_notes(base: list[Side], cand: list[Side], measures: pl.DataFrame, settings: Settings) -> tuple[str, ...]:
    notes = []
    if settings.method == STEPS and settings.host_floor_percent > settings.floor_percent:
        host_bound = [s.label for s in base + cand if gpu_idle_most_of_step(s)]
        host_metrics = {m.name for s in SECTIONS.values() for m in s.metrics if m.carried_by == HOST}
        held_back = measures.filter(pl.col("metric").is_in(host_metrics) & (pl.col("p_value") <= settings.alpha)
                                    & (pl.col("verdict") == verdicts.INCONCLUSIVE)).height
        if host_bound or held_back:
            step = (f"; so is the step time, the GPU being busy for less than half of it on {', '.join(host_bound)}"
                    if host_bound else "")
            notes.append(f"one capture a side: host (CPU) times are called slower or faster only beyond "
                         f"{settings.host_floor_percent:g}% (--host-floor), as runs of one unchanged job differ that "
                         f"much on the host; {held_back} significant host-time shifts under it are inconclusive{step}")
    for side in cand + base:
        for name, reason in side.failures.items():
            notes.append(f"not compared on {side.label}: analysis {name} gave nothing ({reason})")
    notes = list(dict.fromkeys(notes))
    if step_basis(base[0]) != step_basis(cand[0]):
        notes.append(f"step time is the {step_basis(base[0])} on {base[0].label} but the {step_basis(cand[0])} on "
                     f"{cand[0].label}")
    kernels = measures.filter((pl.col("section") == "kernels") & (pl.col("metric") == "total_us")
                              & pl.col("rank").is_null())
    total = kernels.select(pl.col("base").fill_null(0).sum() + pl.col("cand").fill_null(0).sum()).item()
    matched = kernels.filter(pl.col("base").is_not_null() & pl.col("cand").is_not_null()).select(
        pl.col("base").sum() + pl.col("cand").sum()).item()
    if total and (matched or 0) < 0.5 * total:
        notes.append(f"kernel names mostly differ between the runs ({100 * (matched or 0) / total:.0f}% of kernel time "
                     "on names found on both sides): compare ops and categories, not kernels")
    return tuple(notes)
