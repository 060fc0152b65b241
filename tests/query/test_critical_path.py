"""critical_path / critical_path_summary: segments tile each window exactly; HTA's reference values and HTA's own
critical-path output on its test traces; synth ground truth for the host syncs."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import tracekit
from tests.conftest import REPO, shared_trace
from tests.trace_events import kernel, launch
from tracekit import synth
from tracekit.engine import catalog
from tracekit.link.edges import inferred_edges
from tracekit.query import analyses

CATEGORIES = {"cpu", "launch", "compute", "communication", "memcpy", "memset", "kernel_to_kernel_gap", "sync_wait",
              "unexplained_gpu_wait", "idle"}
GPU_WAITS = ["launch", "kernel_to_kernel_gap", "sync_wait"]  # a GPU op's wait for what let it go: at most 25 µs
GPU_CATEGORIES = {"compute", "communication", "memcpy", "memset"}
TRACES = [
    "nvidia/a100_trainer_rank0of16_cudagraph.json.gz",  # 5 steps, CUDA graphs, zero-length duplicate runtime rows
    "amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz",
    "nvidia/a100_alexnet_cuda_sync.json.gz",  # no steps: the whole trace
    "nvidia/v100_ns_resolution.json.gz",  # sub-µs improper nesting
    "nvidia/b200_eager_rank0of8.json.gz",  # kernels overlapping on one stream
    "multirank/dlrm_8ranks_v100",
    # inference recorded with with_stack, no steps: a path through nearly every Python frame (279k segments)
    REPO / "bench" / "recorded" / "sd35_a.json.gz",
]
ALEXNET_WINDOW = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"


@pytest.fixture(scope="module", params=TRACES)
def tables(request):
    return tracekit.load(shared_trace(request.param))


@pytest.fixture(scope="module")
def walked(tables) -> dict[str, pl.DataFrame]:
    """The critical path of `tables` and the sheets summing it, run once (on one connection, as a report does) for
    the tests that check them."""
    return analyses.run_all(tables, ["critical_path", "critical_path_summary", "critical_path_categories",
                                     "critical_path_steps", "critical_path_top"])


def test_segments_tile_each_window_exactly(walked):
    path = walked["critical_path"]
    assert path.height > 0 and set(path["category"]) <= CATEGORIES
    for _, window in path.group_by("rank", "step"):
        window = window.sort("position")
        assert window["position"].to_list() == list(range(1, window.height + 1))
        starts, ends = window["start_ns"].to_list(), window["end_ns"].to_list()
        assert starts[0] == window["window_start_ns"][0] and ends[-1] == window["window_end_ns"][0]
        assert starts[1:] == ends[:-1]  # contiguous, no overlap
        assert (window["duration_ns"] > 0).all()
        assert window["duration_ns"].sum() == window["window_end_ns"][0] - window["window_start_ns"][0]


def test_segments_lie_inside_the_events_that_own_them(tables, walked):
    path = walked["critical_path"].filter(
        pl.col("category").is_in(["cpu", *GPU_CATEGORIES])
        & pl.col("event_id").is_not_null())
    events = tables.polars("events").select("rank", "id", "kind", "ts", end=pl.col("ts") + pl.col("dur").fill_null(0))
    owned = path.join(events, left_on=["rank", "event_id"], right_on=["rank", "id"])
    assert owned.height == path.height
    assert ((owned["start_ns"] >= owned["ts"]) & (owned["end_ns"] <= owned["end"])).all()
    on_gpu = owned["kind"].is_in(["kernel", "memcpy", "memset"])
    assert (on_gpu == owned["category"].is_in(GPU_CATEGORIES)).all()
    assert (on_gpu == (owned["carried_by"] == "gpu")).all()


def test_summary_adds_up_to_each_window(walked):
    summary, path = walked["critical_path_summary"], walked["critical_path"]
    per_window = summary.group_by("rank", "step").agg(pl.col("percent").sum(), pl.col("time_ms").sum(),
                                                      pl.col("window_ms").first())
    for row in per_window.iter_rows(named=True):
        assert row["percent"] == pytest.approx(100.0, abs=1e-9)
        assert row["time_ms"] == pytest.approx(row["window_ms"], abs=1e-9)
    by_category = path.group_by("rank", "step", "category").agg(pl.col("duration_ns").sum())
    joined = summary.join(by_category, on=["rank", "step", "category"], nulls_equal=True)
    assert joined.height == summary.height
    assert (joined["time_ms"] * 1e6 - joined["duration_ns"]).abs().max() < 1e-3


def test_a_rank_without_steps_gets_the_whole_trace():
    path = shared_trace("nvidia/a100_alexnet_cuda_sync.json.gz")
    tables = tracekit.load(path)
    got = analyses.run(tables, "critical_path")
    assert got["step"].null_count() == got.height
    events = tables.polars("events").filter(
        pl.col("kind").is_in(["cpu_op", "user_annotation", "python_function", "runtime", "driver", "overhead",
                              "kernel", "memcpy", "memset"]))
    assert got["window_start_ns"][0] == events["ts"].min()
    assert got["window_end_ns"][0] == (events["ts"] + events["dur"].fill_null(0)).max()


def hta_window_path(tables, annotation: str, instance: int) -> pl.DataFrame:
    """The critical path of the n-th instance of an annotation (HTA's annotation + instance_id selection)."""
    return catalog.sql(tables, f"""
        with instance as (
            select rank, 0 as window_id, ts as start_ns, ts + dur as end_ns from events
            where name = '{annotation}' order by ts limit 1 offset {instance})
        select * from critical_path_segments('instance')""")


def hta_comparable(path: pl.DataFrame) -> dict[str, float]:
    """HTA gives zero weight to user annotations' own time, to time between top-level ops, to sync dependencies
    and has no idle: drop those; its 'CPU-bound' is the remaining host time, 'GPU compute' the kernels' time."""
    weighted = path.filter(~(
        ((pl.col("category") == "cpu") & (pl.col("event_id").is_null() | (pl.col("kind") == "user_annotation")))
        | pl.col("category").is_in(["sync_wait", "idle"])))
    total = weighted["duration_ns"].sum()
    share = weighted.group_by("category").agg(pl.col("duration_ns").sum())
    percent = {c: 100.0 * ns / total for c, ns in share.iter_rows()}
    return {"length_us": total / 1e3, "cpu": percent.get("cpu", 0.0), "gpu_compute": percent.get("compute", 0.0)}


def as_if_no_sync_events(tables):
    """TABLES with the edges the recorded cuda_sync events gave replaced by those inferred without them."""
    kept = tables.edges.filter(pc.invert(pc.is_in(tables.edges["kind"], pa.array(
        ["sync", "sync_inferred", "stream_wait_inferred"]))))
    return tables.with_tables(edges=pa.concat_tables([kept, inferred_edges(tables, recorded_first=False)]))


@pytest.mark.parametrize("edges", ["recorded", "inferred"])
@pytest.mark.parametrize("trace, length_us, cpu, gpu_compute", [
    ("nvidia/a100_alexnet_cuda_sync.json.gz", 35_834, 89.42, 10.36),
    ("nvidia/a100_simple_add_cuda_sync.json.gz", 241_724, 99.78, None),
])
def test_hta_reference_values(trace, length_us, cpu, gpu_compute, edges):
    """HTA's numbers need the cuda_sync events; with them removed, the inferred edges must give the same."""
    tables = tracekit.load(shared_trace(trace))
    if edges == "inferred":
        tables = as_if_no_sync_events(tables)
        assert tables.polars("edges").filter(pl.col("kind") == "sync_inferred").height > 0
    path = hta_window_path(tables, ALEXNET_WINDOW, 1)
    window = path["end_ns"].max() - path["start_ns"].min()
    assert path["duration_ns"].sum() == window
    got = hta_comparable(path)
    assert got["length_us"] == pytest.approx(length_us, rel=1e-3)
    # Shares within 0.25 points: on simple_add HTA's path ends through the last kernels (0.22% of it), because its
    # zero-weight gaps between top-level ops make the host route shorter there; ours stays on the host (100% cpu).
    assert got["cpu"] == pytest.approx(cpu, abs=0.25)
    if gpu_compute is not None:
        assert got["gpu_compute"] == pytest.approx(gpu_compute, abs=0.25)


def test_same_events_as_hta_on_the_whole_simple_add_trace():
    """HTA's overlaid output marks its critical events with args.critical = 1, at their positions in traceEvents
    (= events.id). HTA does not put user annotations in its graph, so they are compared without them."""
    tables = tracekit.load(shared_trace("nvidia/a100_simple_add_cuda_sync.json.gz"))
    overlaid = shared_trace("oracles/hta_critical_path_simple_add_overlaid.json.gz")
    oracle = json.loads(gzip.decompress(overlaid.read_bytes()))
    hta = {i for i, e in enumerate(oracle["traceEvents"]) if e.get("ph") == "X" and e.get("args", {}).get("critical")}
    path = analyses.run(tables, "critical_path").filter(pl.col("kind") != "user_annotation")
    ours = set(path["event_id"].drop_nulls())
    common = len(ours & hta)
    assert common / len(hta) >= 0.98  # HTA's path ends through the last forward's kernels; ours through the host
    assert common / len(ours) >= 0.97


def test_synth_blocking_sync_waits_for_the_gpu_op_that_released_it(tmp_path):
    """In each synth step, loss.item()'s cudaStreamSynchronize blocks until the GPU finishes: the path must run
    through the GPU op that released it (ground truth signal_correlation, ending at gpu_done_at), then the
    call's tail as sync_wait."""
    synth.generate(tmp_path, ranks=2, steps=3, seed=11)
    truth = synth.read_ground_truth(tmp_path)
    tables = tracekit.load(sorted(tmp_path.glob("rank*.json")))
    path = analyses.run(tables, "critical_path")
    events = tables.polars("events").select("rank", "id", "kind", "correlation")
    for rank_truth in truth["ranks"]:
        rank = rank_truth["rank"]
        blocking = [s for s in rank_truth["syncs"]
                    if s["kind"] == "Stream Sync" and s["gpu_done_at"] > s["runtime_start"]]
        assert len(blocking) == 3
        for sync in blocking:
            call_end = sync["runtime_start"] + sync["runtime_dur"]
            wait = path.filter((pl.col("rank") == rank) & (pl.col("category") == "sync_wait")
                               & (pl.col("end_ns") == call_end))
            assert wait.height == 1 and wait["start_ns"][0] == sync["gpu_done_at"]
            before = path.filter((pl.col("rank") == rank) & (pl.col("step") == wait["step"][0])
                                 & (pl.col("position") == wait["position"][0] - 1)).row(0, named=True)
            gpu = events.filter((pl.col("rank") == rank) & (pl.col("id") == before["event_id"])).row(0, named=True)
            assert gpu["kind"] in ("kernel", "memcpy", "memset") and gpu["correlation"] == sync["signal_correlation"]
            assert before["end_ns"] == sync["gpu_done_at"]


def test_sheet_summaries_add_up_to_the_path_segment_by_segment(walked):
    """critical_path_categories / _steps / _top are computed here again from the segments, in polars."""
    path, categories, steps, top = (walked[name] for name in (
        "critical_path", "critical_path_categories", "critical_path_steps", "critical_path_top"))
    for rank, segments in path.group_by("rank"):
        rank = rank[0]
        expected = dict(segments.group_by("category").agg(pl.col("duration_ns").sum()).iter_rows())
        got = categories.filter(pl.col("rank") == rank)
        assert {c: round(t * 1e6) for c, t in got.select("category", "time_ms").iter_rows()} == expected
        assert got["percent"].sum() == pytest.approx(100.0)
        windows = segments.group_by("step", "window_start_ns", "window_end_ns").agg(
            [pl.col("duration_ns").filter(pl.col("category") == c).sum().alias(c) for c in CATEGORIES])
        lines = steps.filter(pl.col("rank") == rank)
        assert lines.height == windows.height
        for w in windows.iter_rows(named=True):
            line = lines.filter(pl.col("step").eq_missing(w["step"])).row(0, named=True)
            assert round(line["window_ms"] * 1e6) == w["window_end_ns"] - w["window_start_ns"]
            assert all(round(line[f"{c}_ms"] * 1e6) == w[c] for c in CATEGORIES)
        names = top.filter(pl.col("rank") == rank)
        assert names.height <= 51
        assert round(names["time_ms"].sum() * 1e6) == segments["duration_ns"].sum()
        longest = (segments.with_columns(name=pl.col("name").fill_null("(no event)")
                                         .str.replace(r"^ProfilerStep#\d+$", "ProfilerStep#N"))
                   .group_by("name", "kind", "category").agg(pl.col("duration_ns").sum())
                   .sort("duration_ns", "name", "kind", "category", descending=[True, False, False, False]).head(5))
        shown = names.head(5)
        assert shown.select("name", "kind", "category").rows() == longest.select("name", "kind", "category").rows()
        assert [round(t * 1e6) for t in shown["time_ms"]] == longest["duration_ns"].to_list()
        counted = (segments.with_columns(name=pl.col("name").fill_null("(no event)")
                                         .str.replace(r"^ProfilerStep#\d+$", "ProfilerStep#N"))
                   .group_by("name", "kind", "category")
                   .agg(segments=pl.len(), events=pl.col("event_id").drop_nulls().n_unique(),
                        steps=pl.col("window_start_ns").n_unique()))
        # every named row, and the rest's: the events and steps of overlapping windows are counted once (the
        # query subtracts an event's repeats in several windows; n_unique here)
        named = names.filter(pl.col("name") != "(other events)")
        rows = named.join(counted, on=["name", "kind", "category"], nulls_equal=True, suffix="_expected")
        assert rows.height == named.height
        for column in ("segments", "events", "steps"):
            assert rows[column].to_list() == rows[f"{column}_expected"].to_list(), column
        rest = counted.join(named, on=["name", "kind", "category"], how="anti", nulls_equal=True)
        other = names.filter(pl.col("name") == "(other events)")
        assert other.height == (1 if rest.height else 0)
        if rest.height:
            assert (other["segments"][0], other["events"][0], other["steps"][0]) == (
                rest["segments"].sum(), rest["events"].sum(), rest["steps"].max())


def test_the_walk_fits_a_small_memory_limit(monkeypatch):
    """The walk needs memory in proportion to the trace whatever plan DuckDB picks: with DuckDB 2.0.1 the plan
    once paired every two events by start time before matching edges by id (tens of GB on this 35 MB trace)."""
    monkeypatch.setenv("TRACEKIT_MEMORY_LIMIT", "256MB")
    tables = tracekit.load(shared_trace("diff_pairs/resnet50_v100_workers0_vs_workers4/workers0.pt.trace.json.gz"))
    path = analyses.run(tables, "critical_path")
    steps = analyses.run(tables, "steps")
    assert path["step"].n_unique() == steps.height == 6
    assert path["duration_ns"].sum() == (path.group_by("step").agg(
        pl.col("window_end_ns").first() - pl.col("window_start_ns").first())["window_end_ns"].sum())


def test_a_thread_of_python_frames_alone_neither_bounds_nor_starts_the_path():
    """vLLM's usage reporter (and a tqdm monitor) wait on threads of their own whose Python frames last until the
    profiler stops them: on the MI300X decode capture trace the whole path was that thread's 59 ms of waiting (20
    segments). The window and the walk's start leave such a thread out; the path is the main thread's work."""
    tables = tracekit.load(shared_trace("amd/mi300x_vllm_decode_graph_capture.json.gz"))
    events = pl.from_arrow(tables.events).filter(pl.col("ts").is_not_null())
    threads = events.group_by("rank", "pid", "tid").agg(frames_only=(pl.col("kind") == "python_function").all())
    waiting = threads.filter("frames_only")
    assert waiting.height == 1 and threads.height > 1
    work = (events.join(waiting, on=["rank", "pid", "tid"], how="anti")
            .filter(pl.col("kind").is_in(["cpu_op", "user_annotation", "python_function", "runtime", "driver",
                                          "overhead", "kernel", "memcpy", "memset"])))
    path = analyses.run(tables, "critical_path")
    assert path["window_start_ns"].unique().to_list() == [work["ts"].min()]
    assert path["window_end_ns"].unique().to_list() == [(work["ts"] + work["dur"].fill_null(0)).max()]
    on_path = path.join(events.select("rank", pl.col("id").alias("event_id"), "pid", "tid"), on=["rank", "event_id"])
    assert on_path.join(waiting, on=["rank", "pid", "tid"], how="semi").is_empty()
    assert path.height > 1000 and path["duration_ns"].sum() == path["window_end_ns"][0] - path["window_start_ns"][0]


def test_a_gpu_op_free_to_start_waits_at_most_25_us_else_the_wait_is_unexplained(tables, walked):
    """Every GPU op's wait on the path for its launch, its stream or an op it waited on is at most 25 µs; longer
    ones are unexplained_gpu_wait, each carried by the GPU op that starts where it ends; so is the time before an
    op with no predecessor in the trace (no launch call found, the first on its stream: the edges say so), back
    to the window start, where the path was idle before."""
    path = walked["critical_path"]
    gpu_waits = path.filter(pl.col("category").is_in(GPU_WAITS) & (pl.col("carried_by") == "gpu"))
    assert gpu_waits.filter(pl.col("duration_ns") > 25_000).is_empty()
    unexplained = path.filter(pl.col("category") == "unexplained_gpu_wait")
    assert (unexplained["carried_by"] == "gpu").all()
    assert (unexplained["kind"].is_in(["kernel", "memcpy", "memset"])).all()
    ops = pl.from_arrow(tables.events).select("rank", pl.col("id").alias("event_id"), "ts")
    assert unexplained.join(ops, on=["rank", "event_id"]).filter(pl.col("end_ns") != pl.col("ts")).is_empty()
    waited = (pl.from_arrow(tables.edges)
              .filter(pl.col("kind").is_in(["launch", "stream", "sync", "stream_wait_inferred"]))
              .select("rank", pl.col("dst").alias("event_id")).unique())
    alone = unexplained.join(waited, on=["rank", "event_id"], how="anti")
    assert (alone["start_ns"] == alone["window_start_ns"]).all()
    held = unexplained.join(waited, on=["rank", "event_id"], how="semi")  # whole, or cut at the window start
    assert ((held["duration_ns"] > 25_000) | (held["start_ns"] == held["window_start_ns"])).all()
    idle = path.filter(pl.col("category") == "idle")
    gpu_ops = pl.from_arrow(tables.events).filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    after_idle = path.join(idle.select("rank", "step", position=pl.col("position") + 1),
                           on=["rank", "step", "position"], nulls_equal=True)
    assert after_idle.join(gpu_ops.select("rank", event_id="id"), on=["rank", "event_id"]).is_empty()


def test_waits_over_25_us_with_nothing_in_the_trace_holding_the_op_are_unexplained(tmp_path):
    """One op launches four kernels at once (µs): k1 starts 25 µs after its launch returned (launch, the bound),
    k2 3 µs after k1 (a gap between kernels), k3 30 µs after k2 with its launch long returned (unexplained), k4 24 µs
    after k3 (a gap): the path from k4 back through the stream, each wait labelled by its length."""
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::foo", "pid": 1, "tid": 1, "ts": 0, "dur": 10}]
    for i, start in enumerate([27, 40, 80, 114]):
        events += [launch(1 + 2 * i, i + 1), kernel(start, 10, i + 1)]
    trace = tmp_path / "rank0.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    path = analyses.run(tracekit.load(trace), "critical_path")
    got = [(r["name"], r["category"], r["duration_ns"] // 1000) for r in path.iter_rows(named=True)
           if r["carried_by"] == "gpu"]
    assert got == [("k1", "launch", 25), ("k1", "compute", 10), ("k2", "kernel_to_kernel_gap", 3),
                   ("k2", "compute", 10), ("k3", "unexplained_gpu_wait", 30), ("k3", "compute", 10),
                   ("k4", "kernel_to_kernel_gap", 24), ("k4", "compute", 10)]


def test_the_first_op_of_a_sliced_serving_trace_waits_on_work_the_trace_does_not_hold():
    """The MI300X vLLM decode replay is a slice of a served run: its first GPU op, a hipMemcpyAsync's copy, starts
    7.8 ms after the call returned, nothing of the trace on the GPU before it. That time was 41% of the path as
    launch; it is unexplained_gpu_wait, from the call's end to the copy's start (read off the events)."""
    tables = tracekit.load(shared_trace("amd/mi300x_vllm_decode_graph_execution.json.gz"))
    events = pl.from_arrow(tables.events)
    gpu = events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    first = gpu.sort("ts").row(0, named=True)
    launches = pl.from_arrow(tables.edges).filter((pl.col("kind") == "launch") & (pl.col("dst") == first["id"]))
    call = events.filter(pl.col("id") == launches["src"][0]).row(0, named=True)
    path = analyses.run(tables, "critical_path")
    waits = path.filter(pl.col("category") == "unexplained_gpu_wait")
    assert waits.select("event_id", "start_ns", "end_ns").rows() == [
        (first["id"], call["ts"] + call["dur"], first["ts"])]
    assert first["ts"] - (call["ts"] + call["dur"]) > 7_000_000
    assert path.filter(pl.col("category") == "launch").is_empty()
