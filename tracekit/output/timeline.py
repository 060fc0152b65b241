"""One Chrome-trace JSON of every rank (`tracekit timeline`), for Perfetto UI and chrome://tracing.

Each rank gets a process per CPU pid and per GPU, named "rank R · CPU" / "rank R · GPU D" and sorted by rank;
CPU threads and GPU streams are tracks named in full ("rank 3 · GPU 0 · stream 7"). Viewers drop or move slices
that overlap on one track (Perfetto's JSON importer since v51), so a track whose slices overlap is spread over
sub-tracks ("... · 2"): on CPU threads a slice may nest inside another, on GPU tracks slices must be disjoint.
Launch and sync edges become flows whose ends sit inside their slices; with the critical path, a
"rank R · critical path" process holds a slice per run of the path on one thread or stream
(queries/export/timeline_path_runs.sql), and flows follow the path where it moves from one track to another. Every
flow runs forward in time, from the end of one piece of work to the start of the next (Catapult drops a flow whose
end precedes its start: `flow_slice_ordering_error`).

What is shown and how it is written is SQL (queries/export/timeline_*.sql); this module assigns sub-tracks (a
sweep in time order, which SQL cannot express as a join) and numbers processes, tracks and flows. Other writers
(a replayed timeline) can call `write_timeline` with their own tables and a `label` added to every process name.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa

from tracekit.engine.catalog import connect, run_stage
from tracekit.engine.connection import threads_shared
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.output.files import opened_output, write_output_file
from tracekit.query.analyses import in_background
from tracekit.query.step_scope import step_tables


@dataclass(frozen=True)
class TimelineSummary:
    path: Path
    slices: int
    tracks: int
    flows: int
    path_segments: int  # rows of critical_path shown
    path_slices: int  # their runs on one track each, the critical-path track's slices
    flows_left_out: int = 0  # arrows no forward pair of points inside their slices could draw (not written)


def sub_track_of(starts: list[int], ends: list[int], nests: bool) -> list[int]:
    """The sub-track of each slice of one track, STARTS and ENDS in (ts, end desc) order: the first sub-track where
    the slice starts after everything open has ended, or (where slices NEST, on CPU threads) fits inside the
    innermost open slice. The columns come as lists: iterating Polars series made the sweep of MI300X resnet x4's
    197k slices 0.08 s instead of 0.036 s. Nearly every slice fits the first sub-track, tried before the loop over
    the others (OWLv2's 158k slices: 0.08 -> 0.045 s)."""
    first: list[int] = []  # the first sub-track's open slices' ends, innermost last
    others: list[list[int]] = []  # the other sub-tracks' alike, in order
    placed = []
    for ts, end in zip(starts, ends):
        while first and first[-1] <= ts:
            first.pop()
        if not first or (nests and end <= first[-1]):
            first.append(end)
            placed.append(0)
            continue
        for lane, stack in enumerate(others, 1):
            while stack and stack[-1] <= ts:
                stack.pop()
            if not stack or (nests and end <= stack[-1]):
                stack.append(end)
                placed.append(lane)
                break
        else:
            others.append([end])
            placed.append(len(others))
    return placed


def metadata_event(kind: str, pid: int, value, tid: int | None = None) -> str:
    key = "sort_index" if kind.endswith("sort_index") else "name"
    event = {"ph": "M", "name": kind, "pid": pid, "args": {key: value}}
    if tid is not None:
        event["tid"] = tid
    return json.dumps(event, ensure_ascii=False)


# events formatted at a time: each batch's text is made, written and freed before the next (~3.5 MB for SD3.5's
# slices); 50,000 at a time peaked 31-45 MB higher on OWLv2 and SD3.5, in no less time (bench/RESULTS.md)
WRITE_ROWS = 10_000
SLICE_ORDER = ["process_order", "track_order", "track_key", "ts", "end_ns", "id"]  # end_ns descending


def text(*parts: str | pl.Expr) -> pl.Expr:
    """PARTS joined as text: literal strings and expressions."""
    return pl.concat_str([pl.lit(p) if isinstance(p, str) else p for p in parts])


def placed_slices(con, tables: TraceTables, step: int | None, critical_path: bool):
    """The slices shown (of step N only with `step`), each on its process (pid) and track or sub-track (tid), and
    the processes and tracks, numbered; with the critical path, a "rank R · critical path" process per rank."""
    if step is None:
        slices = pl.from_arrow(run_stage(con, ["export/timeline_slices"])["timeline_slices"])
    else:
        with connect(step_tables(tables, step)) as shown:  # the step's events, as every --step's
            slices = pl.from_arrow(run_stage(shown, ["export/timeline_slices"])["timeline_slices"])
    if slices.is_empty():
        raise InputError("no events to show")
    # each track's slices in time order, enclosing slices first (the sweep's order); the key ends in the unique id
    slices = slices.sort(SLICE_ORDER, descending=[key == "end_ns" for key in SLICE_ORDER], nulls_last=True)
    # sub-tracks: one sweep per track, in that order
    lanes = []
    for _, group in slices.group_by(["process_order", "track_order", "track_key"], maintain_order=True):
        lanes += sub_track_of(group["ts"].to_list(), group["end_ns"].to_list(), group["nests"][0])
    slices = slices.with_columns(lane=pl.Series(lanes, dtype=pl.Int64))
    # a rank's path runs through its events (with `step`: through that step's window, which holds its slices)
    ranks = slices["rank"].unique().sort().to_list() if critical_path else []
    processes = pl.concat([
        slices.select("process", "process_order").unique(),
        pl.DataFrame({"process": [f"rank {r} · critical path" for r in ranks],
                      "process_order": [r * 1000 for r in ranks]},
                     schema={"process": pl.String, "process_order": pl.Int64}),
    ], how="vertical_relaxed").sort("process_order", "process").with_row_index("pid", offset=1)
    # (the joins keep the slices' order, the file's: Polars guarantees no order to a join not told to)
    slices = slices.join(processes.select("process", "pid"), on="process", maintain_order="left")
    tracks = (slices.select("pid", "track_key", "track", "track_order", "lane").unique(["pid", "track_key", "lane"])
              .sort("pid", "track_order", "track_key", "lane")
              .with_columns(tid=pl.int_range(1, pl.len() + 1).over("pid").cast(pl.Int64)))
    slices = slices.join(tracks.select("pid", "track_key", "lane", "tid"), on=["pid", "track_key", "lane"],
                         maintain_order="left")
    return slices, processes, tracks


def runs_on_tracks(path_runs: pl.DataFrame, processes: pl.DataFrame) -> pl.DataFrame:
    """The critical path's runs on their rank's critical-path process (pid), each window on the first of its tracks
    (tid) free at its start: a step's window runs until its last GPU work ends, so windows may overlap."""
    windows = (path_runs.select("rank", "window_start_ns", "window_end_ns").unique()
               .sort("rank", "window_start_ns", pl.col("window_end_ns"), descending=[False, False, True]))
    window_lanes = []
    for _, group in windows.group_by("rank", maintain_order=True):
        window_lanes += sub_track_of(group["window_start_ns"].to_list(), group["window_end_ns"].to_list(), nests=False)
    windows = windows.with_columns(tid=pl.Series(window_lanes, dtype=pl.Int64) + 1)
    return (path_runs.join(processes.select("process", "pid"), left_on=pl.format("rank {} · critical path", "rank"),
                           right_on="process")
            .join(windows, on=["rank", "window_start_ns", "window_end_ns"]))


def names_of(processes: pl.DataFrame, tracks: pl.DataFrame, suffix: str) -> list[str]:
    """The metadata events that name and order the processes and tracks."""
    events = []
    for pid, process, order in processes.select("pid", "process", "process_order").iter_rows():
        events += [metadata_event("process_name", pid, process + suffix),
                   metadata_event("process_sort_index", pid, order)]
    for pid, track, lane, tid in tracks.select("pid", "track", "lane", "tid").iter_rows():
        events += [metadata_event("thread_name", pid, track + suffix + (f" · {lane + 1}" if lane else ""), tid),
                   metadata_event("thread_sort_index", pid, tid, tid)]
    return events


def write_events(out, frame: pl.DataFrame, event: list) -> None:
    """FRAME's rows as the text parts EVENT (literals and expressions), formatted and written by Polars WRITE_ROWS at a
    time (not a Python loop; a bounded copy of their text)."""
    for chunk in frame.iter_slices(WRITE_ROWS):
        chunk.select(event=text(*event)).write_csv(out, include_header=False, quote_style="never", line_terminator="")


def write_timeline(tables: TraceTables, path: str | Path, step: int | None = None, critical_path: bool = True,
                   label: str | None = None, inputs=()) -> TimelineSummary:
    """Write the timeline of every rank to `path` (gzip-compressed when it ends in .gz): the events of step N
    only with `step`, the critical path track unless `critical_path` is false."""
    suffix = f" · {label}" if label else ""
    written = {}

    def walk(cur):
        return run_stage(cur, ["export/timeline_path_runs"])["timeline_path_runs"]

    # The critical path's runs (the slowest query) are walked beside the slices, their sub-tracks and their text.
    # While the slices' query runs beside the walk, each has half DuckDB's threads (`threads_shared`; SD3.5's peak
    # 764 -> 721 MB). The walk's shared tables (events, call trees, lanes) are computed once each, a statement each,
    # as the report's analyses compute them; in one statement the events were computed at each of ~9 uses and every
    # stage's rows held at once (SD3.5: 3.40 -> 3.29 CPU s, peak 717 -> 655 MB). Not held to the tables' size as the
    # report's analyses are: beside the walk the slices' query then took 2% longer (bench/RESULTS.md)
    with (connect(tables, materialize=True, held_to_input=False) as con, threads_shared(con) as share,
          (in_background(con, tables, walk) if critical_path else nullcontext(None)) as walked):
        share(2 if critical_path and step is None else 1)
        slices, processes, tracks = placed_slices(con, tables, step, critical_path)
        share(1)  # the walk alone in DuckDB from here: the slices are written by Polars and zlib
        base = slices["base_ns"][0]
        con.register("placed_slices", slices.select("rank", "id", "pid", "tid", "ts", "end_ns", "track").to_arrow())
        # each event after the separator that precedes it (the first event is a process's name)
        after = pl.lit(",\n")
        slice_event = [after, '{"pid":', pl.col("pid"), ',"tid":', pl.col("tid"), ",", pl.col("body"), "}"]

        def flow_end(ph: str, side: str) -> list:
            return [f'{{"ph":"{ph}","id":', pl.col("id"), ',"cat":"', pl.col("cat"), '","name":"', pl.col("cat"),
                    '","pid":', pl.col(f"{side}_pid"), ',"tid":', pl.col(f"{side}_tid"), ',"ts":',
                    pl.col(f"{side}_ts"), "}"]

        def arrows(which: str, path_runs: pl.DataFrame | None) -> pl.DataFrame:
            """The arrows of export/timeline_flows: the edges' (before the path is walked) or the path's."""
            con.register("path_runs", path_runs.to_arrow() if path_runs is not None else pa.table({
                name: pa.array([], pa.int32() if name == "rank" else pa.int64())
                for name in ["rank", "window_start_ns", "start_ns", "first_event_id", "first_event_start_ns",
                             "first_event_end_ns", "last_event_id", "last_event_start_ns", "last_event_end_ns"]}))
            made = run_stage(con, ["export/timeline_flows"],
                             parameters={"export/timeline_flows": {"base": base, "arrows": which}})
            return pl.from_arrow(made["timeline_flows"])

        def metadata(names: list[str]) -> pl.DataFrame:
            return pl.DataFrame({"event": names}, schema={"event": pl.String})

        def write(temp: Path) -> None:
            first, *named = names_of(processes, tracks, suffix)
            # gzip's fastest level: level 9 (gzip.open's default) took 2 s of SD3.5's 4 s timeline, for a file 35%
            # smaller; compressed in a thread beside the formatting
            with opened_output(temp, compressed=str(path).endswith(".gz"), name=Path(path).name) as out:
                out.write(f'{{"traceEvents":[\n{first}'.encode())
                write_events(out, metadata(named), [after, pl.col("event")])
                # while the path is walked: the slices, and the edges' arrows (written after the path's slices)
                write_events(out, slices, slice_event)
                edge_arrows = arrows("edges", None)
                path_runs = runs_on_tracks(pl.from_arrow(walked()), processes) if critical_path else None
                if critical_path:  # the bytes so far go to disk while the path's slices and arrows are made
                    out.start_writeback()
                if path_runs is not None and step is not None:
                    path_runs = path_runs.filter(pl.col("step") == step)
                path_arrows = arrows("path", path_runs) if critical_path else edge_arrows.clear()
                if critical_path:
                    path_tracks = (path_runs.select("pid", "tid").unique().join(processes, on="pid")
                                   .sort("pid", "tid").select("pid", "process", "tid").iter_rows())
                    write_events(out, metadata([
                        metadata_event("thread_name", pid, process + suffix + (f" · {tid}" if tid > 1 else ""), tid)
                        for pid, process, tid in path_tracks]), [after, pl.col("event")])
                    path_slices = run_stage(con, ["export/timeline_path"],
                                            parameters={"export/timeline_path": {"base": base}})["timeline_path"]
                    write_events(out, pl.from_arrow(path_slices), slice_event)
                # the edges' arrows, then the path's (numbered in that order); a flow's two ends one after the other
                flows = pl.concat([edge_arrows, path_arrows]).filter("forward").drop("forward")
                write_events(out, flows.with_row_index("id", offset=1),
                             [after, *flow_end("s", "src"), after, *flow_end('f","bp":"e', "dst")])
                out.write(f'\n],"displayTimeUnit":"ns","baseTimeNanoseconds":{base}}}\n'.encode())
            written.update(flows=flows.height, flows_left_out=edge_arrows.height + path_arrows.height - flows.height,
                           path_segments=path_runs["segments"].sum() if critical_path else 0,
                           path_slices=path_runs.height if critical_path else 0)

        write_output_file(path, write, inputs)
    return TimelineSummary(Path(path), slices.height, tracks.height, **written)
