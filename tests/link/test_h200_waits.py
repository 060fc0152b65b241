"""Event waits whose record the trace does not name, on the H200 trace tests/data/gpu/waits.json.gz (record.py's
waits_trace: PyTorch 2.11 + CUDA 13 record events with cudaEventRecordWithFlags, so every Event Sync and Stream Wait
Event names no record). Per step the program does, on streams main, side and other:

    x @ x (main); e1.record() on main; side.wait_event(e1); x[:64] * 2 on side   -> side's op waits for main's matmul
    x @ x on other; e2.record(other); x + 1 (main); e3.record(other)             -> e3 is on other, not main
    main.wait_event(e3); x * 3 (main)                                            -> main's op waits for other's matmul
    e2.synchronize()                                                             -> the host waits for other's matmul

Thread order names the right record for e1 but not for e3 or e2 (the thread last launched on main): those must be
refuted by the timing and judged by it, not turned into edges to the wrong op. The oracle is the program above, read
off the raw JSON by stream and order."""

from __future__ import annotations

import functools
from pathlib import Path

import polars as pl

import tracekit
from tests.support import raw_trace

TRACE = Path(__file__).parents[1] / "data" / "gpu" / "waits.json.gz"


@functools.cache
def tables() -> tracekit.TraceTables:
    return tracekit.load(TRACE)


def program_waits() -> dict[str, set[tuple[int, int]]]:
    """(waited op, waiter) per wait of the program, by raw position (events.id)."""
    trace = raw_trace.read(TRACE)
    kernels = sorted((e for e in trace.events if e.cat == "kernel"), key=lambda e: e.ts)
    syncs = sorted((e for e in trace.events if e.name == "cudaEventSynchronize"), key=lambda e: e.ts)
    gemms = [k for k in kernels if "gemm" in k.name]
    main, other = gemms[0].args["stream"], {g.args["stream"] for g in gemms} - {gemms[0].args["stream"]}
    (other,) = other
    side = {k.args["stream"] for k in kernels} - {main, other}
    (side,) = side
    steps = len(syncs)
    main_gemms = [g for g in gemms if g.args["stream"] == main]
    other_gemms = [g for g in gemms if g.args["stream"] == other]
    side_ops = [k for k in kernels if k.args["stream"] == side]
    # main's ops per step: matmul, x + 1, x * 3
    main_ops = [k for k in kernels if k.args["stream"] == main]
    assert len(main_gemms) == len(other_gemms) == len(side_ops) == steps and len(main_ops) == 3 * steps
    return {
        "side waits for main": {(main_gemms[i].position, side_ops[i].position) for i in range(steps)},
        "main waits for other": {(other_gemms[i].position, main_ops[3 * i + 2].position) for i in range(steps)},
        "host waits for other": {(other_gemms[i].position, syncs[i].position) for i in range(steps)},
    }


def test_every_wait_ends_on_the_op_the_program_waited_for():
    edges = tables().polars("edges").filter(pl.col("kind").is_in(["sync", "sync_inferred", "stream_wait_inferred"]))
    pairs = set(edges.select("src", "dst").iter_rows())
    for wait, expected in program_waits().items():
        assert expected <= pairs, wait
    # nothing claims a wait on x + 1 (the op thread order would have taken for e2's and e3's record)
    trace = raw_trace.read(TRACE)
    adds = {e.position for e in trace.events if e.cat == "kernel" and "add" in e.name}
    assert len(adds) == len(program_waits()["host waits for other"])
    assert not adds & set(edges["src"].to_list())


def test_the_wrong_records_taken_by_thread_order_are_said_to_be_refuted():
    notes = tables().polars("diagnostics").filter(pl.col("reason").str.starts_with("sync_"))
    steps = len(program_waits()["host waits for other"])
    # per step: e2's Event Sync and e3's Stream Wait Event
    assert notes["reason"].to_list() == ["sync_record_inferred_refuted"] * 2 * steps
