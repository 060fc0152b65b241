"""Serving traces from `tracekit synth --serving`: the iterations tracekit finds (steps, their phases, batch sizes
and tokens), the owner of every GPU op (graph replays with and without Python frames), and the per-phase
statistics, each against the generator's ground truth."""

from __future__ import annotations

import statistics

import polars as pl
import pytest

import tracekit
from tracekit import synth
from tracekit.synth import ServingConfig
from tracekit.query import analyses

CASES = {
    # vLLM annotations, graph launches inside torch's replay frame, work queued before the window
    "vllm_frames": synth.ServingConfig(engine="vllm", ranks=2, iterations=14, seed=3, graph_launch="frame",
                                       queued_kernels=3),
    # SGLang step[...] annotations, no Python stacks: the graph launch owns its kernels
    "sglang_bare": synth.ServingConfig(engine="sglang", ranks=1, iterations=12, seed=5, graph_launch="bare"),
}


@pytest.fixture(scope="module", params=list(CASES))
def serving(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    synth.write(synth.synthesize_serving(CASES[request.param]), out)
    results = analyses.run_all(tracekit.load(out), ["steps", "step_stats", "kernel_by_op", "op_summary",
                                                    "gpu_ownership", "phase_summary", "phase_kernels"])
    return results, synth.read_ground_truth(out)


def test_iterations_are_the_steps(serving):
    results, truth = serving
    columns = ["step", "name", "phase", "batch_size", "tokens", "start_ns", "end_ns", "gpu_start_ns", "gpu_end_ns"]
    for rank in truth["ranks"]:
        steps = results["steps"].filter(pl.col("rank") == rank["rank"]).sort("step")
        assert steps.select(columns).to_dicts() == [{c: it[c] for c in columns} for it in rank["iterations"]]
        engine = truth["config"]["engine"]
        assert set(steps["marker"]) == {f"{engine}_annotation"}


def test_every_gpu_op_has_the_owner_the_generator_gave_it(serving):
    results, truth = serving
    by_op = results["kernel_by_op"]
    for rank in truth["ranks"]:
        got = (by_op.filter(pl.col("rank") == rank["rank"])
               .group_by("attribution", "op_name").agg(ns=(pl.col("total_us") * 1e3).sum().round().cast(pl.Int64)))
        assert {(a, o): ns for a, o, ns in got.iter_rows()} == {(o["attribution"], o["owner"]): o["ns"]
                                                               for o in rank["owners"]}
        ownership = results["gpu_ownership"].filter(pl.col("rank") == rank["rank"])
        percent = dict(ownership.select("attribution", "percent").iter_rows())
        for attribution, ns in rank["ns_by_attribution"].items():
            assert percent[attribution] == pytest.approx(100 * ns / rank["gpu_ns"])
        # the op sheets' rows add up to all GPU time, the unowned time among them
        ops = results["op_summary"].filter(pl.col("rank") == rank["rank"])
        assert round(ops["direct_kernel_ms"].sum() * 1e6) == rank["gpu_ns"]
        assert ops["percent_kernel"].sum() == pytest.approx(100)


def expected_used(iterations: list[dict], phase: str) -> list[dict]:
    """The warm-up rule, per phase: iterations holding queued work are left out unless all of the phase's do."""
    mine = [it for it in iterations if it["phase"] == phase]
    complete = [it for it in mine if not it["holds_queued_work"]]
    return complete or mine


def test_phase_summary_equals_the_truth(serving):
    results, truth = serving
    for rank in truth["ranks"]:
        summary = {r["phase"]: r for r in results["phase_summary"].filter(pl.col("rank") == rank["rank"])
                   .iter_rows(named=True)}
        phases = {it["phase"] for it in rank["iterations"]}
        assert set(summary) == phases
        for phase in phases:
            row, used = summary[phase], expected_used(rank["iterations"], phase)
            assert row["iterations"] == sum(it["phase"] == phase for it in rank["iterations"])
            assert row["iterations_used"] == len(used)
            windows = [it["gpu_end_ns"] - it["gpu_start_ns"] for it in used]
            assert row["median_ms"] == pytest.approx(statistics.median(windows) / 1e6)
            assert row["median_batch_size"] == pytest.approx(statistics.median(it["batch_size"] for it in used))
            if all(it["tokens"] is not None for it in used):
                tokens = sum(it["tokens"] for it in used)
                assert row["tokens"] == tokens
                assert row["time_per_token_us"] == pytest.approx(sum(windows) / tokens / 1e3)
            else:
                assert row["tokens"] is None and row["time_per_token_us"] is None
        kernels = results["phase_kernels"].filter(pl.col("rank") == rank["rank"])
        assert set(kernels["phase"]) == phases


def test_step_stats_leave_out_the_warm_up_per_phase(serving):
    results, truth = serving
    for rank in truth["ranks"]:
        used = sum(len(expected_used(rank["iterations"], p)) for p in {it["phase"] for it in rank["iterations"]})
        stats = results["step_stats"].filter((pl.col("rank") == rank["rank"]) & (pl.col("metric") == "duration_ms"))
        assert (stats["steps"][0], stats["steps_left_out"][0]) == (used, len(rank["iterations"]) - used)


def test_the_shared_vllm_decode_trace_is_one_decode_iteration_its_graph_owned():
    from tests.conftest import shared_trace

    tables = tracekit.load(shared_trace("amd/mi300x_vllm_decode_graph_execution.json.gz"))
    results = analyses.run_all(tables, ["steps", "kernel_by_op", "gpu_ownership"])
    steps = results["steps"]
    # its one annotation: execute_32_context_0(sq0sk0...)_generation_32(sq32sk55086...): 32 decode requests
    assert steps.select("step", "marker", "phase", "batch_size", "tokens").to_dicts() == [
        {"step": 1, "marker": "vllm_annotation", "phase": "decode", "batch_size": 32, "tokens": 32}]
    # the hipGraphLaunch (no flow start in this ROCm trace: linked by correlation) replays 421 kernels; its
    # innermost non-built-in Python frame is torch's CUDAGraph.replay
    graph = results["kernel_by_op"].filter(pl.col("attribution") == "python_frame")
    assert (graph["count"].sum(), set(graph["op_name"])) == (421, {"torch/cuda/graphs.py(139): replay"})
    assert set(results["gpu_ownership"]["attribution"]) == {"op", "python_frame"}  # nothing unowned


@pytest.mark.parametrize("kind, name, expected", [
    ("user_annotation", "execute_8192_context_9(sq8000sk9000sqsq1sqsk2)_generation_37(sq37sk500sqsq1sqsk100)",
     ("vllm_annotation", "mixed", 46, 8192)),
    ("user_annotation", "execute_context_3(100)_generation_0(0)", ("vllm_annotation", "prefill", 3, 100)),
    ("user_annotation", "execute_new_0_cached_12", ("vllm_annotation", "decode", 12, None)),
    ("user_annotation", "step[DECODE bs=32]", ("sglang_annotation", "decode", 32, None)),
    ("user_annotation", "step[EXTEND bs=15 toks=15360]", ("sglang_annotation", "prefill", 15, 15360)),
    ("python_function", "vllm/v1/worker/gpu_model_runner.py(1913): execute_model",
     ("vllm_python_frame", None, None, None)),
    ("user_annotation", "ProfilerStep#4", ("profiler_step", None, None, None)),
    ("user_annotation", "execute_model", (None, None, None, None)),
    ("python_function", "vllm/v1/worker/gpu_worker.py(447): execute_model", (None, None, None, None)),
])
def test_iteration_markers_as_the_engines_write_them(kind, name, expected):
    from tracekit.engine import catalog, connection

    con = connection.connect()
    query = ("select iteration_marker($1, $2) as m, iteration_phase(m, $2), iteration_batch_size(m, $2), "
             "iteration_tokens(m, $2)")
    catalog.prepare(con, query)
    got = con.execute(query, [kind, name]).fetchone()
    assert got == expected


def test_the_diff_compares_iteration_time_per_phase(tmp_path):
    from tracekit import diff

    config = CASES["vllm_frames"]
    runs = {}
    for label, layers in (("base", 2), ("cand", 4)):  # twice the layers: every phase slower
        out = tmp_path / label
        synth.write(synth.synthesize_serving(ServingConfig(**{**config.__dict__, "layers": layers})), out)
        runs[label] = (tracekit.load(out), synth.read_ground_truth(out))
    result = diff.compare(runs["base"][0], runs["cand"][0], warmup_steps=1)
    phases = result.sections["phases"]
    for label in ("base", "cand"):
        truth = runs[label][1]["ranks"][0]["iterations"]
        for phase in {it["phase"] for it in truth}:
            windows = [(it["gpu_end_ns"] - it["gpu_start_ns"]) / 1e6 for it in truth if it["phase"] == phase]
            row = phases.filter((pl.col("rank") == 0) & (pl.col("phase") == phase))
            assert row[f"{label}_iteration_ms"][0] == pytest.approx(statistics.median(windows))
    # decode iterations are the many: with the first decode one left out as warm-up, still enough to call it
    decode = phases.filter(pl.col("rank").is_null() & (pl.col("phase") == "decode"))
    assert decode["verdict"][0] == "slower"
