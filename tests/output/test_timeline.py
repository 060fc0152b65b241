"""`tracekit timeline`: one Chrome-trace JSON of every rank that viewers show without dropping slices, whose flows
land inside their slices, and that tracekit reads back with the same events per rank."""

from __future__ import annotations

import bisect
import functools
import gzip
import itertools
import json
import re
from collections import defaultdict

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import shared_trace
from tests.support.gzip_files import gzip_header_name
from tests.trace_events import kernel, launch
from tracekit import synth
from tracekit.analyses import run
from tracekit.cli import main
from tracekit.engine import catalog
from tracekit.output.timeline import placed_slices, sub_track_of, write_timeline
from tracekit.pipeline import load

COMPARED = ["rank", "kind", "name", "ts", "dur", "device", "stream", "correlation", "external_id"]


def read(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


@functools.cache  # each time is read several times (its slice, its track's sweep, flow ends)
def micros_to_ns(value) -> int:
    """Exact: the file writes µs with three decimals."""
    whole, _, frac = repr(value).partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3]) if frac else int(whole) * 1000


def check_file(doc) -> dict:
    events = doc["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    by_track = defaultdict(list)
    for e in slices:
        by_track[e["pid"], e["tid"]].append((micros_to_ns(e["ts"]), micros_to_ns(e["ts"]) + micros_to_ns(e["dur"])))
    # each track's slices come in time order, enclosing slices first (the order the sub-tracks were swept in), and
    # no two of them overlap unless one holds the other
    for track, spans in by_track.items():
        assert spans == sorted(spans, key=lambda s: (s[0], -s[1])), f"track {track}'s slices out of time order"
        for i, (ts, end) in enumerate(spans):
            later = i + 1  # the slices starting before this one ends (an index: a slice of the list would copy it)
            while later < len(spans) and spans[later][0] < end:
                other_ts, other_end = spans[later]
                assert other_end <= end, f"slices overlap on track {track}: {(ts, end)} and {(other_ts, other_end)}"
                later += 1
    # flow ends: pairs with the same (id, cat, name), each inside a slice of its track: some slice starting at or
    # before the end reaches it, i.e. the latest stop among the slices starting by then (spans are sorted by start)
    starts = {track: [ts for ts, _ in spans] for track, spans in by_track.items()}
    latest_stop = {track: list(itertools.accumulate((stop for _, stop in spans), max))
                   for track, spans in by_track.items()}
    ends = defaultdict(dict)
    for e in events:
        if e["ph"] in ("s", "f"):
            ends[e["id"], e["cat"], e["name"]][e["ph"]] = e
    for flow, pair in ends.items():
        assert set(pair) == {"s", "f"}, f"flow {flow} has one end"
        for end in pair.values():
            at, track = micros_to_ns(end["ts"]), (end["pid"], end["tid"])
            started = bisect.bisect_right(starts.get(track, []), at)
            assert started and latest_stop[track][started - 1] >= at, f"flow {flow} {end['ph']} end lands in no slice"
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] in ("process_name", "thread_name")}
    check_flows_forward(events, ends)
    return {"flows": ends, "names": names, "slices": slices}


def innermost_slices(slices, points) -> dict:
    """For each (track, ns) in `points`: the innermost slice of that track whose closed interval holds the point
    (how Catapult binds a flow end: `findSliceAtTs`), or None when none does or when two slices that do not nest
    both hold it (a tie a viewer breaks its own way). A sweep in time order with a stack of open slices."""
    by_track = defaultdict(list)
    for e in slices:
        start = micros_to_ns(e["ts"])
        by_track[e["pid"], e["tid"]].append((start, start + micros_to_ns(e["dur"]), e))
    bound = {}
    wanted = defaultdict(set)
    for track, at in points:
        wanted[track].add(at)
    for track, times in wanted.items():
        spans = sorted(by_track.get(track, []), key=lambda s: (s[0], -s[1]))
        stack, i = [], 0
        for at in sorted(times):
            while i < len(spans) and spans[i][0] <= at:
                while stack and stack[-1][1] < spans[i][0]:
                    stack.pop()
                stack.append(spans[i])
                i += 1
            stack = [span for span in stack if span[1] >= at]  # one that ended where the next began is gone too
            nested = all(outer[0] <= inner[0] and inner[1] <= outer[1] for outer, inner in zip(stack, stack[1:]))
            bound[track, at] = stack[-1][2] if stack and nested else None
    return bound


def check_flows_forward(events, ends) -> None:
    """Every flow runs forward in time, its end binds to the slice enclosing it (bp "e"), each end lands in
    exactly one innermost slice, and along the critical path each end's slice is on the track the path runs on at
    that moment (read from the critical-path track, not from the code that placed the arrows)."""
    slices = [e for e in events if e["ph"] == "X"]
    points = [((end["pid"], end["tid"]), micros_to_ns(end["ts"])) for pair in ends.values() for end in pair.values()]
    # every critical-path track of each rank: thread 1 of its "rank R · critical path" process, and threads 2, ...
    # for windows that overlap
    path_process = {e["pid"]: int(e["args"]["name"].split()[1]) for e in events
                    if e["ph"] == "M" and e["name"] == "process_name" and e["args"]["name"].endswith("critical path")}
    # the path's runs of each rank, in time: runs tile their window, so a moment on the boundary of two (the end
    # of a zero-length op, say) is in both
    path_runs = defaultdict(list)
    for e in slices:
        if e["pid"] in path_process:
            start = micros_to_ns(e["ts"])
            path_runs[path_process[e["pid"]]].append((start, start + micros_to_ns(e["dur"]), e["args"]["track"]))
    bound = innermost_slices(slices, points)
    track_names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
                   if e["ph"] == "M" and e["name"] == "thread_name"}
    for flow, pair in ends.items():
        start, end = pair["s"], pair["f"]
        assert end.get("bp") == "e", f"flow {flow} ends without binding to its enclosing slice"
        assert micros_to_ns(end["ts"]) >= micros_to_ns(start["ts"]), f"flow {flow} runs backward in time"
        for point in (start, end):
            at = micros_to_ns(point["ts"])
            held_by = bound[(point["pid"], point["tid"]), at]
            assert held_by is not None, f"flow {flow} {point['ph']} end is in no single innermost slice"
            if flow[1] == "critical_path":
                on_path = [track for start, stop, track in path_runs[held_by["args"]["rank"]] if start <= at <= stop]
                # a sub-track's name is its track's and " · N"
                held_on = re.sub(r" · \d+$", "", track_names[point["pid"], point["tid"]])
                assert held_on in on_path, \
                    f"flow {flow} {point['ph']} end is bound to a slice on {held_on!r}, the path is on {on_path!r}"


def same_events(original, round_trip):
    kinds = ["kernel", "memcpy", "memset", "cpu_op", "runtime"]
    a = pl.from_arrow(original.events).filter(pl.col("kind").is_in(kinds) & pl.col("ts").is_not_null())
    b = pl.from_arrow(round_trip.events).filter(pl.col("kind").is_in(kinds))
    a, b = a.select(COMPARED).sort(COMPARED, nulls_last=True), b.select(COMPARED).sort(COMPARED, nulls_last=True)
    assert a.height == b.height
    assert a.equals(b)


def test_sub_tracks_keep_nesting_and_split_overlaps():
    # nests: a child inside; a slice crossing its parent's end goes to a second sub-track
    assert sub_track_of([0, 2, 6, 12], [10, 5, 12, 13], nests=True) == [0, 0, 1, 0]
    # GPU: nothing nests, a slice starting at another's end shares its sub-track
    assert sub_track_of([0, 2, 5, 10], [10, 5, 7, 11], nests=False) == [0, 1, 1, 0]


def reference_sub_tracks(rows: list[tuple[int, int]], nests: bool) -> list[int]:
    """The rule as stated, slice by slice: the first sub-track whose open slices have all ended by the slice's start
    or (nesting) whose innermost still open slice contains it; else a new one."""
    tracks: list[list[tuple[int, int]]] = []  # the slices placed on each sub-track so far
    placed = []
    for ts, end in rows:
        for lane, slices in enumerate(tracks):
            still_open = [(s, e) for s, e in slices if e > ts]
            innermost = max(still_open, key=lambda se: (se[0], -se[1]), default=None)
            if innermost is None or (nests and end <= innermost[1]):
                break
        else:
            lane = len(tracks)
            tracks.append([])
        tracks[lane].append((ts, end))
        placed.append(lane)
    return placed


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 25)), max_size=40), st.booleans())
def test_sub_tracks_follow_the_rule_on_any_slices(spans, nests):
    rows = sorted(((ts, ts + length) for ts, length in spans), key=lambda row: (row[0], -row[1]))
    assert sub_track_of([ts for ts, _ in rows], [end for _, end in rows], nests) == reference_sub_tracks(rows, nests)


def test_round_trip_synth_all_ranks(tmp_path):
    synth.generate(tmp_path / "in", ranks=3, steps=2, seed=2)
    tables = load([tmp_path / "in"])
    out = tmp_path / "timeline.json.gz"
    summary = write_timeline(tables, out)
    doc = check_file(read(out))
    assert summary.path_segments > 0
    cats = {flow[1] for flow in doc["flows"]}
    assert {"launch", "critical_path"} <= cats
    launches = pl.from_arrow(tables.edges).filter(pl.col("kind") == "launch").height
    assert sum(1 for flow in doc["flows"] if flow[1] == "launch") == launches
    assert "rank 2 · GPU 2" in doc["names"].values()  # synth puts rank r on GPU r
    assert any(name.startswith("rank 1 · GPU 1 · stream ") for name in doc["names"].values())
    same_events(tables, load([out]))


@pytest.mark.parametrize("trace", ["nvidia/b200_eager_rank0of8.json.gz", "nvidia/a100_alexnet_cuda_sync.json.gz",
                                   "nvidia/gp100_gpu_user_annotation.json.gz"])
def test_real_single_rank(trace, tmp_path):
    """B200: 74 kernels overlap on one stream (sub-tracks); AlexNet: cuda_sync edges become flows; GP100: the path
    moves to zero-length copies, whose arrows end on the boundary of two of the path's runs."""
    tables = load([shared_trace(trace)])
    out = tmp_path / "t.json.gz"
    write_timeline(tables, out)
    assert gzip_header_name(out.read_bytes()) == b"t.json"  # the file's own name, not the temporary one's
    doc = check_file(read(out))
    syncs = pl.from_arrow(tables.edges).filter(pl.col("kind") == "sync").height
    assert sum(1 for flow in doc["flows"] if flow[1] == "sync") == syncs
    same_events(tables, load([out]))


def test_overlapping_steps_get_critical_path_tracks_of_their_own(tmp_path):
    """A step's critical path runs until its last GPU work ends, into the next step's CPU time (ResNet50 V100: every
    step by 9-16 ms): the windows go on separate tracks, so no two path slices overlap on one (check_file)."""
    tables = load([shared_trace("diff_pairs/resnet50_v100_workers0_vs_workers4/workers0.pt.trace.json.gz")])
    out = tmp_path / "t.json.gz"
    write_timeline(tables, out)
    doc = check_file(read(out))
    path_tracks = [name for name in doc["names"].values() if "critical path" in name]
    assert "rank 0 · critical path · 2" in path_tracks


def test_dlrm_one_step(tmp_path):
    tables = load([shared_trace("multirank/dlrm_8ranks_v100")])
    out = tmp_path / "t.json.gz"
    write_timeline(tables, out)
    doc = check_file(read(out))
    ranks = {name.split(" · ")[0] for name in doc["names"].values()}
    assert ranks == {f"rank {r}" for r in range(8)}
    same_events(tables, load([out]))


def test_step_and_command(tmp_path):
    synth.generate(tmp_path / "in", ranks=2, steps=3, seed=1)
    out = tmp_path / "step.json.gz"
    result = CliRunner().invoke(main, ["timeline", str(tmp_path / "in"), "-o", str(out), "--step", "1",
                                       "--no-critical-path"])
    assert result.exit_code == 0, result.output
    doc = check_file(read(out))
    assert not any(flow[1] == "critical_path" for flow in doc["flows"])
    tables = load([tmp_path / "in"])
    members = catalog.sql(tables, "select count(*) as n from step_events(1) s join events e using (rank, id) "
                         "where e.ts is not null")
    assert len(doc["slices"]) == members["n"][0]
    result = CliRunner().invoke(main, ["timeline", str(tmp_path / "in"), "-o", str(out), "--step", "99"])
    assert result.exit_code == 2 and "step 99" in result.output


def test_replayed_timeline_is_the_replay_of_the_graph(tmp_path):
    """--replayed: the processes say so, and the slices sit at the replay's times (for an unchanged graph, the
    measured ones: tracekit.replay reproduces them exactly), read back through tracekit.load."""
    synth.generate(tmp_path / "in", ranks=1, steps=2, seed=3)
    out = tmp_path / "replayed.json.gz"
    result = CliRunner().invoke(main, ["timeline", str(tmp_path / "in"), "-o", str(out), "--replayed"])
    assert result.exit_code == 0, result.output
    names = [e["args"]["name"] for e in json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"]
    assert names and all(name.endswith("· replayed") for name in names), names
    same_events(load([tmp_path / "in"]), load([out]))


def test_flow_check_catches_what_viewers_drop():
    """The check itself: a parent → child arrow from the middle of the parent to the middle of its child (the old
    placement) runs backward; an end on the boundary two slices share binds to neither alone."""
    slices = [{"ph": "X", "pid": 1, "tid": 1, "ts": 0.0, "dur": 10.0, "name": "parent", "args": {"rank": 0}},
              {"ph": "X", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0, "name": "child", "args": {"rank": 0}},
              {"ph": "X", "pid": 1, "tid": 1, "ts": 3.0, "dur": 2.0, "name": "sibling", "args": {"rank": 0}}]

    def flow(start, end):
        return {("s", "f")[i]: {"ph": ("s", "f")[i], "id": 1, "cat": "launch", "name": "launch", "pid": 1, "tid": 1,
                                "ts": ts, **({"bp": "e"} if i else {})} for i, ts in enumerate((start, end))}
    check_flows_forward(slices, {(1, "launch", "launch"): flow(2.999, 3.001)})  # child's end → sibling's start
    with pytest.raises(AssertionError, match="backward"):
        check_flows_forward(slices, {(1, "launch", "launch"): flow(5.0, 2.0)})
    with pytest.raises(AssertionError, match="innermost"):
        check_flows_forward(slices, {(1, "launch", "launch"): flow(2.0, 3.0)})


def path_on_tracks(tables) -> pl.DataFrame:
    """The critical_path analysis's segments (not the timeline's code) with the track each one's event is on: a CPU
    thread (pid, tid) or a GPU stream (device, stream); null for a segment without an event."""
    events = pl.from_arrow(tables.events).select("rank", pl.col("id").alias("event_id"), "pid", "tid", "device",
                                                 "stream")
    return (run(tables, "critical_path").join(events, on=["rank", "event_id"], how="left")
            .with_columns(track=pl.when(pl.col("event_id").is_null()).then(None)
                          .when(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
                          .then(pl.format("GPU {} stream {}", "device", "stream"))
                          .otherwise(pl.format("CPU {} thread {}", "pid", "tid")))
            .sort("rank", "window_start_ns", "position"))


@pytest.fixture(scope="module")
def resnet_timeline(tmp_path_factory):
    """ResNet50 V100 (diff_pairs/…/workers0): steps whose windows overlap, a path between a thread and a stream."""
    tables = load([shared_trace("diff_pairs/resnet50_v100_workers0_vs_workers4/workers0.pt.trace.json.gz")])
    out = tmp_path_factory.mktemp("timeline") / "t.json.gz"
    summary = write_timeline(tables, out)
    raw = read(out)
    return tables, summary, {**check_file(raw), "base": raw["baseTimeNanoseconds"]}


def test_path_flows_are_the_moves_between_tracks(resnet_timeline):
    """Along the critical path an arrow joins two tracks (within a track the path's own track shows where it goes):
    none starts and ends on one track, and there is one for each place where the analysis's path moves from an
    event on one thread or stream to an event on another."""
    tables, summary, doc = resnet_timeline
    path_flows = [pair for flow, pair in doc["flows"].items() if flow[1] == "critical_path"]
    assert all((p["s"]["pid"], p["s"]["tid"]) != (p["f"]["pid"], p["f"]["tid"]) for p in path_flows)
    on_events = path_on_tracks(tables).filter(pl.col("event_id").is_not_null())
    moves = on_events.filter(pl.col("track") != pl.col("track").shift(-1).over("rank", "window_start_ns")).height
    assert moves > 0 and summary.flows_left_out == 0
    assert len(path_flows) == moves


def test_path_track_is_the_runs_of_the_path(resnet_timeline):
    """Each slice of the critical-path track is a run of the analysis's segments on one thread or stream: its
    segments (first to last position) are on one track, the runs before and after it are on others, and its time,
    per category and in all, and its longest events are those segments'; together the slices hold every segment."""
    tables, summary, doc = resnet_timeline
    path = path_on_tracks(tables)
    path_process = {pid for (pid, tid), name in doc["names"].items() if tid is None and name.endswith("critical path")}
    runs = sorted((e for e in doc["slices"] if e["pid"] in path_process),
                  key=lambda e: (e["args"]["rank"], micros_to_ns(e["ts"])))
    assert sum(e["args"]["segments"] for e in runs) == path.height == summary.path_segments
    tracks_in_order = defaultdict(list)
    for e in runs:
        a = e["args"]
        segments = path.filter((pl.col("rank") == a["rank"]) & (pl.col("step").eq_missing(a["step"]))
                               & pl.col("position").is_between(a["first_position"], a["last_position"]))
        assert segments.height == a["segments"]
        assert segments["track"].drop_nulls().n_unique() <= 1
        tracks_in_order[a["rank"], a["step"]].append(segments["track"].drop_nulls().first())
        assert doc["base"] + micros_to_ns(e["ts"]) == segments["start_ns"].min()
        assert doc["base"] + micros_to_ns(e["ts"]) + micros_to_ns(e["dur"]) == segments["end_ns"].max()
        by_category = segments.group_by("category").agg(pl.col("duration_ns").sum())
        assert {c: round(ns / 1000, 3) for c, ns in by_category.iter_rows()} == a["time_us"]
        assert a["events"] == segments["event_id"].drop_nulls().n_unique()
        # its five longest events: their time summed over the run's segments, most first (a tie: the lower id)
        longest = (segments.drop_nulls("event_id").group_by("event_id", "name").agg(pl.col("duration_ns").sum())
                   .sort(["duration_ns", "event_id"], descending=[True, False]).head(5))
        assert a["longest"] == [{"event": name, "us": round(ns / 1000, 3)}
                                for name, ns in longest.select("name", "duration_ns").iter_rows()]
    assert all(before != after for tracks in tracks_in_order.values() for before, after in zip(tracks, tracks[1:]))
    assert max(len(tracks) for tracks in tracks_in_order.values()) > 1


def test_an_unexplained_gpu_wait_has_a_colour_of_its_own(tmp_path):
    """A critical-path run whose time is mostly a GPU op's wait the trace cannot explain (k2 starts 130 µs after k1
    with its launch long returned) is titled by that category and coloured as an unknown state, not as idle."""
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::foo", "pid": 1, "tid": 1, "ts": 0, "dur": 10}]
    for i, start in enumerate([5, 145]):
        events += [launch(1 + 2 * i, i + 1), kernel(start, 10, i + 1)]
    trace = tmp_path / "rank0.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "t.json.gz"
    write_timeline(load([trace]), out)
    runs = [e for e in read(out)["traceEvents"] if e.get("cat") == "critical_path" and e.get("ph") == "X"]
    gpu_run = [e for e in runs if e["name"].startswith("unexplained_gpu_wait")]
    assert len(gpu_run) == 1 and gpu_run[0]["args"]["time_us"]["unexplained_gpu_wait"] == 130
    assert gpu_run[0]["cname"] == "thread_state_unknown"
    others = [e for e in runs if not e["name"].startswith("unexplained_gpu_wait")]
    assert others and "thread_state_unknown" not in {e["cname"] for e in others}


def test_each_slice_keeps_its_args_and_gains_its_rank(tmp_path):
    """A slice's args are the trace's, with "rank" added: an empty object (with spaces in it, as a writer may leave
    them), none, and objects whose text holds a colon, a brace or spaces alike."""
    args = {"none": None, "empty": "{ }", "tight": "{}", "colon": '{"note": "a:b"}',
            "brace": '{"s": "}"}', "spaced": '{ "n" : 1 }  '}
    events = [f'{{"ph": "X", "cat": "user_annotation", "name": "{name}", "pid": 1, "tid": 1, "ts": {10 * i}, '
              f'"dur": 5' + (f', "args": {text}' if text is not None else "") + "}"
              for i, (name, text) in enumerate(args.items())]
    trace = tmp_path / "rank0.json"
    trace.write_text('{"traceEvents": [' + ", ".join(events) + "]}")
    out = tmp_path / "t.json.gz"
    write_timeline(load([trace]), out, critical_path=False)
    got = {e["name"]: e["args"] for e in read(out)["traceEvents"] if e.get("ph") == "X"}
    assert got == {name: {**(json.loads(text) if text else {}), "rank": 0} for name, text in args.items()}


def operator_rows(profile) -> list[int]:
    """The rows each operator of a DuckDB JSON profile put out (the key's name as DuckDB 2 writes it, or as 1.x did)."""
    if isinstance(profile, dict):
        rows = [v for k, v in profile.items() if k in ("intermediate_rows", "operator_cardinality") and
                isinstance(v, int)]
        return rows + [r for v in profile.values() for r in operator_rows(v)]
    if isinstance(profile, list):
        return [r for v in profile for r in operator_rows(v)]
    return []


def test_arrows_query_never_pairs_slices_with_slices(tmp_path):
    """export/timeline_flows joins each edge to the slices at its two ends one after the other. Joined in one step,
    DuckDB paired every two slices of a rank before keeping those an edge joins: on the A100 trainer's step 551,
    163M rows for 1,375 arrows (2.2 s of a 3.8 s `timeline --step`). Profiled as write_timeline runs it, no operator
    puts out more rows than the query reads."""
    tables = load([shared_trace("nvidia/a100_trainer_rank0of16_cudagraph.json.gz")])
    profile = tmp_path / "profile.json"
    with catalog.connect(tables) as con:
        slices, _, _ = placed_slices(con, tables, 551, False)
        con.register("placed_slices", slices.select("rank", "id", "pid", "tid", "ts", "end_ns", "track").to_arrow())
        con.register("path_runs", pl.DataFrame(schema={
            "rank": pl.Int32, **dict.fromkeys(["window_start_ns", "start_ns", "first_event_id", "first_event_start_ns",
                                              "first_event_end_ns", "last_event_id", "last_event_start_ns",
                                              "last_event_end_ns"], pl.Int64)}).to_arrow())
        con.execute(f"pragma enable_profiling = 'json'; pragma profiling_output = '{profile}'")
        made = catalog.run_stage(con, ["export/timeline_flows"], parameters={
            "export/timeline_flows": {"base": slices["base_ns"][0], "arrows": "edges"}})
        con.execute("pragma disable_profiling")
    assert made["timeline_flows"].num_rows > 1000  # the step's launch arrows
    read_rows = tables.edges.num_rows + 2 * slices.height
    assert 0 < max(operator_rows(json.loads(profile.read_text()))) <= read_rows
