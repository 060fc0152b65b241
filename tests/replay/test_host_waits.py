"""Replay where the host waited for the GPU (sync and sync_inferred edges) or for another thread, against synth
ground truth, hand-worked times and the step-containment invariant on real traces."""

from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import pytest

from tests.conftest import shared_trace
from tracekit import schema
from tracekit.engine import catalog
from tracekit.pipeline import load
from tracekit.replay import replay, retimed_tables

HOST, GPU = {"pid": 1, "tid": 1}, {"pid": 0, "tid": 7}


def x(cat, name, ts, dur, where, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **where, "args": args}


def with_edges(tables, edges: pl.DataFrame, drop: tuple[str, ...] = ("sync_inferred",)):
    """`tables` with its `drop` edges replaced by `edges` (rank, src, dst, kind)."""
    kept = pl.from_arrow(tables.edges).filter(~pl.col("kind").is_in(drop))
    return tables.with_tables(edges=schema.conform("edges", pl.concat([kept, edges], how="diagonal_relaxed")
                                                   .to_arrow()))


def inferred_syncs(tables) -> pl.DataFrame:
    """A tiny inference of our own (the edges pass is another's): each *Synchronize call waited for the GPU op of
    its rank that ended last before the call returned, if that op ended after the call started."""
    events = pl.from_arrow(tables.events)
    calls = (events.filter(pl.col("kind") == "runtime", pl.col("name").str.contains("Synchronize"))
             .select("rank", dst="id", call_ts="ts", call_end=pl.col("ts") + pl.col("dur")).sort("call_end"))
    ops = (events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
           .select("rank", src="id", op_end=pl.col("ts") + pl.col("dur")).sort("op_end"))
    waited = calls.join_asof(ops, left_on="call_end", right_on="op_end", by="rank", check_sortedness=False)
    return (waited.filter(pl.col("op_end") > pl.col("call_ts"))
            .select("rank", "src", "dst", kind=pl.lit("sync_inferred"), lag=pl.col("call_ts") - pl.col("op_end")))


def synth(out, *args):
    subprocess.run([sys.executable, "-m", "tracekit.cli", "synth", "-o", str(out), "--ranks", "1", "--steps", "3",
                    *args], check=True, stdout=subprocess.DEVNULL)
    return out


def without_sync_events(folder, out):
    """The synth capture as a profiler without enable_cuda_sync_events would have written it."""
    doc = json.loads((folder / "rank0.json").read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "cuda_sync"]
    out.write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize("noise", [0, 0.05])
def test_halving_gemms_moves_the_host_where_it_waited_as_synth_captures_it(tmp_path, noise):
    """Synth's step ends in a cudaStreamSynchronize that waits for the GPU. Without its cuda_sync events, a replay
    with gemm kernels halved predicts no change (the host keeps its measured wait); with the waits inferred it
    predicts the capture of the job with gemms halved (synth --slow-kernel gemm=0.5: the ground truth)."""
    base = synth(tmp_path / "base", "--noise", str(noise))
    truth = replay(load(synth(tmp_path / "fast", "--noise", str(noise), "--slow-kernel", "gemm=0.5")))
    tables = load(without_sync_events(base, tmp_path / "nosync.json"))
    bare = with_edges(tables, pl.DataFrame(schema=tables.polars("edges").schema))
    inferred = with_edges(tables, inferred_syncs(tables))
    assert inferred_syncs(tables).height >= 3  # one stream sync per step at least

    unchanged = replay(bare, scale={"kernel:gemm": 0.5})
    assert (unchanged["predicted_ms"] == unchanged["measured_ms"]).all()
    predicted = replay(inferred, scale={"kernel:gemm": 0.5})
    # the output says the prediction rests on inference: each step's stream sync is held by an inferred wait
    assert (predicted["inferred_waits"] >= unchanged["inferred_waits"] + 1).all(), (predicted, unchanged)
    error = (predicted["predicted_ms"] / truth["measured_ms"] - 1).abs()
    assert (error <= (1e-6 if noise == 0 else 0.03)).all(), (predicted, truth)
    assert (predicted["predicted_ms"] < 0.9 * predicted["measured_ms"]).all()


def test_recorded_and_inferred_sync_edges_replay_alike(tmp_path):
    base = synth(tmp_path / "base")
    recorded = replay(load(base), scale={"category:computation": 0.5})
    tables = load(without_sync_events(base, tmp_path / "nosync.json"))
    inferred = replay(with_edges(tables, inferred_syncs(tables)), scale={"category:computation": 0.5})
    assert inferred["predicted_ms"].to_list() == pytest.approx(recorded["predicted_ms"].to_list(), rel=1e-6)


# A blocking copy (µs): cudaMemcpy 10-60 launches its copy, which runs 20-58; the call returns 2 µs after it; aten::add
# runs 65-75 on the host; the step ends at 100. The call waited for its own op: launch and wait make a cycle unless
# the op starts from the call's start.
BLOCKING_COPY = {"traceEvents": [
    x("user_annotation", "ProfilerStep#1", 0, 100, HOST),
    x("cpu_op", "aten::copy_", 5, 57, HOST),
    x("cuda_runtime", "cudaMemcpy", 10, 50, HOST, correlation=1),
    x("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 20, 38, GPU, correlation=1, stream=7, device=0),
    x("cpu_op", "aten::add", 65, 10, HOST),
]}


@pytest.mark.parametrize(("factor", "expected_us"), [
    (1, 100),
    # copy 20-96, the call returns at 98 (+2), aten::copy_ at 100, aten::add 103-113, step 138
    (2, 138),
    # copy 20-39, the call returns at 41, aten::copy_ at 43, step 81
    (0.5, 81),
])
def test_a_call_waiting_for_its_own_copy_moves_with_it(tmp_path, factor, expected_us):
    path = tmp_path / "copy.json"
    path.write_text(json.dumps(BLOCKING_COPY))
    tables = load(path)
    events = tables.polars("events")
    ids = dict(zip(events["name"], events["id"]))
    wait = pl.DataFrame({"rank": [0], "src": [ids["Memcpy DtoH (Device -> Pageable)"]], "dst": [ids["cudaMemcpy"]],
                         "kind": ["sync_inferred"]})
    rows = replay(with_edges(tables, wait), scale={"kernel:memcpy": factor})
    assert rows["predicted_ms"][0] == pytest.approx(expected_us / 1000)


# Each step member's end and its step's end (host events on every thread; GPU ops by their launch).
MEMBERS_SQL = """
select m.rank, m.id, m.step, e.kind in ('kernel', 'memcpy', 'memset') as is_gpu, e.ts + coalesce(e.dur, 0) as end_ns,
       w.end_ns as step_end_ns
from step_members() m
join events e on e.rank = m.rank and e.id = m.id and e.kind not in ('gpu_annotation', 'sync')
join step_or_trace_windows() w on w.rank = m.rank and w.step = m.step
"""


def members(tables) -> pl.DataFrame:
    with catalog.connect(tables) as con:
        catalog.prepare(con, MEMBERS_SQL)
        return con.sql(MEMBERS_SQL).pl()


@pytest.mark.parametrize(("trace", "what_if", "gpu_keeps_up"), [
    # the backward pass runs on the autograd thread; without a recorded edge between the threads the predicted
    # step used to end with up to 432 ms of backward ops and their kernels still to run. CPU-bound steps: the GPU
    # keeps up with the faster host.
    ("diff_pairs/resnet50_v100_workers0_vs_workers4/workers0.pt.trace.json.gz",
     {"remove": ["op:enumerate(DataLoader)"]}, True),
    ("diff_pairs/resnet50_v100_workers0_vs_workers4/workers4.pt.trace.json.gz",
     {"remove": ["op:enumerate(DataLoader)"]}, True),
    # GPU-bound, the host hardly waits for the GPU: a faster host leaves the GPU further behind (as it would run)
    ("amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz", {"scale": {"cpu:": 0.5}}, False),
    ("nvidia/a100_nccl_rank0of2.json.gz", {"scale": {"op:": 0.5}}, False),
])
def test_the_predicted_step_contains_the_work_the_measured_step_did(trace, what_if, gpu_keeps_up):
    """Step containment: the step's host work (any thread) that ended inside the measured step ends inside the
    predicted one; where the GPU keeps up, its GPU work too, and what ran past the measured step runs past the
    predicted one by no more."""
    tables = load(shared_trace(trace))
    joined = members(tables).join(members(retimed_tables(tables, **what_if)), on=["rank", "id", "step", "is_gpu"],
                                  suffix="_predicted")
    assert joined.height > 0 and joined["step"].n_unique() >= 2
    inside = joined.filter(pl.col("end_ns") <= pl.col("step_end_ns"), ~pl.col("is_gpu") | gpu_keeps_up)
    late = inside.filter(pl.col("end_ns_predicted") > pl.col("step_end_ns_predicted"))
    assert late.is_empty(), late
    if gpu_keeps_up:
        past = joined.group_by("step").agg((pl.col("end_ns") - pl.col("step_end_ns")).max().clip(lower_bound=0),
                                           (pl.col("end_ns_predicted") - pl.col("step_end_ns_predicted")).max())
        assert (past["end_ns_predicted"] <= past["end_ns"] + 1000).all(), past
