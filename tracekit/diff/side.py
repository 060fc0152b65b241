"""One run as the diff sees it: its analysis results over the whole trace and per step, and its steps."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

STEP_SCHEMA = {"rank": pl.Int32, "step": pl.Int64}
# What a run is (mismatch.py compares the two sides'): per rank, its device, world size and PyTorch version.
RUN_INFO_SCHEMA = {"rank": pl.Int32, "device_name": pl.String, "world_size": pl.Int64, "pytorch_version": pl.String}


@dataclass(frozen=True)
class Side:
    """One run, summarised: analysis results over the whole trace, and the per-step ones the verdicts compare.

    `per_step[name]` holds the analysis `name` computed for each step separately, with a `step` column beside
    `rank`; `steps` (rank, step) lists the run's ProfilerSteps (empty without any).
    """

    label: str
    results: dict[str, pl.DataFrame]
    per_step: dict[str, pl.DataFrame] = field(default_factory=dict)
    steps: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=STEP_SCHEMA))
    failures: dict[str, str] = field(default_factory=dict)  # analysis → why it gave nothing (missing, failed)
    run_info: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=RUN_INFO_SCHEMA))


@dataclass(frozen=True)
class SidePart:
    """A Side's results computed on some of its ranks (one file's, on a cluster worker): `combined_side` joins them.
    `steps` lists the (rank, step)s with per-step results (no minimum: the 2-step rule applies to the whole run)."""

    results: dict[str, pl.DataFrame]
    per_step: dict[str, pl.DataFrame] = field(default_factory=dict)
    steps: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=STEP_SCHEMA))
    failures: dict[str, str] = field(default_factory=dict)
    run_info: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=RUN_INFO_SCHEMA))


def result(side: Side, name: str) -> pl.DataFrame | None:
    """The side's result of analysis `name`; None when it has none or no rows."""
    frame = side.results.get(name)
    return frame if frame is not None and frame.height else None


def left_out_steps(side: Side, count: int) -> tuple[int, ...]:
    """Step numbers left out of the verdicts: the steps that are not steady by the report's rule (`steady` of the
    `steps` analysis: queries/lib/steps.sql), and the first `count` steps of each rank and, where the steps are a
    serving engine's iterations, of each phase (`--warmup-steps`). A step left out on one rank is left out on all,
    so the all-ranks values per step add up the same steps."""
    frames = [side.steps] + ([side.results["steps"].select(*STEP_SCHEMA)] if result(side, "steps") is not None else [])
    steps = pl.concat([f.cast(STEP_SCHEMA) for f in frames]).unique()
    phases = (side.results["steps"].select(*STEP_SCHEMA, "phase").cast(STEP_SCHEMA)
              if result(side, "steps") is not None and "phase" in side.results["steps"].columns
              else steps.with_columns(phase=pl.lit(None, pl.String)))
    steps = steps.join(phases, on=["rank", "step"], how="left")
    first = (steps.sort("rank", "step").group_by("rank", "phase", maintain_order=True).head(count) if count > 0
             else steps.clear())
    unsteady = []
    if result(side, "steps") is not None and "steady" in side.results["steps"].columns:
        unsteady = side.results["steps"].filter(~pl.col("steady").fill_null(True))["step"].to_list()
    return tuple(sorted(set(first["step"].to_list()) | set(unsteady)))


def steady(frame: pl.DataFrame, warmup: tuple[int, ...]) -> pl.DataFrame:
    return frame.filter(~pl.col("step").is_in(warmup))


def step_counts_of(steps: pl.DataFrame) -> pl.DataFrame:
    """(rank, steps) per rank, plus rank null: the distinct steps of all ranks."""
    per_rank = steps.group_by("rank", maintain_order=True).agg(steps=pl.col("step").n_unique().cast(pl.Int64))
    overall = pl.DataFrame({"rank": [None], "steps": [steps["step"].n_unique()]},
                           schema={"rank": pl.Int32, "steps": pl.Int64})
    return pl.concat([per_rank.with_columns(pl.col("rank").cast(pl.Int32)), overall])


def step_basis(side: Side) -> str:
    return "median step" if result(side, "steps") is not None else "whole trace (no ProfilerStep)"
