"""A diff section is one entry of data: a section added as one entry is run, matched and judged like the others,
and its rows agree with the same comparison done independently in polars from the events."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import tracekit
from tests.support import step_oracle
from tracekit import diff, synth
from tracekit.diff.sections import COUNT, Section, parse_metric_name, sum_us

SLOWED_KERNEL = "cunn_SoftMaxForward"
# GPU time per stream: one entry, from an analysis (kernel_by_op) no other section reads.
STREAMS = Section("streams", "kernel_by_op", {"stream": pl.Int64}, (COUNT, sum_us("total_us", "gpu")), ("total_us",),
                  True, per_step_source="kernel_by_op", metric_name="stream:ID", top_changes="yes")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("streams")
    for name, noise_seed, slow in (("base", 1, None), ("slow", 2, {SLOWED_KERNEL: 3.0})):
        synth.generate(root / name, ranks=2, steps=6, seed=3, noise=0.05, noise_seed=noise_seed, slow_kernels=slow)
    return [tracekit.load(root / name) for name in ("base", "slow")]


def stream_times(tables) -> tuple[pl.DataFrame, pl.DataFrame]:
    """From the events alone: GPU ops' count and µs per (rank, stream) and for all ranks (rank null); and the µs per
    stream in each steady step (the first step of each rank left out), in step order, 0 where a stream ran nothing."""
    events, edges = tables.polars("events"), tables.polars("edges")
    gpu = events.filter(pl.col("kind").is_in(step_oracle.GPU_KINDS)).with_columns(pl.col("rank").cast(pl.Int32))
    per_rank = gpu.group_by("rank", "stream").agg(count=pl.len().cast(pl.Float64), total_us=pl.col("dur").sum() / 1e3)
    totals = pl.concat([per_rank, per_rank.group_by("stream").agg(pl.col("count", "total_us").sum())
                       .select(pl.lit(None, pl.Int32).alias("rank"), "stream", "count", "total_us")])
    members = step_oracle.step_members(events, edges).with_columns(pl.col("rank").cast(pl.Int32))
    steps = members.select("rank", "step").unique()
    warmup = steps.group_by("rank").agg(pl.col("step").min())["step"].unique()
    steady = steps.filter(~pl.col("step").is_in(warmup.implode()))
    in_step = (gpu.join(members, on=["rank", "id"]).group_by("rank", "stream", "step")
               .agg(us=pl.col("dur").sum() / 1e3))
    grid = steady.join(totals.filter(pl.col("rank").is_not_null()).select("rank", "stream"), on="rank")
    filled = grid.join(in_step, on=["rank", "stream", "step"], how="left").with_columns(pl.col("us").fill_null(0.0))
    all_ranks = filled.group_by("stream", "step").agg(pl.col("us").sum()).with_columns(rank=pl.lit(None, pl.Int32))
    samples = (pl.concat([filled, all_ranks.select(filled.columns)]).sort("step")
               .group_by("rank", "stream").agg(samples=pl.col("us")))
    return totals, samples


def hodges_lehmann(base: list[float], cand: list[float]) -> float:
    return float(np.median([c - b for b in base for c in cand]))


def test_a_section_added_as_one_entry_is_compared(runs):
    # --warmup-steps 1: the oracle leaves each rank's first step out (synth's steps are all steady by the report's rule)
    result = diff.compare(*runs, sections={**diff.SECTIONS, "streams": STREAMS}, warmup_steps=1)
    got = result.sections["streams"]
    assert list(got.columns[:3]) == ["stream", "rank", "verdict"]
    (base, base_steps), (cand, cand_steps) = (stream_times(t) for t in runs)
    expected = (base.join(cand, on=["rank", "stream"], how="full", coalesce=True, suffix="_cand", nulls_equal=True)
                .join(base_steps, on=["rank", "stream"], how="left", nulls_equal=True)
                .join(cand_steps, on=["rank", "stream"], how="left", nulls_equal=True, suffix="_cand"))
    assert expected.height == got.height == 3 * 3  # 3 streams × (2 ranks + all ranks)
    rows = {(r["stream"], r["rank"]): r for r in got.iter_rows(named=True)}
    for want in expected.iter_rows(named=True):
        row = rows[want["stream"], want["rank"]]
        assert row["base_count"] == want["count"] and row["cand_count"] == want["count_cand"]
        assert row["base_total_us"] == pytest.approx(want["total_us"], rel=1e-9)
        assert row["cand_total_us"] == pytest.approx(want["total_us_cand"], rel=1e-9)
        assert row["delta_total_us"] == pytest.approx(want["total_us_cand"] - want["total_us"], rel=1e-9, abs=1e-9)
        assert len(want["samples"]) == 5
        assert row["effect_total_us"] == pytest.approx(hodges_lehmann(want["samples"], want["samples_cand"]),
                                                       rel=1e-9, abs=1e-9)
    # The stream running the slowed kernel is slower on every rank and all ranks together, and is reachable by the
    # section's --metric name and among the top changes, like any built-in section.
    slowed = expected.filter(pl.col("rank").is_null()).sort(pl.col("total_us_cand") - pl.col("total_us"))
    stream = slowed["stream"][-1]
    assert {r["verdict"] for (s, _), r in rows.items() if s == stream} == {"slower"}
    assert parse_metric_name(f"stream:{stream}", result.described_by) == ("streams", str(stream))
    assert result.metric(f"stream:{stream}")["verdict"] == "slower"
    assert "streams" in set(result.top_changes(50)["section"])
    assert result.measures.filter(pl.col("section") == "streams").height == 9 * 2  # count and total_us per row


def test_a_section_with_an_unknown_top_changes_value_is_refused():
    """A misspelt `top_changes` would silently keep the section out of the top changes: it is refused instead."""
    with pytest.raises(ValueError, match="top_changes 'Yes'"):
        Section("streams", "kernel_by_op", {"stream": pl.Int64}, (COUNT,), (), True, top_changes="Yes")
