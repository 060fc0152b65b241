"""steps and step_stats against the ProfilerStep events and GPU ops read straight from the JSON, and synth ground
truth."""

from __future__ import annotations

import statistics

import polars as pl
import pytest

import tracekit
from tests.conftest import shared_trace
from tests.support import raw_trace
from tracekit import synth
from tracekit.query import analyses

TRACES = [
    "amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz",  # GPU-side ProfilerStep annotations, GPU ~2 steps behind
    "nvidia/a100_trainer_rank0of16_cudagraph.json.gz",  # CUDA graphs; the first step has unlaunched GPU work
    "diff_pairs/resnet50_v100_workers0_vs_workers4/workers0.pt.trace.json.gz",  # ProfilerStep as a legacy cpu_op
    "nvidia/h100_qwen1.5-0.5b.json.gz",  # relative timestamps + baseTimeNanoseconds
]
METRICS = ["busy", "idle", "computation", "communication", "exposed_communication", "memcpy", "exposed_memcpy"]


def oracle_steps(raw: raw_trace.RawTrace) -> dict[int, dict]:
    """Per step from the JSON: the CPU window (longest ProfilerStep#N event) and the GPU breakdown clipped to it."""
    windows: dict[int, raw_trace.Event] = {}
    for e in raw.named(r"ProfilerStep#\d+"):
        if e.cat in ("user_annotation", "cpu_op", "Operator"):
            step = int(e.name.split("#")[1])
            if step not in windows or e.dur > windows[step].dur:
                windows[step] = e
    launched = raw.launched_gpu_ops()
    return {step: {"start_ns": e.ts, "end_ns": e.end, **raw_trace.gpu_breakdown(launched, e.ts, e.end)}
            for step, e in windows.items()}


def as_ns(ms: float) -> int:
    return round(ms * 1e6)


@pytest.fixture(scope="module", params=TRACES)
def traced(request):
    path = shared_trace(request.param)
    return tracekit.load(path), raw_trace.read(path)


def test_steps_match_json(traced):
    tables, raw = traced
    expected = oracle_steps(raw)
    got = analyses.run(tables, "steps")
    assert expected, "these traces all have ProfilerStep events"
    assert sorted(got["step"]) == sorted(expected)
    for row in got.iter_rows(named=True):
        want = expected[row["step"]]
        assert (row["start_ns"], row["end_ns"]) == (want["start_ns"], want["end_ns"])
        assert as_ns(row["duration_ms"]) == want["end_ns"] - want["start_ns"]
        for metric in METRICS:
            assert as_ns(row[f"{metric}_ms"]) == want[metric], (row["step"], metric)


def test_gpu_window_is_the_gpu_annotation_where_present():
    path = shared_trace("amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz")
    raw = raw_trace.read(path)
    annotations = {int(e.name.split("#")[1]): e for e in raw.named(r"ProfilerStep#\d+")
                   if e.cat == "gpu_user_annotation"}
    got = analyses.run(tracekit.load(path), "steps")
    assert set(got["gpu_window_source"]) == {"gpu_annotation"}
    for row in got.iter_rows(named=True):
        e = annotations[row["step"]]
        assert (row["gpu_start_ns"], row["gpu_end_ns"]) == (e.ts, e.end)


def test_unlaunched_gpu_work_is_reported_and_left_out_of_step_stats():
    path = shared_trace("nvidia/a100_trainer_rank0of16_cudagraph.json.gz")
    raw = raw_trace.read(path)
    unlaunched = raw.unlaunched_gpu_ops()
    tables = tracekit.load(path)
    steps = analyses.run(tables, "steps")
    for row in steps.iter_rows(named=True):
        want = raw_trace.union_ns([(max(e.ts, row["start_ns"]), min(e.end, row["end_ns"])) for e in unlaunched
                                   if e.ts < row["end_ns"] and e.end > row["start_ns"] and e.dur > 0])
        assert as_ns(row["unlaunched_gpu_ms"]) == want
    incomplete = steps.filter(pl.col("unlaunched_gpu_ms") > 0)
    assert incomplete["step"].to_list() == [550]  # only the first step holds work queued before the window
    stats = analyses.run(tables, "step_stats")
    assert set(stats["steps"]) == {4} and set(stats["steps_left_out"]) == {1}
    assert set(stats["basis"]) == {"complete_steps"}


def test_step_stats_are_the_spread_of_the_json_steps():
    path = shared_trace("diff_pairs/resnet50_v100_workers0_vs_workers4/workers0.pt.trace.json.gz")
    expected = oracle_steps(raw_trace.read(path))
    stats = analyses.run(tracekit.load(path), "step_stats")
    by_metric = {r["metric"]: r for r in stats.iter_rows(named=True)}
    series = {"duration_ms": [(s["end_ns"] - s["start_ns"]) / 1e6 for s in expected.values()]}
    series.update({f"{m}_ms": [s[m] / 1e6 for s in expected.values()] for m in METRICS})
    for metric, values in series.items():
        row = by_metric[metric]
        assert row["steps"] == len(values) == 6
        assert row["median"] == pytest.approx(statistics.median(values), abs=1e-9)
        assert row["min"] == pytest.approx(min(values), abs=1e-9)
        assert row["max"] == pytest.approx(max(values), abs=1e-9)
        assert row["stddev"] == pytest.approx(statistics.stdev(values), abs=1e-9)
        assert row["mean"] == pytest.approx(statistics.fmean(values), abs=1e-9)


def test_breakdown_invariants_on_multirank(tmp_path):
    """8 DLRM ranks: per-rank steps, and busy + idle = duration and exposed <= total exactly (ns)."""
    path = shared_trace("multirank/dlrm_8ranks_v100")
    steps = analyses.run(tracekit.load(path), "steps")
    assert sorted(steps["rank"]) == list(range(8))
    for row in steps.iter_rows(named=True):
        assert as_ns(row["busy_ms"]) + as_ns(row["idle_ms"]) == row["end_ns"] - row["start_ns"]
        assert row["exposed_communication_ms"] <= row["communication_ms"] + 1e-9
        assert row["exposed_memcpy_ms"] <= row["memcpy_ms"] + 1e-9
        assert row["busy_ms"] <= row["computation_ms"] + row["communication_ms"] + row["memcpy_ms"] + 1e-9
    for r in range(8):
        raw = raw_trace.read(path / f"worker{r}.pt.trace.json.gz")
        want = oracle_steps(raw)
        row = steps.filter(pl.col("rank") == raw.rank).row(0, named=True)
        assert as_ns(row["communication_ms"]) == want[row["step"]]["communication"]


@pytest.fixture(scope="module")
def synth_set(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth_steps")
    synth.generate(out, ranks=2, steps=4, seed=3, queued_kernels=40)
    return out, synth.read_ground_truth(out)


def test_steps_match_synth_ground_truth(synth_set):
    out, truth = synth_set
    steps = analyses.run(tracekit.load(sorted(out.glob("rank*.json"))), "steps")
    for rank_truth in truth["ranks"]:
        got = steps.filter(pl.col("rank") == rank_truth["rank"]).sort("step")
        want = rank_truth["steps"]
        assert got["name"].to_list() == [s["name"] for s in want]
        assert got["start_ns"].to_list() == [s["start_ns"] for s in want]
        assert got["end_ns"].to_list() == [s["end_ns"] for s in want]
        assert got["gpu_start_ns"].to_list() == [s["gpu_start_ns"] for s in want]
        assert got["gpu_end_ns"].to_list() == [s["gpu_end_ns"] for s in want]
        raw = raw_trace.read(out / f"rank{rank_truth['rank']}.json")
        expected = oracle_steps(raw)
        for row in got.iter_rows(named=True):
            for metric in METRICS:
                assert as_ns(row[f"{metric}_ms"]) == expected[row["step"]][metric]


def test_synth_queued_work_marks_the_first_steps_incomplete(synth_set):
    out, truth = synth_set
    tables = tracekit.load(sorted(out.glob("rank*.json")))
    steps = analyses.run(tables, "steps")
    queued_end = {r["rank"]: max(q["start"] + q["dur"] for q in r["queued_before_window"]) for r in truth["ranks"]}
    for row in steps.iter_rows(named=True):
        overlaps_queued = row["start_ns"] < queued_end[row["rank"]]
        assert (row["unlaunched_gpu_ms"] > 0) == overlaps_queued
    stats = analyses.run(tables, "step_stats")
    for rank, left_out in steps.group_by("rank").agg((pl.col("unlaunched_gpu_ms") > 0).sum()).iter_rows():
        assert set(stats.filter(pl.col("rank") == rank)["steps_left_out"]) == {left_out}
