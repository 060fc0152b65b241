"""One side's measures for one diff section, in long form: key, rank (null: all ranks), metric, value over the
capture, and `samples`, the per-step values of the steady steps (warm-up steps left out).

Each section (tracekit/diff/sections.py) names one of these functions as its `measures`; they share the signature
(con, side, section, warmup). Most sections are a plain group-by of their source analysis (`analysis_measures`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import duckdb
import polars as pl

from tracekit.diff.side import STEP_SCHEMA, Side, result, steady
from tracekit.engine import catalog

if TYPE_CHECKING:
    from tracekit.diff.sections import Section

MEASURE_SCHEMA = {"rank": pl.Int32, "metric": pl.String, "value": pl.Float64, "samples": pl.List(pl.Float64)}
# gpu_timeline category → the `steps` column holding the same time per step.
TIMELINE_STEP_COLUMNS = {"computation": "computation_ms", "communication": "communication_ms", "memcpy": "memcpy_ms",
                         "exposed_communication": "exposed_communication_ms", "exposed_memcpy": "exposed_memcpy_ms",
                         "busy": "busy_ms", "idle": "idle_ms", "total": "duration_ms"}


def analysis_measures(con: duckdb.DuckDBPyConnection, side: Side, section: Section, warmup: tuple[int, ...]
                      ) -> pl.DataFrame:
    """The section's sum metrics per key from its source analysis, over the capture and in each steady step."""
    totals, per_step = result(side, section.source), side.per_step.get(section.source)
    if "name" in section.keys:
        totals, per_step = merged_step_ops(totals), merged_step_ops(per_step)
    return additive_measures(con, section, totals, per_step, steady(side.steps, warmup))


def merged_step_ops(frame: pl.DataFrame | None) -> pl.DataFrame | None:
    """Older traces record each `ProfilerStep#N` range as a cpu_op: one op `ProfilerStep#*` matches them across runs
    whose step numbers differ."""
    if frame is None:
        return None
    return frame.with_columns(pl.col("name").str.replace(r"^ProfilerStep#\d+$", "ProfilerStep#*"))


def empty_measures(section: Section) -> pl.DataFrame:
    return pl.DataFrame(schema={"key": section.key_type, **MEASURE_SCHEMA})


def keyed(frame: pl.DataFrame, section: Section) -> pl.DataFrame:
    return frame.with_columns(key=pl.struct(section.keys).cast(section.key_type)).drop(section.keys)


def additive_measures(con, section: Section, totals: pl.DataFrame | None, per_step: pl.DataFrame | None,
                      steps: pl.DataFrame) -> pl.DataFrame:
    """Sums of the section's additive metrics per key (per rank where the section is, and all ranks together), with
    their values in each of `steps` (queries/diff/measures.sql)."""
    metrics = [m.name for m in section.metrics if m.aggregation == "sum"]
    if totals is None:
        return empty_measures(section)

    def long(frame: pl.DataFrame, index: list[str]) -> pl.DataFrame:
        return (frame.select(*index, *section.keys, *metrics)
                .unpivot(index=[*index, *section.keys], on=metrics, variable_name="metric", value_name="value")
                .with_columns(pl.col("value").cast(pl.Float64), pl.col("rank").cast(pl.Int32)))

    values = long(totals, ["rank"])
    group = [*section.keys, "metric"]
    levels = [values.group_by(group, maintain_order=True).agg(pl.col("value").sum())
              .with_columns(rank=pl.lit(None, pl.Int32))]
    if section.per_rank:
        levels.append(values.group_by("rank", *group, maintain_order=True).agg(pl.col("value").sum()))
    totals_long = keyed(pl.concat(levels, how="diagonal"), section)
    if per_step is None or per_step.height == 0:
        # No per-step results (fewer than 2 steps, or the analysis gave nothing): no steps to fill with zeros.
        per_step_long = pl.DataFrame(schema={"key": totals_long["key"].dtype, "rank": pl.Int32, "step": pl.Int64,
                                             "metric": pl.String, "value": pl.Float64})
        steps = pl.DataFrame(schema=STEP_SCHEMA)
    else:
        per_step_long = keyed(long(per_step, ["rank", "step"]), section)
    con.register("totals", totals_long)
    con.register("step_values", per_step_long)
    con.register("steps", steps.cast(STEP_SCHEMA))
    return pl.from_arrow(catalog.run_stage(con, ["diff/measures"])["measures"])


def collective_measures(con, side: Side, section: Section, warmup: tuple[int, ...]) -> pl.DataFrame:
    """Count and time of collectives per (collective, dtype, bytes, group size), and their mean bus bandwidth; per
    step, the mean bandwidth of the step's calls (a step without such a call has no value, not 0)."""
    calls = result(side, "collectives")
    if calls is None:
        return empty_measures(section)

    def per_key(frame: pl.DataFrame, index: list[str]) -> pl.DataFrame:
        return (frame.group_by(*index, *section.keys, maintain_order=True)
                .agg(count=pl.len(), time_us=pl.col("duration_us").sum()))

    per_step = side.per_step.get("collectives")
    sums = additive_measures(con, section, per_key(calls, ["rank"]),
                             per_key(per_step, ["rank", "step"]) if per_step is not None else None,
                             steady(side.steps, warmup))
    overall = [calls.group_by(section.keys, maintain_order=True).agg(value=pl.col("busbw_gbps").mean(),
                                                                     rank=pl.lit(None, pl.Int32)),
               calls.group_by("rank", *section.keys, maintain_order=True).agg(value=pl.col("busbw_gbps").mean())]
    bandwidth = pl.concat([b.select(pl.col("rank").cast(pl.Int32), *section.keys, "value") for b in overall])
    if per_step is not None:
        steps = steady(per_step, warmup)
        means = [steps.group_by("step", *section.keys, maintain_order=True)
                 .agg(pl.col("busbw_gbps").mean(), rank=pl.lit(None, pl.Int32)),
                 steps.group_by("rank", "step", *section.keys, maintain_order=True).agg(pl.col("busbw_gbps").mean())]
        samples = (pl.concat([m.select(pl.col("rank").cast(pl.Int32), "step", *section.keys, "busbw_gbps")
                              for m in means])
                   .sort("step").group_by("rank", *section.keys, maintain_order=True)
                   .agg(samples=pl.col("busbw_gbps").cast(pl.Float64)))
        bandwidth = bandwidth.join(samples, on=["rank", *section.keys], how="left", nulls_equal=True,
                                   maintain_order="left")
    else:
        bandwidth = bandwidth.with_columns(samples=pl.lit(None, pl.List(pl.Float64)))
    bandwidth = keyed(bandwidth, section).with_columns(metric=pl.lit("busbw_gbps"))
    return pl.concat([sums, bandwidth.select(sums.columns).cast(sums.schema)])


def op_rate_measures(con, side: Side, section: Section, warmup: tuple[int, ...]) -> pl.DataFrame:
    """Calls and kernel time of each modelled op call shape (op_perf, shapes nested in another modelled call left out
    so that no kernel counts twice), and the TFLOP/s achieved: the shape's FLOPs over its kernel time, over the
    capture and, as the verdict's samples, in each steady step (a step without the shape has no value, not 0)."""
    shapes = result(side, "op_perf")
    if shapes is None:
        return empty_measures(section)

    def per_key(frame: pl.DataFrame, index: list[str]) -> pl.DataFrame:
        return (frame.filter(~pl.col("nested") & pl.col("gflops_per_call").is_not_null())
                .group_by(*index, *section.keys, maintain_order=True)
                .agg(count=pl.col("count").sum(), kernel_total_us=pl.col("kernel_total_us").sum(),
                     gflop=(pl.col("count") * pl.col("gflops_per_call")).sum())
                .with_columns(tflops_per_s=pl.when(pl.col("kernel_total_us") > 0)  # GFLOP/µs = 1000 TFLOP/s
                              .then(pl.col("gflop") / pl.col("kernel_total_us") * 1e3)))

    per_step = side.per_step.get("op_perf")
    sums = additive_measures(con, section, per_key(shapes, ["rank"]),
                             per_key(per_step, ["rank", "step"]) if per_step is not None else None,
                             steady(side.steps, warmup))
    levels = [([], pl.lit(None, pl.Int32))] + ([(["rank"], pl.col("rank"))] if section.per_rank else [])
    rate = pl.concat([per_key(shapes, index).select(rank.cast(pl.Int32).alias("rank"), *section.keys,
                                                   value="tflops_per_s") for index, rank in levels])
    if per_step is not None:
        steps = steady(per_step, warmup)
        samples = (pl.concat([per_key(steps, ["step", *index]).select(rank.cast(pl.Int32).alias("rank"), "step",
                                                                      *section.keys, "tflops_per_s")
                              for index, rank in levels])
                   .sort("step").group_by("rank", *section.keys, maintain_order=True)
                   .agg(samples=pl.col("tflops_per_s").drop_nulls().cast(pl.Float64)))
        rate = rate.join(samples, on=["rank", *section.keys], how="left", nulls_equal=True, maintain_order="left")
    else:
        rate = rate.with_columns(samples=pl.lit(None, pl.List(pl.Float64)))
    rate = keyed(rate, section).with_columns(metric=pl.lit("tflops_per_s"))
    return pl.concat([sums, rate.select(sums.columns).cast(sums.schema)])


def collective_role_measures(con, side: Side, section: Section, warmup: tuple[int, ...]) -> pl.DataFrame:
    """Count and time of collectives per (collective, process-group role): comparable between runs of different
    world sizes or devices, where message sizes and group sizes differ. The role is the process group's description
    where the trace gives one, else `world` (the group spans the world size) or `subgroup`. All ranks: the mean
    per rank (a run on 8 ranks against one on 2 compares what one rank spends), per step likewise."""
    calls = result(side, "collectives")
    if calls is None:
        return empty_measures(section)
    world = side.run_info["world_size"].drop_nulls().max() or calls["rank"].n_unique()
    ranks = calls["rank"].n_unique()

    def per_key(frame: pl.DataFrame, index: list[str]) -> pl.DataFrame:
        described = pl.col("process_group_desc").is_not_null() & ~pl.col("process_group_desc").is_in(["", "undefined"])
        return (frame.with_columns(role=pl.when(described).then(pl.col("process_group_desc"))
                                   .when(pl.col("group_size") == world).then(pl.lit("world"))
                                   .otherwise(pl.lit("subgroup")))
                .group_by(*index, *section.keys, maintain_order=True)
                .agg(count=pl.len(), time_us=pl.col("duration_us").sum()))

    per_step = side.per_step.get("collectives")
    sums = additive_measures(con, section, per_key(calls, ["rank"]),
                             per_key(per_step, ["rank", "step"]) if per_step is not None else None,
                             steady(side.steps, warmup))
    all_ranks = pl.col("rank").is_null()
    return sums.with_columns(value=pl.when(all_ranks).then(pl.col("value") / ranks).otherwise("value"),
                             samples=pl.when(all_ranks).then(pl.col("samples").list.eval(pl.element() / ranks))
                             .otherwise("samples"))


def timeline_measures(con, side: Side, section: Section, warmup: tuple[int, ...]) -> pl.DataFrame:
    """GPU time per category (gpu_timeline), with its per-step values from `steps`."""
    totals, steps = result(side, "gpu_timeline"), result(side, "steps")
    if totals is None:
        return empty_measures(section)
    per_step = None
    if steps is not None:
        per_step = (steps.select("rank", "step", *TIMELINE_STEP_COLUMNS.values())
                    .rename({v: k for k, v in TIMELINE_STEP_COLUMNS.items()})
                    .unpivot(index=["rank", "step"], variable_name="category", value_name="value"))
    return breakdown_measures(totals.select("rank", "category", value="time_ms"), per_step, warmup)


def critical_path_measures(con, side: Side, section: Section, warmup: tuple[int, ...]) -> pl.DataFrame:
    """Critical-path time per category summed over the steps, with its per-step values."""
    path = result(side, "critical_path_summary")
    if path is None:
        return empty_measures(section)
    per_step = path.select("rank", "step", "category", value="time_ms")
    return breakdown_measures(per_step.group_by("rank", "category", maintain_order=True).agg(pl.col("value").sum()),
                              per_step, warmup)


def breakdown_measures(totals: pl.DataFrame, per_step: pl.DataFrame | None, warmup: tuple[int, ...]) -> pl.DataFrame:
    """Times per (rank, category), and for all ranks, with their values in the steady steps. A category absent from
    a step counts as 0 there."""
    per_rank = totals.select(pl.col("rank").cast(pl.Int32), "category", pl.col("value").cast(pl.Float64))
    values = pl.concat([per_rank, per_rank.group_by("category", maintain_order=True).agg(pl.col("value").sum())
                       .select(pl.lit(None, pl.Int32).alias("rank"), "category", "value")])
    samples = pl.DataFrame(schema={"rank": pl.Int32, "category": pl.String, "samples": pl.List(pl.Float64)})
    if per_step is not None and per_step.height:
        filled = (per_step.with_columns(pl.col("rank").cast(pl.Int32), pl.col("value").cast(pl.Float64))
                  .pivot(on="category", index=["rank", "step"], values="value", aggregate_function="sum")
                  .with_columns(pl.exclude("rank", "step").fill_null(0.0))
                  .unpivot(index=["rank", "step"], variable_name="category", value_name="value"))
        filled = steady(filled, warmup)
        all_ranks = (filled.group_by("step", "category", maintain_order=True).agg(pl.col("value").sum())
                     .select(pl.lit(None, pl.Int32).alias("rank"), "step", "category", "value"))
        samples = (pl.concat([filled, all_ranks]).sort("step")
                   .group_by("rank", "category", maintain_order=True).agg(samples=pl.col("value")))
    return (values.join(samples, on=["rank", "category"], how="left", nulls_equal=True, maintain_order="left")
            .with_columns(key=pl.struct("category"), metric=pl.lit("time_ms"))
            .select("key", *MEASURE_SCHEMA))


def gpu_idle_most_of_step(side: Side) -> bool:
    """Whether the GPU was busy for less than half of the side's median step (all ranks' steps together)."""
    steps = result(side, "steps")
    if steps is None or "busy_ms" not in steps.columns:
        return False
    share = steps.select((pl.col("busy_ms") / pl.col("duration_ms")).median()).item()
    return share is not None and share < 0.5


def step_time_measures(con, side: Side, section: Section, warmup: tuple[int, ...]) -> pl.DataFrame:
    """Median step time per rank and for all ranks (per step, the slowest rank) over the steady steps (all steps
    where none is), with the steady steps' durations as per-step values. Without steps, the GPU timeline's total
    time (whole trace, no per-step values)."""
    steps = result(side, "steps")
    if steps is not None:
        overall = (steps.group_by("step", maintain_order=True).agg(pl.col("duration_ms").max())
                   .with_columns(rank=pl.lit(None, pl.Int32)))
        frame = (pl.concat([steps.select(pl.col("rank").cast(pl.Int32), "step", "duration_ms"),
                            overall.select("rank", "step", "duration_ms")])
                 .sort("step").group_by("rank", maintain_order=True)
                 .agg(all_steps=pl.col("duration_ms").median(),
                      samples=pl.col("duration_ms").filter(~pl.col("step").is_in(warmup)).cast(pl.Float64))
                 # the median of the steps the verdict compares (the steady ones, as the report's Overview)
                 .with_columns(value=pl.coalesce(pl.col("samples").list.median(), "all_steps")))
    else:
        timeline = result(side, "gpu_timeline")
        if timeline is None:
            return empty_measures(section)
        total = timeline.filter(pl.col("category") == "total").select(pl.col("rank").cast(pl.Int32), value="time_ms")
        frame = pl.concat([total, pl.DataFrame({"rank": [None], "value": [total["value"].max()]},
                                               schema={"rank": pl.Int32, "value": pl.Float64})])
        frame = frame.with_columns(samples=pl.lit(None, pl.List(pl.Float64)))
    return frame.with_columns(key=pl.struct(measure=pl.lit("step time")), metric=pl.lit("step_time_ms")
                              ).select("key", *MEASURE_SCHEMA)




def phase_measures(con, side: Side, section: Section, warmup: tuple[int, ...]) -> pl.DataFrame:
    """Median iteration time per serving phase (prefill, decode, mixed) per rank and for all ranks, with the steady
    iterations' times as per-step values. An iteration's time is its GPU window (its CPU window where it launched
    nothing), as in phase_summary; ProfilerSteps have no phase and give no rows."""
    steps = result(side, "steps")
    if steps is None or "marker" not in steps.columns:
        return empty_measures(section)
    iterations = (steps.filter(pl.col("marker") != "profiler_step")
                  .select(pl.col("rank").cast(pl.Int32), "step", phase=pl.col("phase").fill_null("unknown"),
                          value=pl.coalesce("gpu_duration_ms", "duration_ms").cast(pl.Float64)))
    if not iterations.height:
        return empty_measures(section)
    levels = pl.concat([iterations, iterations.with_columns(rank=pl.lit(None, pl.Int32))])
    frame = (levels.sort("step").group_by("rank", "phase", maintain_order=True)
             .agg(pl.col("value").median(), samples=pl.col("value").filter(~pl.col("step").is_in(warmup))))
    return (frame.with_columns(key=pl.struct("phase"), metric=pl.lit("iteration_ms"))
            .select("key", *MEASURE_SCHEMA))
