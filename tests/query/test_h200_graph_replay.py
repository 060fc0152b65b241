"""The H200 serving-style traces (tests/data/gpu, record.py's graph_pair): who owns the kernels a CUDA graph replay
ran, the category of cuDNN's attention kernel, and the `execute_model_bs_*` annotations, which are record.py's own
names and no serving engine's iteration marker. Oracles: the raw JSON and what record.py runs."""

from __future__ import annotations

import functools
from pathlib import Path

import polars as pl
import pytest

import tracekit
from tests.support import raw_trace
from tracekit.engine import catalog
from tracekit.query import analyses

DATA = Path(__file__).parents[1] / "data" / "gpu"
REPLAY = DATA / "graph_replay.json.gz"
KINETO = ["graph_capture", "graph_replay", "kineto_train", "noise_a", "noise_b"]


@functools.cache
def tables() -> tracekit.TraceTables:
    return tracekit.load(REPLAY)


def innermost(enclosing: list[raw_trace.Event], call: raw_trace.Event) -> raw_trace.Event | None:
    around = [e for e in enclosing if e.tid == call.tid and e.ts <= call.ts and call.end <= e.end]
    return min(around, key=lambda e: e.dur) if around else None


def test_every_replayed_kernel_is_owned_by_the_replay_frame_and_the_rest_by_their_ops():
    """A cudaGraphLaunch carries no op; with Python stacks recorded, the innermost frame around it
    (torch/cuda/graphs.py: replay) owns the 44 GPU ops of each launch (42 kernels, 2 memsets); every other GPU op
    is owned by the innermost cpu_op around its launch call. Nothing is unowned."""
    trace = raw_trace.read(REPLAY)
    calls = {e.args["correlation"]: e for e in trace.events if e.cat in raw_trace.LAUNCH_CATS}
    frames = [e for e in trace.events if e.cat == "python_function" and not e.name.startswith("<built-in")]
    ops = [e for e in trace.events if e.cat == "cpu_op"]
    expected = {}
    for g in trace.events:
        if g.cat in raw_trace.GPU_CATS:
            call = calls[g.args["correlation"]]
            if call.name == "cudaGraphLaunch":
                expected[g.position] = ("python_frame", innermost(frames, call).name)
            else:
                expected[g.position] = ("op", innermost(ops, call).name)
    replayed = [k for k, (how, _) in expected.items() if how == "python_frame"]
    assert len(replayed) == 8 * 44 and {expected[k][1] for k in replayed} == {"torch/cuda/graphs.py(137): replay"}
    owners = catalog.sql(tables(), "select id, attribution, owner_name from gpu_op_owners()")
    assert {i: (a, n) for i, a, n in owners.iter_rows()} == expected
    ownership = analyses.run(tables(), "gpu_ownership")
    assert ownership["unowned_reason"].is_null().all() and set(ownership["attribution"]) == {"op", "python_frame"}


def test_cudnn_attention_kernels_are_attention():
    """record.py's model runs scaled_dot_product_attention once per layer (4) per replay (8): on the H200 in bf16
    that is cuDNN's fused kernel, whose name says sdpa and flash, and also fprop. The model has no convolution."""
    kernels = analyses.run(tables(), "kernel_summary")
    sdpa = kernels.filter(pl.col("kernel_name").str.contains("sdpa"))
    assert sdpa["count"].sum() == 4 * 8 and set(sdpa["category"]) == {"attention"}


@pytest.mark.parametrize("name", KINETO)
def test_no_convolution_in_a_model_without_one(name):
    kernels = analyses.run(tracekit.load(DATA / f"{name}.json.gz"), "kernel_summary")
    assert "convolution" not in set(kernels["category"])


def test_record_py_annotations_are_not_taken_for_iterations():
    """`execute_model_bs_8` is record.py's name, not a form vLLM writes (lib/iterations.sql lists those): no
    steps, and the analysis notes say so rather than leaving the step columns silently empty."""
    assert analyses.run(tables(), "steps").height == 0
    notes = analyses.run(tables(), "analysis_notes")
    assert notes.filter(pl.col("reason") == "no_steps").height == 1
