"""Edges: nesting against an independent stack walk, one launch per GPU op, one chain per stream, no cycles."""

from __future__ import annotations

import graphlib
import gzip
import json

import polars as pl
import pytest

import tracekit
from tests.conftest import shared_trace
from tests.support.invariants import ordering_edges
from tracekit.link.edges import NESTING_KINDS, NESTING_RANK

TRACES = [
    "nvidia/h100_qwen1.5-0.5b.json.gz",
    "nvidia/a100_trainer_rank0of16_cudagraph.json.gz",
    "amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz",
    "nvidia/v100_ns_resolution.json.gz",
    "legacy/resnet50_2020-12_bare_list.pt.trace.json.gz",
    "nvidia/a100_alexnet_cuda_sync.json.gz",
    "nvidia/a100_nccl_rank0of2.json.gz",
]


def stack_parents(events: pl.DataFrame) -> dict[int, int]:
    """Reference nesting: walk each thread's events in start order keeping a stack of open events.

    The parent is the innermost open event that is still open after the child starts and ends no earlier than it.
    """
    events = events.filter(pl.col("kind").is_in(NESTING_KINDS) & pl.col("ts").is_not_null()).with_columns(
        end=pl.col("ts") + pl.col("dur").fill_null(0).clip(lower_bound=0),
        outer_first=pl.col("kind").replace_strict(NESTING_RANK, return_dtype=pl.Int32),
    ).sort(["rank", "pid", "tid", "ts", "end", "outer_first", "id"],
           descending=[False, False, False, False, True, False, False])
    parents, stack, thread = {}, [], None
    for rank, pid, tid, event_id, ts, end in events.select("rank", "pid", "tid", "id", "ts", "end").iter_rows():
        if (rank, pid, tid) != thread:
            stack, thread = [], (rank, pid, tid)
        need = max(end, ts + 1)
        while stack and stack[-1][1] <= ts:
            stack.pop()
        for open_id, open_end in reversed(stack):
            if open_end >= need:
                parents[event_id] = open_id
                break
        stack.append((event_id, end))
    return parents


@pytest.fixture(scope="module", params=TRACES)
def tables(request):
    return tracekit.load(shared_trace(request.param))


def test_nesting_matches_stack_walk(tables):
    expected = stack_parents(tables.polars("events"))
    nest = tables.polars("edges").filter(pl.col("kind") == "nest")
    assert dict(nest.select("dst", "src").iter_rows()) == expected


def test_every_linked_gpu_op_has_exactly_one_launch_edge(tables):
    events, edges = tables.polars("events"), tables.polars("edges")
    gpu = events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    launchers = events.filter(pl.col("kind").is_in(["runtime", "driver"]) & pl.col("correlation").is_not_null())
    linkable = gpu.join(launchers.select("rank", "correlation").unique(), on=["rank", "correlation"], how="semi")
    launch = edges.filter(pl.col("kind") == "launch")
    assert launch["dst"].is_unique().all()
    assert set(launch["dst"]) == set(linkable["id"])
    # Every launch edge joins a launcher and a GPU op with the same correlation.
    pairs = launch.join(events.select("id", src_corr="correlation"), left_on="src", right_on="id").join(
        events.select("id", dst_corr="correlation"), left_on="dst", right_on="id")
    assert (pairs["src_corr"] == pairs["dst_corr"]).all()
    unlinked = tables.polars("diagnostics").filter(pl.col("reason") == "no_launcher")
    assert unlinked.height == gpu.height - linkable.height


def test_stream_edges_form_one_chain_per_stream(tables):
    events, edges = tables.polars("events"), tables.polars("edges")
    gpu = events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]) & pl.col("stream").is_not_null())
    stream = edges.filter(pl.col("kind") == "stream")
    assert stream["src"].is_unique().all() and stream["dst"].is_unique().all()
    streams = gpu.select("device", "stream").unique().height
    assert stream.height == gpu.height - streams  # a chain of n ops has n-1 links
    linked = stream.join(gpu.select("id", "device", "stream", "ts"), left_on="src", right_on="id").join(
        gpu.select("id", d2="device", s2="stream", t2="ts"), left_on="dst", right_on="id")
    assert ((linked["device"] == linked["d2"]) & (linked["stream"] == linked["s2"]) & (linked["ts"] <= linked["t2"])).all()


def test_graph_is_acyclic(tables):
    """All edge kinds together admit a topological order (checked by graphlib, independent of how edges were built),
    less blocking copies' waits for their own op (ordering_edges)."""
    edges = tables.polars("edges")
    assert {"nest", "launch", "stream"} <= set(edges["kind"])
    edges = ordering_edges(edges)
    predecessors: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for rank, src, dst in edges.select("rank", "src", "dst").iter_rows():
        predecessors.setdefault((rank, dst), []).append((rank, src))
    order = list(graphlib.TopologicalSorter(predecessors).static_order())  # raises CycleError on a cycle
    assert len(order) == len(set(edges.select("rank", "src").rows()) | set(edges.select("rank", "dst").rows()))


def test_edges_are_unique(tables):
    edges = tables.polars("edges")
    assert not edges.select("rank", "src", "dst", "kind").is_duplicated().any()
    assert (edges["src"] != edges["dst"]).all()


def merge_as_ranks(paths, out) -> pl.DataFrame:
    """Write the files as one merged trace (rank r = file r: pids offset, `args.rank` on every event) and return
    the edges of loading each file alone, with ids shifted to the merged file's positions."""
    merged, expected = [], []
    offset = 0
    for r, path in enumerate(paths):
        data = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
        entries = data["traceEvents"] if isinstance(data, dict) else data
        for e in entries:
            if isinstance(e.get("pid"), int):
                e["pid"] += r * 1_000_000
            if e.get("ph") == "X":
                e.setdefault("args", {})["rank"] = r
        alone = tracekit.load(path, rank=r).polars("edges")
        expected.append(alone.with_columns(src=pl.col("src") + offset, dst=pl.col("dst") + offset))
        offset += len(entries)
        merged += entries
    out.write_text(json.dumps({"traceEvents": merged}))
    return pl.concat(expected)


EDGE_KEY = ["rank", "kind", "subkind", "src", "dst", "lag"]


def test_merged_ranks_give_the_edges_of_per_rank_files(tmp_path):
    """Merged DLRM ranks with colliding correlation ids: edges identical to loading each rank alone."""
    dlrm = shared_trace("multirank/dlrm_8ranks_v100")
    want = merge_as_ranks([dlrm / f"worker{r}.pt.trace.json.gz" for r in range(8)], tmp_path / "merged.json")
    got = tracekit.load(tmp_path / "merged.json").polars("edges")
    assert got.sort(EDGE_KEY).select(EDGE_KEY).equals(want.sort(EDGE_KEY).select(EDGE_KEY))


def test_merged_ranks_keep_sync_and_flow_edges(tmp_path):
    """Two runs of the same benchmark (same correlation ids, same streams), an event-sync trace and two traces with
    fwdbwd flows (overlapping flow ids) merged as ranks 0-4: sync and flow edges as when loaded alone."""
    paths = [shared_trace(p) for p in (
        "nvidia/a100_alexnet_cuda_sync.json.gz", "nvidia/a100_simple_add_cuda_sync.json.gz",
        "nvidia/a100_event_sync_multi_stream.json.gz", "amd/mi250_minitoy_train.json.gz",
        "et_pairs/cpu_torch2.13_single/kineto.json.gz")]
    want = merge_as_ranks(paths, tmp_path / "merged.json")
    got = tracekit.load(tmp_path / "merged.json").polars("edges")
    assert {"sync", "flow"} <= set(want["kind"])
    assert got.sort(EDGE_KEY).select(EDGE_KEY).equals(want.sort(EDGE_KEY).select(EDGE_KEY))
