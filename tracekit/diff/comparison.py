"""The outcome of a diff: one wide frame per section, every measure in long form, and the views of them that the
workbook and the terminal show (headline, top changes, keys found on one side only)."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field

import polars as pl

from tracekit.diff.defaults import (
    DEFAULT_ALPHA,
    DEFAULT_FLOOR_PERCENT,
    DEFAULT_HOST_FLOOR_PERCENT,
    DEFAULT_WARMUP_STEPS,
)
from tracekit.diff.sections import SECTIONS, Section, parse_metric_name, top_change_sections

STEPS = "steps"  # one capture a side: steps compared (verdicts.shift_tests); run-to-run variance unmeasured
CAPTURES = "captures"  # several captures a side: per-capture values compared (blocks.capture_tests)
TEST_NAMES = {STEPS: "Mann-Whitney on steady steps, Hodges-Lehmann shift",
              CAPTURES: "Welch t on per-capture medians (captures as blocks)"}
UNMEASURED = ("one capture a side: run-to-run variance is unmeasured (this compares steps of two captures only); "
              "pass repeated captures, tracekit diff A1 A2 ... -- B1 B2 ..., to measure it")
SIGNIFICANT = ("slower", "faster", "added", "removed")
EFFECT_COLUMNS = ("effect", "ci_low", "ci_high")  # per-step shift cand − base and its confidence interval


JSON_SCHEMA = "tracekit.diff/1"  # the version of `as_dict`'s layout


def clean_floats(value):
    """VALUE with NaN and infinities as None (JSON has neither), recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: clean_floats(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_floats(v) for v in value]
    return value


@dataclass(frozen=True)
class Settings:
    alpha: float = DEFAULT_ALPHA
    floor_percent: float = DEFAULT_FLOOR_PERCENT
    warmup_steps: int = DEFAULT_WARMUP_STEPS
    method: str = STEPS  # STEPS or CAPTURES
    host_floor_percent: float = DEFAULT_HOST_FLOOR_PERCENT  # host times' floor with one capture a side

    def floor_percent_of(self, host: bool) -> float:
        # repeated captures measure the run-to-run variance themselves
        """The floor, in percent of the value, for a host-time measure or another one."""
        return max(self.floor_percent, self.host_floor_percent) if host and self.method == STEPS else self.floor_percent

    @property
    def level_text(self) -> str:
        """The interval's level as asked for, and how it follows from alpha: "95% CI (alpha 0.05 per measure, no
        multiple-comparison correction)"."""
        return f"{100 * (1 - self.alpha):g}% CI (alpha {self.alpha:g} per measure, no multiple-comparison correction)"


@dataclass(frozen=True)
class DiffResult:
    """The comparison: one wide frame per section, and every measure in long form.

    `sections[name]` has the section's key columns, `rank` where compared per rank (null: all ranks), and per metric
    m: base_m, cand_m, delta_m, percent_delta_m (values over the capture), effect_m, ci_low_m, ci_high_m (the
    per-step shift cand − base and its confidence interval), p_value_m and verdict_m; then `verdict` and `verdict_on`
    (the metric that decided it). Rows are ordered significant first, then by |delta| of the deciding metric.
    `measures` is the long form of all sections (section, item, rank, metric, base, cand, delta, percent_delta,
    effect, ci_low, ci_high, p_value, level (1 − alpha), coverage (the interval's exact coverage), n_base, n_cand
    (steps or captures compared), verdict, decides) with `item` the key as text.
    `warmup` names, per capture, the steps left out of the verdicts. `captures` counts each side's captures:
    with several a side the shift and its interval are per capture (Settings.method), else per step.
    """

    base_label: str
    cand_label: str
    sections: dict[str, pl.DataFrame]
    measures: pl.DataFrame
    settings: Settings
    step_basis: tuple[tuple[str, str], ...] = ()  # (label, what step time means on that side)
    notes: tuple[str, ...] = ()
    warmup: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (label, step numbers left out as warm-up)
    described_by: dict[str, Section] = field(default_factory=lambda: SECTIONS)  # the sections' descriptions
    captures: tuple[int, int] = (1, 1)  # captures on each side
    mismatches: tuple[str, ...] = ()  # how the sides differ: device, world size, rank set, PyTorch version

    @property
    def variance_note(self) -> str | None:
        """What the step-time verdict cannot see: run-to-run variance, with one capture a side."""
        return UNMEASURED if self.settings.method == STEPS else None

    def warmup_text(self) -> str:
        return "; ".join(f"{label}: " + ", ".join(f"ProfilerStep#{n}" for n in steps)
                         for label, steps in self.warmup if steps)

    def headline(self) -> dict:
        """Median step time (all ranks: per step the slowest rank): base, cand, delta, percent_delta, effect, ci_low,
        ci_high, p_value, verdict (values in ms); without ProfilerSteps, the GPU timeline's total time."""
        return self.metric("step_time")

    def metric(self, name: str) -> dict:
        """One measure for all ranks, by name: step_time, gpu:CATEGORY (or a bare gpu_timeline category),
        op:NAME, kernel:NAME, category:NAME. Values in the measure's unit, `metric` says which."""
        section, item = parse_metric_name(name, self.described_by)
        rows = self.measures.filter((pl.col("section") == section) & (pl.col("item") == item)
                                    & pl.col("rank").is_null() & pl.col("decides"))
        if rows.height == 0:
            known = self.measures.filter((pl.col("section") == section) & pl.col("rank").is_null())["item"]
            close = difflib.get_close_matches(item, known.unique(maintain_order=True).to_list(), n=3, cutoff=0.4)
            hint = f" (closest: {'; '.join(close)})" if close else f" ({known.n_unique()} {section} compared)"
            raise LookupError(f"{name}: no such measure in this diff{hint}")
        return rows.row(0, named=True)

    def regressed(self, percent: float, metric: str = "step_time") -> bool:
        """True when `metric` is called slower and is more than `percent` above the baseline."""
        row = self.metric(metric)
        return row["verdict"] == "slower" and (row["percent_delta"] is None or row["percent_delta"] > percent)

    def top_changes(self, limit: int = 15, sections: tuple[str, ...] | None = None) -> pl.DataFrame:
        """The largest significant changes (ms) among `sections` (default: those the sections' descriptions list
        among the top changes), all ranks together."""
        sections = top_change_sections(self.described_by) if sections is None else sections
        return (self.measures
                .filter(pl.col("section").is_in(sections) & pl.col("decides") & pl.col("rank").is_null()
                        & pl.col("verdict").is_in(SIGNIFICANT) & pl.col("to_ms").is_not_null())
                .with_columns((pl.col(c) * pl.col("to_ms")).alias(f"{c}_ms")
                              for c in ("base", "cand", "delta", *EFFECT_COLUMNS))
                .sort(pl.col("delta_ms").abs(), "section", "item", descending=[True, False, False])
                .select("section", "item", "metric", "base_ms", "cand_ms", "delta_ms", "percent_delta",
                        *(f"{c}_ms" for c in EFFECT_COLUMNS), "p_value", "verdict")
                .head(limit))

    def one_side_only(self) -> pl.DataFrame:
        """Keys found in one run only (all ranks), with the time of their deciding measure in ms."""
        return (self.measures
                .filter(pl.col("decides") & pl.col("rank").is_null() & pl.col("verdict").is_in(["added", "removed"]))
                .select("section", "item",
                        found_in=pl.when(pl.col("verdict") == "added").then(pl.lit(self.cand_label))
                        .otherwise(pl.lit(self.base_label)),
                        metric="metric", time_ms=pl.coalesce("base", "cand") * pl.col("to_ms"))
                .sort(pl.col("time_ms").abs(), "section", "item", descending=[True, False, False], nulls_last=True))

    def as_dict(self, top: int = 15) -> dict:
        """The verdicts as plain data (`tracekit diff --format json`; fields in docs/diff.md): the runs, the settings
        and the test, the headline, how the runs differ, the largest significant changes, keys on one side only."""
        try:
            head = self.headline()
        except LookupError:
            head = None
        return clean_floats({
            "schema": JSON_SCHEMA,
            "baseline": {"label": self.base_label, "captures": self.captures[0]},
            "candidate": {"label": self.cand_label, "captures": self.captures[1]},
            "settings": {**vars(self.settings), "confidence_level": 1 - self.settings.alpha,
                         "multiple_comparison_correction": "none (each measure at alpha)",
                         "test": TEST_NAMES[self.settings.method]},
            "run_to_run_variance": "unmeasured" if self.variance_note else "measured (captures as blocks)",
            "steps_left_out": [{"capture": label, "steps": list(steps)} for label, steps in self.warmup if steps],
            "mismatches": list(self.mismatches),
            "headline": None if head is None else {
                "measure": "step_time", "unit": "ms",
                "basis": dict(zip(("baseline", "candidate"), (basis for _, basis in self.step_basis))),
                **{k: head[k] for k in ("base", "cand", "delta", "percent_delta", *EFFECT_COLUMNS, "p_value",
                                        "level", "coverage", "n_base", "n_cand", "verdict")},
                "note": self.variance_note},
            "changes": self.top_changes(top).to_dicts(),
            "one_side_only": self.one_side_only().head(top).to_dicts(),
            "notes": list(self.notes),
        })

    def workbook_frames(self, top: int = 30) -> dict[str, pl.DataFrame]:
        """The frames reports/diff.toml lays out, by the names its blocks use."""
        try:
            head = self.headline()
        except LookupError:
            head = dict.fromkeys(("base", "cand", "delta", "percent_delta", *EFFECT_COLUMNS, "p_value", "level",
                                  "coverage", "n_base", "n_cand", "verdict"))
        unit = "captures" if self.settings.method == CAPTURES else "steps"
        summary = pl.DataFrame([{
            "baseline": self.base_label, "candidate": self.cand_label,
            "step_time_basis": "; ".join(f"{label}: {basis}" for label, basis in self.step_basis),
            "base_step_time_ms": head["base"], "cand_step_time_ms": head["cand"], "delta_step_time_ms": head["delta"],
            "percent_delta_step_time_ms": head["percent_delta"],
            **{f"{c}_step_time_ms": head[c] for c in (*EFFECT_COLUMNS, "p_value")},
            "steps_compared": None if head["n_base"] is None else f"{head['n_base']} vs {head['n_cand']} {unit}",
            "confidence_percent": None if head["level"] is None else 100 * head["level"],
            "coverage_percent": None if head["coverage"] is None else 100 * head["coverage"],
            "verdict": head["verdict"], **vars(self.settings), "test": TEST_NAMES[self.settings.method],
            "captures": f"{self.captures[0]} vs {self.captures[1]}",
            "run_to_run_variance": self.variance_note or "measured: captures are blocks",
            "warmup_excluded": self.warmup_text() or "none",
            "mismatches": "\n".join(self.mismatches) or "none", "notes": "\n".join(self.notes),
        }])
        timeline = self.sections["gpu_timeline"]
        return {"summary": summary, "top_changes": self.top_changes(top),
                "gpu_timeline_all": timeline.filter(pl.col("rank").is_null()).drop("rank"),
                "one_side_only": self.one_side_only(), **self.sections}

