"""thread_wait_inferred edges (queries/link/thread_wait_inferred_edges.sql) on hand-made traces whose waits are
worked out by hand, and the critical path that follows them."""

from __future__ import annotations

import json
import random

import polars as pl
import pytest

import tracekit
from tracekit.query import analyses


def op(name, ts, dur, tid, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def load(tmp_path, events) -> tracekit.TraceTables:
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return tracekit.load(path)


def thread_waits(tables) -> set[tuple[str, str, str, int]]:
    names = dict(tables.polars("events").select("id", "name").iter_rows())
    edges = tables.polars("edges").filter(pl.col("kind") == "thread_wait_inferred")
    return {(names[s], names[d], k, lag) for s, d, k, lag in edges.select("src", "dst", "subkind", "lag").iter_rows()}


# The main thread (1) runs `forward` until 100 µs and enters `run_backward`, which returns at 5,080 µs; the autograd
# thread (2) starts `backward_a` 50 µs after run_backward's start (its first point: the lag alone decides) and ends
# `backward_b` at 5,000 µs, 80 µs before run_backward returns (main thread idle 4,980 µs inside it: gap/10 = 498 µs).
# The main thread's `optimizer` then starts 1,500 µs after the autograd thread's last point: beyond 1 ms, no edge; a
# third thread's `logger` starts 600 µs after `optimizer`'s end, its thread idle 5,300 µs: 600 > 530, no edge.
TRACE = [
    op("ProfilerStep#1", 0, 9000, 1, cat="user_annotation"),
    op("forward", 0, 100, 1),
    op("run_backward", 100, 4980, 1),
    op("backward_a", 150, 2000, 2),
    op("backward_b", 2150, 2850, 2),
    op("optimizer", 6500, 100, 1),
    op("logger_first", 1300, 10, 3),
    op("logger", 7200, 10, 3),
]


def test_a_thread_that_resumed_just_after_another_thread_waited_for_it(tmp_path):
    tables = load(tmp_path, TRACE)
    assert thread_waits(tables) == {
        ("run_backward", "backward_a", "start_start", 50_000),
        ("backward_b", "run_backward", "end_end", 80_000),
    }


def test_the_critical_path_follows_the_wait_to_the_other_thread(tmp_path):
    """Without the edges the walk would take run_backward's 4,980 µs as its own CPU time; with them it runs
    through backward_a and backward_b on the autograd thread, and only the hand-overs are waits (inferred): the
    autograd thread's 50 µs from run_backward's start to backward_a's, run_backward's 80 µs return."""
    path = analyses.run(load(tmp_path, TRACE), "critical_path")
    by_event = path.group_by("name", "category", "inferred").agg(pl.col("duration_ns").sum())
    rows = {(n, c, i): d for n, c, i, d in by_event.iter_rows()}
    assert rows["backward_a", "cpu", False] == 2_000_000
    assert rows["backward_b", "cpu", False] == 2_850_000
    assert rows["backward_a", "sync_wait", True] == 50_000
    assert rows["run_backward", "sync_wait", True] == 80_000
    assert ("run_backward", "cpu", False) not in rows
    assert rows["forward", "cpu", False] == 100_000
    assert path["duration_ns"].sum() == 9_000_000


def test_a_wait_across_time_zero(tmp_path):
    """Thread 1 idles 1,100 µs from -900 µs (`a`, zero length) to 200 µs (`b`); thread 2's `c` ends 100 µs before `b`
    starts (lag 100 µs <= gap/10 = 110 µs): `b` waited for `c`'s end. The query's 1 ms buckets must floor negative
    times (truncated, -900 µs and 200 µs would share a bucket and `b` would not look like a thread waking up)."""
    events = [op("c", -2000, 2100, 2), op("a", -900, 0, 1), op("b", 200, 10, 1)]
    assert thread_waits(load(tmp_path, events)) == thread_waits_oracle(events) == {("c", "b", "end_start", 100_000)}


def thread_waits_oracle(events: list[dict]) -> set[tuple[str, str, str, int]]:
    """The rule of the query's header, point by point in Python: every point in the rank's time order (t, ends
    before starts, then entry order); a point whose thread had no point for ≥ 1 ms (or its thread's first) waited
    for the point just before it when that one is on another thread, at most min(1 ms, gap / 10) earlier."""
    points = sorted(((e["ts"] * 1000 + (e["dur"] * 1000 if end else 0), not end, i, end, e["tid"], e["name"])
                     for i, e in enumerate(events) for end in (False, True)))
    last_on_thread: dict[int, int] = {}
    waits = set()
    for before, point in zip([None] + points[:-1], points):
        t, _, _, is_end, tid, name = point
        gap = t - last_on_thread[tid] if tid in last_on_thread else None
        last_on_thread[tid] = t
        if before is None or before[4] == tid or (gap is not None and gap < 1_000_000):
            continue
        lag = t - before[0]
        if lag <= 1_000_000 and (gap is None or lag * 10 <= gap):
            waits.add((before[5], name, f"{'end' if before[3] else 'start'}_{'end' if is_end else 'start'}", lag))
    return waits


@pytest.mark.parametrize("seed, grid, start", [(3, 500, 0), (5, 250, 0), (7, 250, -3_000), (11, 125, 1_000_001)])
def test_thread_waits_against_the_rule_point_by_point_with_ties(tmp_path, seed, grid, start):
    """Random events on three threads, on a coarse grid (µs) so that points tie (zero durations too): ties are where
    the order of the points (t, ends first, entry order) decides which point a wait follows. The query looks for a
    wait's point in 1 ms buckets: the grids put points on and beside the buckets' bounds, before time 0 too."""
    rng = random.Random(seed)
    events = []
    for tid in (1, 2, 3):
        ts = start + rng.randrange(0, 3) * grid
        for _ in range(60):
            dur = rng.choice([0, 1, 2, 3]) * grid
            events.append(op(f"t{tid}_{len(events)}", ts, dur, tid))
            ts += dur + rng.choice([0, 0, 1, 2, 3, 6, 24]) * grid
    rng.shuffle(events)
    expected = thread_waits_oracle(events)
    assert len(expected) >= 10  # the grid makes waits, and ties among them
    assert thread_waits(load(tmp_path, events)) == expected
