"""Subtree kernel time per op name counts each GPU op once per name, where calls of one name nest (aten::arange
inside aten::arange): checked on every shared trace against the GPU ops under the name's calls found in polars, and
on a hand-built trace whose every value is known."""

from __future__ import annotations

import json

import polars as pl
import pytest

import tracekit
from tests.conftest import all_kineto_traces, trace_id
from tests.trace_events import kernel, launch
from tracekit.engine import catalog
from tracekit.query import analyses

GPU_KINDS = ("kernel", "memcpy", "memset")


def gpu_time_under_each_name(events: pl.DataFrame, edges: pl.DataFrame) -> pl.DataFrame:
    """(rank, name, ns): the summed durations of the distinct GPU ops launched anywhere under a call of each cpu_op
    name, found by climbing the nest edges from every launch call."""
    gpu = (events.filter(pl.col("kind").is_in(GPU_KINDS) & pl.col("ts").is_not_null())
           .select("rank", gpu="id", dur=pl.col("dur").fill_null(0)))
    launched = (edges.filter(pl.col("kind") == "launch").select("rank", node="src", gpu="dst")
                .join(gpu.select("rank", "gpu"), on=["rank", "gpu"]))
    parent_of = edges.filter(pl.col("kind") == "nest").select("rank", node="dst", parent="src")
    ancestors, frontier = [], launched
    for _ in range(10_000):  # a tree is far shallower; the bound only guards against a cycle
        frontier = frontier.join(parent_of, on=["rank", "node"]).select("rank", "gpu", node="parent")
        if frontier.height == 0:
            break
        ancestors.append(frontier)
    else:
        raise AssertionError("nest edges form a cycle")
    ops = events.filter(pl.col("kind") == "cpu_op").select("rank", node="id", name="name")
    if not ancestors:
        return pl.DataFrame(schema={"rank": pl.Int32, "name": pl.String, "ns": pl.Int64})
    return (pl.concat(ancestors).join(ops, on=["rank", "node"])
            .select("rank", "name", "gpu").unique()
            .join(gpu, on=["rank", "gpu"])
            .group_by("rank", "name").agg(ns=pl.col("dur").sum()))


@pytest.mark.parametrize("path", all_kineto_traces(), ids=trace_id)
def test_subtree_time_per_name_is_the_gpu_time_under_its_calls(path, loaded_trace):
    tables = loaded_trace(path)
    expected = gpu_time_under_each_name(tables.polars("events"), tables.polars("edges"))
    # the rows of cpu_ops (op_summary also holds the GPU time no cpu_op owns: annotations, frames, graph launches)
    op_names = tables.polars("events").filter(pl.col("kind") == "cpu_op").select("name").unique()
    results = analyses.run_all(tables, ["op_summary", "op_by_shape"])
    got = results["op_summary"].join(op_names, on="name", how="semi").select(
        pl.col("rank").cast(pl.Int32), "name", ns=(pl.col("subtree_kernel_ms") * 1e6).round().cast(pl.Int64))
    # every GPU op counted once per name: equal to the union, so never above the GPU time under the name's calls
    compared = got.join(expected.with_columns(pl.col("rank").cast(pl.Int32)), on=["rank", "name"], how="full",
                        coalesce=True, suffix="_expected").with_columns(pl.col("ns", "ns_expected").fill_null(0))
    wrong = compared.filter(pl.col("ns") != pl.col("ns_expected"))
    assert wrong.height == 0, wrong.sort("name").head(10)
    # op_by_shape shares a name's subtree time out among its shapes without counting anything twice
    by_shape = (results["op_by_shape"].join(op_names, on="name", how="semi").group_by("rank", "name")
                .agg(ns=(pl.col("subtree_kernel_ms").sum() * 1e6).round().cast(pl.Int64)))
    assert dict(zip(zip(by_shape["rank"], by_shape["name"]), by_shape["ns"])) == dict(
        zip(zip(got["rank"], got["name"]), got["ns"]))


def cpu(name, ts, dur, dims):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": {"Input Dims": dims, "Input type": ["float"]}}


# where[4] ⊃ (k1, where[8] ⊃ (arange ⊃ arange ⊃ k2, k3)); then a separate where[4] ⊃ k4. Durations in µs.
NESTED_SAME_NAME = [
    cpu("aten::where", 0, 100, [[4]]),
    launch(2, 1), kernel(300, 5, 1),
    cpu("aten::where", 10, 40, [[8]]),
    cpu("aten::arange", 12, 30, [[]]),
    cpu("aten::arange", 14, 20, [[]]),
    launch(15, 2), kernel(310, 7, 2),
    launch(45, 3), kernel(320, 3, 3),
    cpu("aten::where", 200, 10, [[4]]),
    launch(202, 4), kernel(330, 11, 4),
]


@pytest.fixture(scope="module")
def nested_same_name(tmp_path_factory):
    path = tmp_path_factory.mktemp("nested") / "rank0.json"
    path.write_text(json.dumps({"traceEvents": NESTED_SAME_NAME}))
    return tracekit.load(path)


def test_op_nested_in_an_op_of_its_name_counts_once(nested_same_name):
    summary = {r["name"]: r for r in analyses.run(nested_same_name, "op_summary").iter_rows(named=True)}
    # where: k1 + k3 + k4 direct; k1 + k2 + k3 under the outer call, k4 under the separate one (each call summed
    # separately would give 15 + 10 + 11 = 36); arange: k2 once (not 14)
    assert (summary["aten::where"]["direct_kernel_ms"] * 1e3, summary["aten::where"]["subtree_kernel_ms"] * 1e3) == (
        pytest.approx(19), pytest.approx(26))
    assert (summary["aten::arange"]["direct_kernel_ms"] * 1e3, summary["aten::arange"]["subtree_kernel_ms"] * 1e3) == (
        pytest.approx(7), pytest.approx(7))
    by_shape = {(r["name"], r["input_dims"]): r["subtree_kernel_ms"] * 1e3
                for r in analyses.run(nested_same_name, "op_by_shape").iter_rows(named=True)}
    # the outer where[4] owns what runs under the inner where[8]
    assert by_shape[("aten::where", "[[4]]")] == pytest.approx(26)
    assert by_shape[("aten::where", "[[8]]")] == pytest.approx(0)
    # each call keeps its own subtree time
    calls = catalog.sql(nested_same_name, "select name, ts, subtree_ns, owned_subtree_ns from op_calls() order by ts")
    assert [(n, s, o) for n, _, s, o in calls.iter_rows()] == [
        ("aten::where", 15_000, 15_000), ("aten::where", 10_000, 0), ("aten::arange", 7_000, 7_000),
        ("aten::arange", 7_000, 0), ("aten::where", 11_000, 11_000)]
