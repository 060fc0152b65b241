"""What a training step is, written in polars from the events and edges tables, independently of the SQL that
tracekit runs (queries/lib/steps.sql): the oracle for every command's --step.

Step N of a rank is its CPU `ProfilerStep#N` range (a user_annotation; a cpu_op in legacy traces; where a rank has
several, the user_annotation, then the longest). An event belongs to at most one step: the one that started last at
or before the event's start, if that step has not ended by then. Launched GPU ops (kernel, memcpy, memset with a
launch edge) belong to the step of their launch call; gpu_annotations are placed by the steps' GPU windows (the
GPU-side ProfilerStep#N annotation's span, else the span of the step's launched GPU ops, else the CPU window); every
other event (host events, GPU ops without a launch call) by the CPU windows.
"""

from __future__ import annotations

import polars as pl

GPU_KINDS = ["kernel", "memcpy", "memset"]
STEP_NAME = r"^ProfilerStep#(\d+)$"


def cpu_windows(events: pl.DataFrame) -> pl.DataFrame:
    """rank, step, start, end of each step."""
    return (events.filter(pl.col("kind").is_in(["user_annotation", "cpu_op"]) & pl.col("name").str.contains(STEP_NAME)
                          & pl.col("dur").is_not_null())
            .with_columns(step=pl.col("name").str.extract(STEP_NAME).cast(pl.Int64),
                          preferred=pl.col("kind") == "user_annotation")
            .sort(["rank", "step", "preferred", "dur", "id"], descending=[False, False, True, True, False])
            .unique(["rank", "step"], keep="first", maintain_order=True)
            .select("rank", "step", start=pl.col("ts"), end=pl.col("ts") + pl.col("dur")))


def place(points: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """(rank, id, step) for points (rank, id, ts): the window that started last at or before ts, if still open."""
    candidates = points.join(windows, on="rank").filter(pl.col("start") <= pl.col("ts"))
    latest = candidates.sort("start").group_by("rank", "id").agg(pl.all().last())
    return latest.filter(pl.col("ts") < pl.col("end")).select("rank", "id", "step")


def step_members(events: pl.DataFrame, edges: pl.DataFrame) -> pl.DataFrame:
    """rank, id, step of every event that belongs to a step."""
    windows = cpu_windows(events)
    launches = edges.filter(pl.col("kind") == "launch").select("rank", call="src", id="dst")
    timed = events.filter(pl.col("ts").is_not_null()).select("rank", "id", "ts", "kind", "name", "dur")
    by_cpu_window = place(timed.filter(pl.col("kind") != "gpu_annotation"), windows)
    host = by_cpu_window.join(launches, on=["rank", "id"], how="anti")
    launched = launches.join(host.rename({"id": "call"}), on=["rank", "call"]).select("rank", "id", "step")
    gpu = timed.filter(pl.col("kind").is_in(GPU_KINDS)).select("rank", "id", "ts", end=pl.col("ts") + pl.col(
        "dur").fill_null(0))
    launched_span = (launched.join(gpu, on=["rank", "id"]).group_by("rank", "step")
                     .agg(launched_start=pl.col("ts").min(), launched_end=pl.col("end").max()))
    annotation_span = (timed.filter((pl.col("kind") == "gpu_annotation") & pl.col("name").str.contains(STEP_NAME))
                       .with_columns(step=pl.col("name").str.extract(STEP_NAME).cast(pl.Int64))
                       .group_by("rank", "step")
                       .agg(annotation_start=pl.col("ts").min(),
                            annotation_end=(pl.col("ts") + pl.col("dur")).max()))
    gpu_windows = (windows.join(annotation_span, on=["rank", "step"], how="left")
                   .join(launched_span, on=["rank", "step"], how="left")
                   .select("rank", "step",
                           start=pl.coalesce("annotation_start", "launched_start", "start"),
                           end=pl.coalesce("annotation_end", "launched_end", "end")))
    annotations = place(timed.filter(pl.col("kind") == "gpu_annotation"), gpu_windows)
    return pl.concat([host, launched, annotations]).with_columns(pl.col("rank").cast(pl.Int64))


def step_windows(events: pl.DataFrame, edges: pl.DataFrame) -> pl.DataFrame:
    """rank, step, start, end, gpu_start, gpu_end: the CPU window, and the GPU window (null where the step has no
    GPU-side annotation and launched nothing)."""
    members = step_members(events, edges)
    gpu = events.filter(pl.col("kind").is_in(GPU_KINDS + ["gpu_annotation"]) & pl.col("ts").is_not_null())
    annotation = (gpu.filter((pl.col("kind") == "gpu_annotation") & pl.col("name").str.contains(STEP_NAME))
                  .with_columns(step=pl.col("name").str.extract(STEP_NAME).cast(pl.Int64))
                  .group_by("rank", "step").agg(a_start=pl.col("ts").min(), a_end=(pl.col("ts") + pl.col("dur")).max()))
    launches = edges.filter(pl.col("kind") == "launch").select("rank", "dst")
    launched = (gpu.filter(pl.col("kind").is_in(GPU_KINDS)).join(launches, left_on=["rank", "id"],
                                                                    right_on=["rank", "dst"], how="semi")
                .with_columns(pl.col("rank").cast(pl.Int64)).join(members, on=["rank", "id"])
                .group_by("rank", "step")
                .agg(l_start=pl.col("ts").min(), l_end=(pl.col("ts") + pl.col("dur").fill_null(0)).max()))
    return (cpu_windows(events).with_columns(pl.col("rank").cast(pl.Int64))
            .join(annotation.with_columns(pl.col("rank").cast(pl.Int64)), on=["rank", "step"], how="left")
            .join(launched, on=["rank", "step"], how="left")
            .select("rank", "step", "start", "end", gpu_start=pl.coalesce("a_start", "l_start"),
                    gpu_end=pl.coalesce("a_end", "l_end")))
