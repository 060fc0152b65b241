"""sync_inferred edges: the rule on small hand-built traces (each case's answer worked out by hand from its times),
agreement with recorded cuda_sync edges, and the critical path on those edges (hand-built and shared traces)."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest

import tracekit
from tests.conftest import REPO, shared_trace
from tracekit.link.edges import inferred_edges
from tracekit.query import analyses


def call(name, ts, dur, correlation, tid=1):
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": {"correlation": correlation}}


def gpu(cat, name, ts, dur, correlation, stream=7):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": correlation}}


def kernel(ts, dur, correlation, stream=7, name="gemm_kernel"):
    return gpu("kernel", name, ts, dur, correlation, stream)


def cpu(name, ts, dur, cat="user_annotation"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def load(tmp_path, events) -> tracekit.TraceTables:
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return tracekit.load(path)


def inferred(tables) -> dict[str, tuple[str, str, int]]:
    """name of the waiting call → (name of the op waited for, class, lag ns); names are unique in these traces."""
    events = tables.polars("events").select("id", "name")
    names = dict(events.iter_rows())
    edges = tables.polars("edges").filter(pl.col("kind") == "sync_inferred")
    return {names[d]: (names[s], k, lag) for s, d, k, lag in edges.select("src", "dst", "subkind", "lag").iter_rows()}


def test_blocking_calls_wait_for_the_op_that_ended_just_before_they_returned(tmp_path):
    tables = load(tmp_path, [
        # stream sync: k1 ends at 1000, the call returns 5 µs later
        call("cudaLaunchKernel#1", 0, 5, 1), kernel(10, 990, 1, name="k1"),
        call("cudaStreamSynchronize", 20, 985, 2),
        # device sync returning 40 µs after the last op ended: beyond the lag bound, no edge
        call("cudaLaunchKernel#2", 1100, 5, 3), kernel(1110, 100, 3, name="k2"),
        call("cudaDeviceSynchronize", 1120, 130, 4),
        # a sync during which nothing ends (the GPU was idle): no edge
        call("hipStreamSynchronize", 1300, 20, 5),
        # allocator: cudaFree returning 3 µs after k3 ended inside it
        call("cudaLaunchKernel#3", 1400, 5, 6), kernel(1410, 200, 6, name="k3"),
        call("cudaFree", 1500, 113, 7),
        # event sync returning 2 µs after k4 (another stream) ended
        call("cudaLaunchKernel#4", 1700, 5, 8), kernel(1710, 50, 8, stream=9, name="k4"),
        call("cudaEventSynchronize", 1720, 42, 9),
    ])
    assert inferred(tables) == {
        "cudaStreamSynchronize": ("k1", "stream_sync", 20_000 - 1_000_000),
        "cudaFree": ("k3", "allocator", 1_500_000 - 1_610_000),
        "cudaEventSynchronize": ("k4", "event_sync", 1_720_000 - 1_760_000),
    }


def test_a_sync_of_a_millisecond_or_more_may_return_up_to_100_us_after_its_op(tmp_path):
    """A host thread that waits a long time sleeps and wakes later: a sync call of 1 ms or more gets 100 µs."""
    tables = load(tmp_path, [
        # a 5 ms stream sync returning 40 µs after k1 ended: an edge
        call("cudaLaunchKernel#1", 0, 5, 1), kernel(10, 4950, 1, name="k1"),
        call("cudaStreamSynchronize", 20, 4980, 2),
        # a 5 ms device sync returning 150 µs after k2 ended: beyond 100 µs, no edge
        call("cudaLaunchKernel#2", 6000, 5, 3), kernel(6010, 4840, 3, name="k2"),
        call("cudaDeviceSynchronize", 6020, 4980, 4),
        # a 0.9 ms event sync returning 40 µs after k3: shorter than 1 ms, 25 µs holds, no edge
        call("cudaLaunchKernel#3", 12000, 5, 5), kernel(12010, 850, 5, name="k3"),
        call("cudaEventSynchronize", 12000, 900, 6),
        # a 5 ms allocator call returning 40 µs after k4: not a sync class, 25 µs holds, no edge
        call("cudaLaunchKernel#4", 14000, 5, 7), kernel(14010, 4950, 7, name="k4"),
        call("cudaFree", 14000, 5000, 8),
    ])
    assert inferred(tables) == {"cudaStreamSynchronize": ("k1", "stream_sync", 20_000 - 4_960_000)}


@pytest.mark.parametrize("capture", ["sd35_a.json.gz", "sd35_b.json.gz"])
def test_the_long_final_sync_of_a_recorded_inference_waits_for_the_last_gpu_op(capture):
    """The SD3.5 captures of bench/recorded (no sync events) end with a 71-74 ms cudaStreamSynchronize that returned
    31-33 µs after the last GPU op ended: it waited for that op (the oracle: the events' times), and the critical
    path goes through the GPU work it waited for instead of reading those milliseconds as host CPU time."""
    tables = tracekit.load(REPO / "bench" / "recorded" / capture)
    events = tables.polars("events")
    sync = events.filter(pl.col("name") == "cudaStreamSynchronize").sort("dur").tail(1)
    start, end = sync["ts"][0], sync["ts"][0] + sync["dur"][0]
    ops = (events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
           .with_columns(end=pl.col("ts") + pl.col("dur")))
    last = ops.filter((pl.col("end") > start) & (pl.col("end") <= end)).sort("end", "id").tail(1)
    assert sync["dur"][0] > 70_000_000 and 25_000 < end - last["end"][0] <= 100_000
    edges = tables.polars("edges").filter((pl.col("kind") == "sync_inferred") & (pl.col("dst") == sync["id"][0]))
    assert edges["src"].to_list() == last["id"].to_list()
    path = analyses.run(tables, "critical_path")
    waited = path.filter(pl.col("event_id") == sync["id"][0])
    assert waited.filter(pl.col("category") == "cpu")["duration_ns"].sum() < 1_000_000
    assert path.filter(pl.col("category").is_in(["compute", "memcpy", "memset"]))["duration_ns"].sum() > 50_000_000


def test_a_blocking_copy_waits_for_its_own_copy_and_an_asynchronous_one_for_nothing(tmp_path):
    tables = load(tmp_path, [
        call("cudaLaunchKernel", 0, 5, 1), kernel(10, 500, 1, name="k1"),
        # pageable D2H: queued at 20, its copy runs after k1 and ends 7 µs before the call returns
        call("cudaMemcpyAsync#pageable", 20, 512, 2), gpu("gpu_memcpy", "copy_pageable", 510, 15, 2),
        # pinned H2D: returns at 606, before its copy (queued behind nothing) ends at 615; k2 ends inside it
        call("cudaLaunchKernel#2", 590, 2, 3), kernel(595, 5, 3, stream=9, name="k2"),
        call("cudaMemcpyAsync#pinned", 600, 6, 4), gpu("gpu_memcpy", "copy_pinned", 605, 10, 4),
        # a synchronous memset ending 1 µs after its own memset
        call("cudaMemset", 700, 30, 5), gpu("gpu_memset", "memset_op", 710, 19, 5),
    ])
    assert inferred(tables) == {
        "cudaMemcpyAsync#pageable": ("copy_pageable", "memcpy", 20_000 - 525_000),
        "cudaMemset": ("memset_op", "memset", 700_000 - 729_000),
    }


def test_a_launch_blocked_on_a_full_queue_waits_for_the_op_that_freed_a_slot(tmp_path):
    usual = [call("cudaLaunchKernel", 10 * i, 4, 100 + i) for i in range(9)]
    queued = [kernel(100 + 50 * i, 50, 100 + i, name=f"q{i}") for i in range(9)]  # ends 150, 200, ..., 550
    tables = load(tmp_path, usual + queued + [
        # 100 µs instead of the usual 4: returns 3 µs after q4 ended at 350
        call("cudaLaunchKernel", 253, 100, 200), kernel(600, 10, 200, name="after_queue"),
        # a usual-length launch in which q5 ends (at 400): a coincidence, no edge
        call("cudaLaunchKernel", 398, 4, 201), kernel(610, 10, 201, name="k_usual"),
        # a long launch whose own kernel ended inside it (it ran long after submitting): not queued, no edge
        call("cudaLaunchKernel", 700, 60, 202), kernel(705, 50, 202, name="own"),
    ])
    edges = tables.polars("edges").filter(pl.col("kind") == "sync_inferred")
    events = tables.polars("events")
    assert edges.height == 1 and edges["subkind"][0] == "launch_queue"
    src = events.filter(pl.col("id") == edges["src"][0]).row(0, named=True)
    dst = events.filter(pl.col("id") == edges["dst"][0]).row(0, named=True)
    assert src["name"] == "q4" and dst["ts"] == 253_000 and dst["dur"] == 100_000


def test_an_op_that_started_late_waited_for_the_op_another_stream_ended_just_before(tmp_path):
    """copy_after_nccl was queued at 10 (its call ended then) on an idle stream, yet started at 512, 2 µs after the
    NCCL kernel on stream 9 ended: it waited for it. k_on_time started 5 µs after its launch: nothing to infer, even
    though an op on another stream (k_side) ended just before it."""
    tables = load(tmp_path, [
        call("cudaLaunchKernel#nccl", 0, 5, 1), kernel(8, 502, 1, stream=9, name="ncclDevKernel_AllReduce"),
        call("cudaMemcpyAsync", 5, 5, 2), gpu("gpu_memcpy", "copy_after_nccl", 512, 10, 2, stream=7),
        call("cudaLaunchKernel#side", 600, 5, 3), kernel(606, 10, 3, stream=9, name="k_side"),
        call("cudaLaunchKernel#main", 612, 5, 4), kernel(622, 10, 4, stream=7, name="k_on_time"),
    ])
    names = dict(tables.polars("events").select("id", "name").iter_rows())
    edges = tables.polars("edges").filter(pl.col("kind") == "stream_wait_inferred")
    assert [(names[s], names[d], lag) for s, d, lag in edges.select("src", "dst", "lag").iter_rows()] == [
        ("ncclDevKernel_AllReduce", "copy_after_nccl", 2_000)]
    # without the later ops the copy ends the trace: its path runs back through the NCCL kernel
    tables = load(tmp_path, [
        call("cudaLaunchKernel#nccl", 0, 5, 1), kernel(8, 502, 1, stream=9, name="ncclDevKernel_AllReduce"),
        call("cudaMemcpyAsync", 5, 5, 2), gpu("gpu_memcpy", "copy_after_nccl", 512, 10, 2, stream=7),
    ])
    path = analyses.run(tables, "critical_path").sort("position")
    assert path.select("name", "category", "carried_by", "inferred", "start_ns", "end_ns").rows() == [
        ("cudaLaunchKernel#nccl", "cpu", "cpu", False, 0, 5_000),
        ("ncclDevKernel_AllReduce", "launch", "gpu", False, 5_000, 8_000),
        ("ncclDevKernel_AllReduce", "communication", "gpu", False, 8_000, 510_000),
        ("copy_after_nccl", "sync_wait", "gpu", True, 510_000, 512_000),
        ("copy_after_nccl", "memcpy", "gpu", False, 512_000, 522_000),
    ]


def test_recorded_sync_events_take_precedence(tmp_path):
    events = [call("cudaLaunchKernel", 0, 5, 1), kernel(10, 990, 1, name="k1"),
              call("cudaStreamSynchronize", 20, 985, 2), call("cudaDeviceSynchronize", 1100, 10, 3)]
    recorded = {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": 1000, "dur": 5,
                "args": {"cuda_sync_kind": "Stream Sync", "stream": 7, "correlation": 2, "device": 0}}
    tables = load(tmp_path, events + [recorded])
    kinds = tables.polars("edges").filter(pl.col("kind").is_in(["sync", "sync_inferred"]))
    assert kinds["kind"].to_list() == ["sync"]
    # the same call gets the same op by inference when the event is ignored
    alone = pl.from_arrow(inferred_edges(tables, recorded_first=False)).filter(pl.col("kind") == "sync_inferred")
    assert alone.select("src", "dst").rows() == kinds.select("src", "dst").rows()


def test_the_path_runs_through_the_gpu_op_a_host_call_waited_for(tmp_path):
    """A step launches a 1 ms kernel and syncs on it; the GPU then runs a second kernel launched at the step's end
    that ends 300 µs after the step's CPU annotation: the step's path is the kernels, not the waiting call."""
    tables = load(tmp_path, [
        cpu("ProfilerStep#1", 0, 1100),
        call("cudaLaunchKernel", 10, 10, 1), kernel(30, 1000, 1, name="k_long"),
        call("cudaStreamSynchronize", 25, 1010, 2),  # returns 5 µs after k_long ends at 1030
        call("cudaLaunchKernel#2", 1040, 10, 3), kernel(1060, 340, 3, name="k_tail"),
    ])
    path = analyses.run(tables, "critical_path")
    assert path["window_end_ns"][0] == 1_400_000  # the step ends when k_tail ends, after its CPU annotation
    rows = {(r["name"], r["category"]): r for r in path.iter_rows(named=True)}
    assert rows["k_long", "compute"]["duration_ns"] == 1_000_000 and rows["k_long", "compute"]["carried_by"] == "gpu"
    wait = rows["cudaStreamSynchronize", "sync_wait"]
    assert (wait["start_ns"], wait["end_ns"], wait["carried_by"], wait["inferred"]) == (1_030_000, 1_035_000, "cpu",
                                                                                      True)
    assert ("cudaStreamSynchronize", "cpu") not in rows
    last = path.sort("position").row(-1, named=True)
    assert (last["name"], last["category"], last["carried_by"], last["end_ns"]) == ("k_tail", "compute", "gpu",
                                                                                    1_400_000)
    assert path["duration_ns"].sum() == 1_400_000


def test_a_blocking_copy_queued_behind_a_kernel_puts_the_kernel_on_the_path(tmp_path):
    """.item() after a long kernel: the copy call starts at 20 and blocks; the copy starts when the kernel ends.
    The time the call spent waiting is the kernel's, not the call's."""
    tables = load(tmp_path, [
        call("cudaLaunchKernel", 0, 10, 1), kernel(15, 800, 1, name="k_long"),
        call("cudaMemcpyAsync", 20, 810, 2), gpu("gpu_memcpy", "copy_d2h", 816, 4, 2),
    ])
    path = analyses.run(tables, "critical_path")
    by_name = path.group_by("name", "category").agg(pl.col("duration_ns").sum())
    got = {(n, c): d for n, c, d in by_name.iter_rows()}
    assert got[("k_long", "compute")] == 800_000
    assert got[("cudaMemcpyAsync", "sync_wait")] == 10_000  # 820 → 830
    assert got.get(("cudaMemcpyAsync", "cpu"), 0) == 0


SYNC_TRACES = ["nvidia/a100_alexnet_cuda_sync.json.gz", "nvidia/a100_simple_add_cuda_sync.json.gz",
               "nvidia/a100_event_sync.json.gz", "nvidia/a100_event_sync_multi_stream.json.gz"]


@pytest.mark.parametrize("trace", SYNC_TRACES)
def test_inferred_edges_agree_with_the_recorded_ones(trace):
    """Every recorded host call that blocked (an op it waited for ended while it ran) gets, by inference alone, the
    op that released it (the last of them) or one ending at the same time; none that did not block gets one."""
    tables = tracekit.load(shared_trace(trace))
    events = tables.polars("events").select("id", "ts", end=pl.col("ts") + pl.col("dur"))
    calls = tables.polars("events").filter(pl.col("kind").is_in(["runtime", "driver"])).select(
        dst="id", call_ts="ts", call_end=pl.col("ts") + pl.col("dur"))
    recorded = (tables.polars("edges").filter(pl.col("kind") == "sync")
                .join(calls, on="dst")
                .join(events.rename({"id": "src", "end": "src_end"}).drop("ts"), on="src")
                .with_columns(inside=(pl.col("src_end") > pl.col("call_ts"))
                              & (pl.col("src_end") <= pl.col("call_end")))
                .group_by("dst").agg(blocked=pl.col("inside").any(),
                                     released_at=pl.col("src_end").filter(pl.col("inside")).max()))
    alone = (pl.from_arrow(inferred_edges(tables, recorded_first=False)).filter(pl.col("kind") == "sync_inferred")
             .join(events.rename({"id": "src", "end": "inferred_end"}).drop("ts"), on="src"))
    compared = recorded.join(alone.select("dst", "inferred_end"), on="dst", how="left")
    blocked = compared.filter("blocked")
    assert blocked.height > 0
    assert (blocked["inferred_end"] == blocked["released_at"]).all()
    assert blocked["inferred_end"].null_count() == 0
    not_blocked = compared.filter(~pl.col("blocked"))
    assert not_blocked["inferred_end"].null_count() == not_blocked.height


NO_SYNC_TRACES = [
    "nvidia/h100_qwen1.5-0.5b.json.gz", "amd/mi300x_qwen1.5-0.5b.json.gz", "nvidia/b200_eager_rank0of8.json.gz",
    "nvidia/a100_trainer_rank0of16_cudagraph.json.gz", "amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz",
    "diff_pairs/resnet50_v100_workers0_vs_workers4/workers0.pt.trace.json.gz", "multirank/dlrm_8ranks_v100",
    "nvidia/v100_ns_resolution.json.gz",
]
SYNC_CALL = re.compile(r"(?i)synchronize")


@pytest.mark.parametrize("trace", NO_SYNC_TRACES)
def test_host_calls_waiting_for_the_gpu_carry_at_most_2_percent_of_the_path(trace):
    """Waiting calls: every *Synchronize call inside which a GPU op ended (whatever its lag) and every call an
    inferred edge says waited. Without the inferred edges the walk spent 16-45% of these paths inside them."""
    tables = tracekit.load(shared_trace(trace))
    events = tables.polars("events")
    gpu_ends = events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"])).select(
        "rank", end=pl.col("ts") + pl.col("dur"))
    syncs = events.filter(pl.col("kind").is_in(["runtime", "driver"])
                          & pl.col("name").str.contains(SYNC_CALL.pattern)).select("rank", "id", "ts", "dur")
    ended_inside = (syncs.join(gpu_ends, on="rank")
                    .filter((pl.col("end") > pl.col("ts")) & (pl.col("end") <= pl.col("ts") + pl.col("dur")))
                    .select("rank", "id"))
    inferred_waits = tables.polars("edges").filter(pl.col("kind") == "sync_inferred").select("rank", id="dst")
    waiting = pl.concat([ended_inside, inferred_waits]).unique()
    assert tables.polars("edges").filter(pl.col("kind") == "sync").height == 0
    path = analyses.run(tables, "critical_path")
    share = (path.join(waiting, left_on=["rank", "event_id"], right_on=["rank", "id"], how="semi")["duration_ns"].sum()
             / path["duration_ns"].sum())
    assert share <= 0.02
    assert "gpu" in set(path["carried_by"])  # was all cpu before the inferred edges
