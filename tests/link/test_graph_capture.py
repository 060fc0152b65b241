"""Graph replays owned by their captured ops (--graph-capture), against oracles that do not use tracekit's matching:
TraceLens's capture-merged ops_summary (AMD vLLM decode), and the model code that recorded the H200 pair
(tests/data/gpu/record.py: which aten op and module make each kernel)."""

from __future__ import annotations

import csv
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit
from tests.conftest import REPO, shared_trace

GPU_DATA = REPO / "tests" / "data" / "gpu"
H200_REPLAY, H200_CAPTURE = GPU_DATA / "graph_replay.json.gz", GPU_DATA / "graph_capture.json.gz"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def raw_replayed(path) -> dict[int, dict]:
    """The raw JSON's GPU ops sharing a graph launch's correlation, by their position in traceEvents (events.id)."""
    events = json.load(gzip.open(path))["traceEvents"]
    launches = {e["args"]["correlation"] for e in events if "GraphLaunch" in e.get("name", "")
                and e.get("cat") == "cuda_runtime"}
    return {i: e for i, e in enumerate(events) if e.get("cat") in GPU_CATS
            and e.get("args", {}).get("correlation") in launches}


def tracelens_share(op_summary, csv_path) -> float:
    """Share of TraceLens's direct kernel time on ops whose direct kernel time we match within max(1 µs, 1%)."""
    ours = dict(zip(op_summary["name"].to_list(), (op_summary["direct_kernel_ms"] * 1e3).to_list()))
    rows = list(csv.DictReader(open(csv_path)))
    total = sum(float(r["total_direct_kernel_time_sum"]) for r in rows)
    agree = sum(float(r["total_direct_kernel_time_sum"]) for r in rows if r["name"] in ours
                and abs(ours[r["name"]] - float(r["total_direct_kernel_time_sum"]))
                <= max(1.0, 0.01 * float(r["total_direct_kernel_time_sum"])))
    return agree / total


def test_amd_vllm_decode_with_its_capture_matches_tracelens_merged_ops_summary():
    replay = shared_trace("amd/mi300x_vllm_decode_graph_execution.json.gz")
    capture = shared_trace("amd/mi300x_vllm_decode_graph_capture.json.gz")
    oracle = shared_trace("amd/mi300x_vllm_decode.tracelens_csvs/ops_summary.csv")
    with tracekit.open(replay, graph_captures=[capture]) as db:
        share = tracelens_share(db.query("op_summary"), oracle)
        matched = set(db.sql("select id from graph_kernels")["id"].to_list())
        notes = db.sql("select * from diagnostics where stage = 'capture'")
    with tracekit.open(replay) as db:
        share_without = tracelens_share(db.query("op_summary"), oracle)
    assert share >= 0.95, share
    assert share_without < 0.10  # the replay alone owns the graph's kernels by the frame around hipGraphLaunch
    assert matched == set(raw_replayed(replay))  # every replayed kernel, each once
    assert notes.height == 0


def h200_expected(name: str, kind: str) -> tuple[tuple[str, ...], str]:
    """(op names, module) record.py's Block makes a GPU op of this name in: its code, not the capture, says so."""
    if "layer_norm" in name:
        return ("aten::layer_norm", "aten::native_layer_norm"), "nn.Module: LayerNorm"
    if name.startswith("nvjet") or "gemm" in name:
        return ("aten::linear", "aten::addmm"), "nn.Module: Linear"
    if "sdpa" in name or "attention" in name or kind == "gpu_memset":  # cuDNN attention clears its workspace
        return ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_cudnn_attention",
                "aten::_cudnn_attention_forward"), "nn.Module: Block"
    if "Gelu" in name:
        return ("aten::gelu",), "nn.Module: Block"
    if "add" in name:
        return ("aten::add",), "nn.Module: Block"
    raise AssertionError(f"record.py's model makes no {name}")


def test_h200_replayed_kernels_are_owned_by_the_model_op_that_made_them():
    replayed = raw_replayed(H200_REPLAY)
    tables = tracekit.load(H200_REPLAY, graph_captures=H200_CAPTURE)
    owners = {r["id"]: r for r in tables.graph_kernels.to_pylist()}
    right = 0.0
    for i, e in replayed.items():
        ops, module = h200_expected(e["name"], e["cat"])
        got = owners.get(i)
        if got and got["op_name"] in ops and (got["module"] or "").startswith(module):
            right += e["dur"]
    assert right / sum(e["dur"] for e in replayed.values()) == 1.0
    assert set(owners) == set(replayed)
    # the capture names no kernels (CUDA), and the batch-8 and batch-16 graphs have the same launches: every launch
    # fits both, which is said, not hidden
    notes = [r for r in tables.diagnostics.to_pylist() if r["stage"] == "capture"]
    assert {n["reason"] for n in notes} == {"graph_capture_ambiguous"} and len(notes) == 8
    assert {r["match"] for r in owners.values()} == {"position"}


FORK_OWNERS = (("layer_norm", "aten::native_layer_norm"), ("nvjet", "aten::addmm"), ("clamp", "aten::clamp_min"),
               ("Gelu", "aten::gelu"), ("CUDAFunctor_add", "aten::add"))


def test_h200_graph_on_two_streams_is_paired_by_what_each_kernel_does():
    """record.py's fork graph: layer norm, then relu(right(h)) forked onto a side stream and gelu(left(h)), joined
    by an add. The replay runs a branch on whichever stream (here the side branch on the main stream) and the two
    streams interleave in start order; each kernel's own functor name (which tracekit does not pair on) says which
    op made it."""
    replay, capture = GPU_DATA / "graph_fork_replay.json.gz", GPU_DATA / "graph_fork_capture.json.gz"
    replayed = raw_replayed(replay)
    assert len({e["args"]["stream"] for e in replayed.values()}) == 2
    tables = tracekit.load(replay, graph_captures=capture)
    owners = {r["id"]: r for r in tables.graph_kernels.to_pylist()}
    assert set(owners) == set(replayed)
    for i, e in replayed.items():
        expected = [op for marker, op in FORK_OWNERS if marker in e["name"]]
        assert expected and owners[i]["op_name"] == expected[0], (e["name"], owners[i]["op_name"])
    notes = [r for r in tables.diagnostics.to_pylist() if r["stage"] == "capture"]
    assert {n["reason"] for n in notes} == {"graph_capture_streams_interleaved"} and len(notes) == 6


def test_h200_ownership_and_op_summary_with_the_capture():
    with tracekit.open(H200_REPLAY, graph_captures=[H200_CAPTURE]) as db:
        ownership = db.query("gpu_ownership")
        ops = db.query("op_summary")
    replayed = raw_replayed(H200_REPLAY)
    capture_ms = ownership.filter(ownership["attribution"] == "capture")["time_ms"].sum()
    assert capture_ms == pytest.approx(sum(e["dur"] for e in replayed.values()) / 1e3, rel=1e-9)
    # 8 launches × 4 layers × 2 LayerNorms, each a call of its captured op
    layer_norm = ops.filter(ops["name"] == "aten::native_layer_norm")
    assert layer_norm["count"].to_list() == [64]
    assert layer_norm["direct_kernel_ms"][0] == pytest.approx(
        sum(e["dur"] for e in replayed.values() if "layer_norm" in e["name"]) / 1e3, rel=1e-9)


def test_the_cli_takes_graph_captures_and_refuses_a_missing_one(tmp_path):
    run = [sys.executable, "-m", "tracekit.cli", "run", "gpu_ownership", str(H200_REPLAY)]
    ok = subprocess.run(run + ["--graph-capture", str(H200_CAPTURE), "--format", "csv"], capture_output=True,
                        text=True, cwd=REPO, check=False)
    assert ok.returncode == 0, ok.stderr
    assert "capture" in ok.stdout
    missing = subprocess.run(run + ["--graph-capture", "no/such.json"], capture_output=True, text=True, cwd=REPO,
                             check=False)
    assert missing.returncode == 2 and missing.stderr.strip() == "tracekit: error: no/such.json: no such file or directory"
    # every executor takes them: a process pool writes the same workbook as this process
    for name, extra in (("here", []), ("pool", ["--jobs", "2"])):
        report = subprocess.run(run[:3] + ["report", str(H200_REPLAY), "--graph-capture", str(H200_CAPTURE),
                                           "-o", str(tmp_path / name), *extra],
                                capture_output=True, text=True, cwd=REPO, check=False)
        assert report.returncode == 0, report.stderr
    assert (tmp_path / "here" / "rank0.xlsx").read_bytes() == (tmp_path / "pool" / "rank0.xlsx").read_bytes()


def test_an_ingested_dataset_keeps_the_captured_owners(tmp_path):
    tables = tracekit.load(H200_REPLAY, graph_captures=[H200_CAPTURE])
    tracekit.write_dataset(tables, tmp_path / "ds")
    with tracekit.open(tmp_path / "ds") as db:
        assert db.sql("select count(*) as n from graph_kernels")["n"][0] == tables.graph_kernels.num_rows
        owned = db.query("gpu_ownership")
    with tracekit.from_tables(tables) as db:
        assert owned.equals(db.query("gpu_ownership"))


def test_diff_takes_graph_captures_for_both_sides():
    """Each side's replay takes the captured graph that fits it: the fork graph's relu (clamp_min) and the
    transformer's cuDNN attention are ops of one side only once the captures own the replayed kernels; without
    captures both replays are owned by torch's replay frame and no op is on one side only."""
    def one_side_ops(*captures: Path) -> set[tuple[str, str]]:
        args = ["diff", str(H200_REPLAY), str(GPU_DATA / "graph_fork_replay.json.gz"), "--format", "json",
                "--top", "100"]
        for capture in captures:
            args += ["--graph-capture", str(capture)]
        run = subprocess.run([sys.executable, "-m", "tracekit.cli", *args], capture_output=True, text=True, cwd=REPO,
                             check=False)
        assert run.returncode == 0, run.stderr
        return {(c["found_in"], c["item"]) for c in json.loads(run.stdout)["one_side_only"] if c["section"] == "ops"}

    assert one_side_ops() == set()
    with_captures = one_side_ops(H200_CAPTURE, GPU_DATA / "graph_fork_capture.json.gz")
    assert ("graph_fork_replay.json.gz", "aten::clamp_min") in with_captures
    assert ("graph_replay.json.gz", "aten::_cudnn_attention_forward") in with_captures
