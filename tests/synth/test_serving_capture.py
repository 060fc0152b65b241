"""Serving traces with the trace of capturing their decode graphs (`tracekit synth --serving --with-capture`):
every replayed kernel owned by the op, shapes and module it was captured under, against the generator's ground
truth; a capture whose launch calls name no kernel (CUDA), and captures whose launch counts differ from the
replays', reported rather than guessed."""

from __future__ import annotations

import json
from collections import Counter

import polars as pl
import pytest

import tracekit
from tracekit import synth
from tracekit.query import analyses

CASES = {
    "hip": synth.ServingConfig(engine="vllm", iterations=14, seed=3, graph_capture="hip"),
    "cuda": synth.ServingConfig(engine="sglang", iterations=12, seed=5, graph_capture="cuda", graph_launch="bare"),
    "cuda_missing": synth.ServingConfig(engine="vllm", iterations=12, seed=3, graph_capture="cuda",
                                        capture_mismatch="missing"),
    "hip_extra": synth.ServingConfig(engine="sglang", ranks=2, iterations=10, seed=1, graph_capture="hip",
                                     capture_mismatch="extra"),
}


@pytest.fixture(scope="module", params=list(CASES))
def served(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    synthesis = synth.synthesize_serving(CASES[request.param])
    synth.write(synthesis, out)
    tables = tracekit.load(out, graph_captures=[out / name for name in synthesis.captures])
    results = analyses.run_all(tables, ["kernel_by_op", "op_summary", "gpu_ownership"])
    return CASES[request.param], tables, results, synth.read_ground_truth(out), out


def test_every_gpu_op_has_the_owner_the_capture_gives_it(served):
    _, _, results, truth, _ = served
    for rank in truth["ranks"]:
        got = (results["kernel_by_op"].filter(pl.col("rank") == rank["rank"])
               .group_by("attribution", "op_name").agg(ns=(pl.col("total_us") * 1e3).sum().round().cast(pl.Int64)))
        assert {(a, o): ns for a, o, ns in got.iter_rows()} == {(o["attribution"], o["owner"]): o["ns"]
                                                               for o in rank["owners_with_capture"]}
        ops = results["op_summary"].filter(pl.col("rank") == rank["rank"])
        assert round(ops["direct_kernel_ms"].sum() * 1e6) == rank["gpu_ns"]


def raw_launches(path) -> list[list[str]]:
    """Each graph launch's kernel names in start order, from the raw JSON."""
    events = json.loads(path.read_text())["traceEvents"]
    graph = {e["args"]["correlation"] for e in events if e.get("name") == "cudaGraphLaunch"}
    by_launch: dict[int, list[dict]] = {}
    for e in events:
        if e.get("cat") == "kernel" and e["args"].get("correlation") in graph:
            by_launch.setdefault(e["args"]["correlation"], []).append(e)
    return [[k["name"] for k in sorted(ks, key=lambda k: k["ts"])] for _, ks in sorted(by_launch.items())]


def test_each_replayed_kernel_has_its_captured_op_and_module(served):
    config, tables, _, truth, out = served
    matched = (pl.from_arrow(tables.graph_kernels).join(pl.from_arrow(tables.events.select(["rank", "id", "ts"])),
                                                        on=["rank", "id"])
               .sort("rank", "launch", "ts"))
    for rank in truth["ranks"]:
        graphs = rank["capture"]["graphs"]
        expected = []
        for names in raw_launches(out / f"rank{rank['rank']}.json"):
            launches = next(g["launches"] for g in graphs if [x["kernel"] for x in g["launches"]
                                                              if x["kind"] == "kernel"] == names[:len(g["launches"])])
            expected += [(x["op"], x["module"]) for x in launches if x["kind"] == "kernel"][:len(names)]
        got = matched.filter(pl.col("rank") == rank["rank"])
        assert list(zip(got["op_name"], got["module"])) == expected
        assert set(got["match"]) == {"name" if config.graph_capture == "hip" else "position"}
        assert [json.loads(d) for d in set(got["input_dims"])] == [[[32, 4096]]]
        assert set(got["owner_kind"]) == {"op"}


def test_what_the_capture_cannot_account_for_is_noted(served):
    config, tables, _, truth, out = served
    notes = Counter(r["reason"] for r in tables.diagnostics.to_pylist() if r["stage"] == "capture")
    unmatched = sum(r["capture"]["unmatched_gpu_ops"] for r in truth["ranks"])
    assert notes["graph_capture_unmatched"] == unmatched
    launches = sum(len(raw_launches(out / f"rank{r['rank']}.json")) for r in truth["ranks"])
    assert notes["graph_capture_not_replayed"] == (launches if config.capture_mismatch == "extra" else 0)
    # named launches tell the graphs apart; unnamed ones of equal length cannot be, and that is said
    if config.graph_capture == "hip":
        assert notes["graph_capture_ambiguous"] == 0
    assert notes["graph_capture_no_graph"] == 0


def test_without_the_capture_the_ownership_is_the_replays_alone(served):
    _, _, _, truth, out = served
    by_op = analyses.run_all(tracekit.load(out), ["kernel_by_op"])["kernel_by_op"]
    assert "capture" not in set(by_op["attribution"])
    for rank in truth["ranks"]:
        got = by_op.filter(pl.col("rank") == rank["rank"]).group_by("attribution").agg(
            ns=(pl.col("total_us") * 1e3).sum().round().cast(pl.Int64))
        assert dict(got.iter_rows()) == rank["ns_by_attribution"]
