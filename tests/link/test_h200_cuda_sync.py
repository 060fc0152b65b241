"""Sync edges on the H200 training trace (tests/data/gpu/kineto_train.json.gz, PyTorch 2.11 + CUDA 13): every
Stream Wait Event names no record (-1; the record call is cudaEventRecordWithFlags), so the record is taken by thread
order (queries/link/sync_records.sql). Oracle: what record.py's train_step does, read off the raw JSON."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import polars as pl

import tracekit
from tracekit.link import edges
from tests.support import raw_trace

TRACE = Path(__file__).parents[1] / "data" / "gpu" / "kineto_train.json.gz"
GPU = set(raw_trace.GPU_CATS)


@functools.cache
def tables() -> tracekit.TraceTables:
    return tracekit.load(TRACE)


@functools.cache
def raw() -> raw_trace.RawTrace:
    return raw_trace.read(TRACE)


def within(outer: raw_trace.Event, e: raw_trace.Event) -> bool:
    return outer.tid == e.tid and outer.ts <= e.ts and e.end <= outer.end


def program_waits() -> set[tuple[int, int]]:
    """(op waited for, op that waited) of each Stream Wait Event, as train_step orders them: the side stream (the
    stream of the grad-norm kernels) waits on an event recorded on the main stream after backward, so its first op
    after the wait (a norm kernel) follows the last main-stream op queued before the wait; then the main stream waits
    for the side stream (wait_stream): its first op after (the optimizer's) follows the side stream's last op."""
    trace = raw()
    calls = {e.args["correlation"]: e for e in trace.events if e.cat in raw_trace.LAUNCH_CATS}
    ops = [(calls[g.args["correlation"]], g) for g in trace.events if g.cat in GPU]
    norms, optimizers = trace.named("aten::linalg_vector_norm"), trace.named("optimizer")
    side = {g.args["stream"] for call, g in ops if any(within(n, call) for n in norms)}
    assert len(side) == 1
    (side,) = side
    waits = sorted((e for e in trace.events if e.name == "Stream Wait Event"), key=lambda e: e.ts)
    assert len(waits) == 10 and all(w.args["wait_on_cuda_event_record_corr_id"] == -1 for w in waits)
    found = set()
    for first, second in zip(waits[::2], waits[1::2]):
        assert first.args["stream"] == side and second.args["stream"] != side
        for wait, awaited_side in ((first, False), (second, True)):
            call = calls[wait.args["correlation"]]
            before = [(c, g) for c, g in ops if c.ts < call.ts and (g.args["stream"] == side) == awaited_side]
            after = [(c, g) for c, g in ops if c.ts > call.ts and g.args["stream"] == wait.args["stream"]]
            src = max(before, key=lambda cg: (cg[0].ts, cg[1].ts))[1]
            launcher, dst = min(after, key=lambda cg: (cg[0].ts, cg[1].ts))
            scope = norms if wait is first else optimizers
            assert any(within(n, launcher) for n in scope)  # what the program queued next on the waiting stream
            assert dst.ts >= src.end  # the GPU honoured the wait
            found.add((src.position, dst.position))
    return found


def test_stream_waits_with_unnamed_records_resolve_to_what_the_program_waited_for():
    edges = tables().polars("edges").filter(pl.col("subkind") == "Stream Wait Event (record inferred)")
    assert edges["kind"].unique().to_list() == ["sync"]
    assert set(edges.select("src", "dst").iter_rows()) == program_waits()


def test_no_sync_is_left_unresolved_and_nothing_blames_old_libkineto():
    notes = tables().polars("diagnostics").filter(pl.col("reason").str.starts_with("sync_"))
    assert notes.height == 0
    syncs = tables().polars("events").filter(pl.col("kind") == "sync")
    by_sync = tables().polars("edges").filter(pl.col("kind") == "sync")
    # every recorded sync gave an edge: 10 Stream Sync, 6 Context Sync (two streams each), 10 Stream Wait Event
    assert syncs.height == 26 and by_sync.height == 10 + 6 * 2 + 10


def test_sync_inferred_names_the_op_every_blocking_recorded_sync_waited_for():
    """Stream Sync (the .item() calls) and Context Sync (torch.cuda.synchronize) read off the raw events: the op a
    blocking call waited for is the last-ending op, among those launched before the call on its stream (the device's
    streams for a Context Sync), that ended while the call ran. The sync_inferred pass, run as if no sync event were
    recorded, must name that op (or one ending with it), and nothing for the calls that did not block."""
    trace = raw()
    calls = {e.args["correlation"]: e for e in trace.events if e.cat in raw_trace.LAUNCH_CATS}
    ops = [(calls[g.args["correlation"]], g) for g in trace.events if g.cat in GPU]
    expected, not_blocking = {}, set()
    for sync in (e for e in trace.events if e.cat == "cuda_sync" and e.name in ("Stream Sync", "Context Sync")):
        call = calls[sync.args["correlation"]]
        waited = [g for c, g in ops if c.ts < call.ts and (sync.name == "Context Sync"
                                                         or g.args["stream"] == sync.args["stream"])]
        inside = [g for g in waited if call.ts < g.end <= call.end]
        if inside:
            expected[call.position] = max(g.end for g in inside)
        else:
            not_blocking.add(call.position)
    assert len(expected) == 10 and len(not_blocking) == 6
    ends = {e.position: e.end for e in trace.events}
    inferred = pl.from_arrow(edges.inferred_edges(tables(), recorded_first=False)).filter(
        pl.col("kind") == "sync_inferred")
    got = {dst: ends[src] for src, dst in inferred.select("src", "dst").iter_rows()}
    assert {dst: got.get(dst) for dst in expected} == expected
    assert not_blocking.isdisjoint(got)


def wait_trace(path: Path, waiter_start: float) -> Path:
    """A kernel A on stream 7 (ts 10-40 µs), launched by thread 1, which then records an event
    (cudaEventRecordWithFlags) and makes stream 21 wait on it, the Stream Wait Event naming no record (-1), and
    launches kernel B on stream 21, starting at `waiter_start`."""
    def call(name, ts, corr, dur=1.0):
        return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                "args": {"correlation": corr}}

    def kernel(name, ts, dur, stream, corr):
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                "args": {"device": 0, "stream": stream, "correlation": corr}}

    events = [call("cudaLaunchKernel", 1, 1), kernel("A", 10, 30, 7, 1),
              call("cudaEventRecordWithFlags", 3, 2), call("cudaStreamWaitEvent", 5, 3),
              {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 21, "ts": 5.5, "dur": 1,
               "args": {"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": -1,
                        "wait_on_cuda_event_record_corr_id": -1, "wait_on_cuda_event_id": 9, "stream": 21,
                        "correlation": 3, "device": 0}},
              call("cudaLaunchKernel", 7, 4), kernel("B", waiter_start, 5, 21, 4)]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_a_wait_naming_no_record_resolves_by_thread_order_unless_the_timing_refutes_it(tmp_path):
    for label, start in (("held", 41.0), ("refuted", 20.0)):
        loaded = tracekit.load(wait_trace(tmp_path / f"{label}.json", start))
        events = loaded.polars("events")
        names = dict(events.select("id", "name").iter_rows())
        edges_ = loaded.polars("edges").filter(pl.col("kind") == "sync")
        notes = loaded.polars("diagnostics").filter(pl.col("reason").str.starts_with("sync_"))
        if label == "held":  # B started after A ended: the wait held B back
            assert [(names[s], names[d], k) for s, d, k in edges_.select("src", "dst", "subkind").iter_rows()] == [
                ("A", "B", "Stream Wait Event (record inferred)")]
            assert notes.height == 0
        else:  # B ran while A did: the event was not recorded after A on stream 7
            assert edges_.height == 0
            assert notes["reason"].to_list() == ["sync_record_inferred_refuted"]
