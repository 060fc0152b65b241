"""The outcome of a diff: one wide frame per section, every measure in long form, and the views of them that the
workbook and the terminal show (headline, top changes, keys found on one side only)."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from tracekit.diff.sections import SECTIONS, Section, parse_metric_name, top_change_sections

DEFAULT_ALPHA = 0.05  # two-sided level of the rank test; the shift's confidence interval is at 1 - alpha
DEFAULT_FLOOR_PERCENT = 1.0  # per-step shifts smaller than this share of the value are never called, however steady
DEFAULT_WARMUP_STEPS = 1  # leading steps of each run left out of the verdicts
SIGNIFICANT = ("slower", "faster", "added", "removed")
EFFECT_COLUMNS = ("effect", "ci_low", "ci_high")  # per-step shift cand − base and its confidence interval


@dataclass(frozen=True)
class Settings:
    alpha: float = DEFAULT_ALPHA
    floor_percent: float = DEFAULT_FLOOR_PERCENT
    warmup_steps: int = DEFAULT_WARMUP_STEPS


@dataclass(frozen=True)
class DiffResult:
    """The comparison: one wide frame per section, and every measure in long form.

    `sections[name]` has the section's key columns, `rank` where compared per rank (null: all ranks), and per metric
    m: base_m, cand_m, delta_m, percent_delta_m (values over the capture), effect_m, ci_low_m, ci_high_m (the
    per-step shift cand − base and its confidence interval), p_value_m and verdict_m; then `verdict` and `verdict_on`
    (the metric that decided it). Rows are ordered significant first, then by |delta| of the deciding metric.
    `measures` is the long form of all sections (section, item, rank, metric, base, cand, delta, percent_delta,
    effect, ci_low, ci_high, p_value, level, n_base, n_cand, verdict, decides) with `item` the key as text.
    `warmup` names, per run, the steps left out of the verdicts.
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
            raise LookupError(f"{name}: no such measure in this diff")
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

    def workbook_frames(self, top: int = 30) -> dict[str, pl.DataFrame]:
        """The frames reports/diff.toml lays out, by the names its blocks use."""
        try:
            head = self.headline()
        except LookupError:
            head = dict.fromkeys(("base", "cand", "delta", "percent_delta", *EFFECT_COLUMNS, "p_value", "level",
                                  "n_base", "n_cand", "verdict"))
        summary = pl.DataFrame([{
            "baseline": self.base_label, "candidate": self.cand_label,
            "step_time_basis": "; ".join(f"{label}: {basis}" for label, basis in self.step_basis),
            "base_step_time_ms": head["base"], "cand_step_time_ms": head["cand"], "delta_step_time_ms": head["delta"],
            "percent_delta_step_time_ms": head["percent_delta"],
            **{f"{c}_step_time_ms": head[c] for c in (*EFFECT_COLUMNS, "p_value")},
            "steps_compared": None if head["n_base"] is None else f"{head['n_base']} vs {head['n_cand']}",
            "confidence_percent": None if head["level"] is None else 100 * head["level"],
            "verdict": head["verdict"], **vars(self.settings), "warmup_excluded": self.warmup_text() or "none",
            "notes": "\n".join(self.notes),
        }])
        timeline = self.sections["gpu_timeline"]
        return {"summary": summary, "top_changes": self.top_changes(top),
                "gpu_timeline_all": timeline.filter(pl.col("rank").is_null()).drop("rank"),
                "one_side_only": self.one_side_only(), **self.sections}

