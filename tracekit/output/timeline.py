"""One Chrome-trace JSON of every rank (`tracekit timeline`), for Perfetto UI and chrome://tracing.

Each rank gets a process per CPU pid and per GPU, named "rank R · CPU" / "rank R · GPU D" and sorted by rank;
CPU threads and GPU streams are tracks named in full ("rank 3 · GPU 0 · stream 7"). Viewers drop or move slices
that overlap on one track (Perfetto's JSON importer since v51), so a track whose slices overlap is spread over
sub-tracks ("... · 2"): on CPU threads a slice may nest inside another, on GPU tracks slices must be disjoint.
Launch and sync edges become flows whose ends sit inside their slices; with the critical path, a
"rank R · critical path" process holds its segments (titled by category and event), and flows follow the path where
it moves from one track to another. Every flow runs forward in time, from the end of one piece of work to the start
of the next (Catapult drops a flow whose end precedes its start: `flow_slice_ordering_error`).

What is shown and how it is written is SQL (queries/export/timeline_*.sql); this module assigns sub-tracks (a
sweep in time order, which SQL cannot express as a join) and numbers processes, tracks and flows. Other writers
(a replayed timeline) can call `write_timeline` with their own tables and a `label` added to every process name.
"""

from __future__ import annotations

import gzip
import json
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa

from tracekit.engine.catalog import connect, run_stage
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.output.files import write_output_file
from tracekit.query.analyses import in_background, run_into
from tracekit.query.step_scope import step_tables


@dataclass(frozen=True)
class TimelineSummary:
    path: Path
    slices: int
    tracks: int
    flows: int
    path_segments: int
    flows_left_out: int = 0  # arrows no forward pair of points inside their slices could draw (not written)


def sub_track_of(starts: list[int], ends: list[int], nests: bool) -> list[int]:
    """The sub-track of each slice of one track, STARTS and ENDS in (ts, end desc) order: the first sub-track where
    the slice starts after everything open has ended, or (where slices NEST, on CPU threads) fits inside the
    innermost open slice. The columns come as lists: iterating Polars series made the sweep of MI300X resnet x4's
    197k slices 0.08 s instead of 0.036 s."""
    open_ends: list[list[int]] = []  # each sub-track's open slices' ends, innermost last
    placed = []
    for ts, end in zip(starts, ends):
        for lane, stack in enumerate(open_ends):
            while stack and stack[-1] <= ts:
                stack.pop()
            if not stack or (nests and end <= stack[-1]):
                stack.append(end)
                placed.append(lane)
                break
        else:
            open_ends.append([end])
            placed.append(len(open_ends) - 1)
    return placed


def metadata_event(kind: str, pid: int, value, tid: int | None = None) -> str:
    key = "sort_index" if kind.endswith("sort_index") else "name"
    event = {"ph": "M", "name": kind, "pid": pid, "args": {key: value}}
    if tid is not None:
        event["tid"] = tid
    return json.dumps(event, ensure_ascii=False)


WRITE_ROWS = 50_000  # events formatted at a time


def text(*parts: str | pl.Expr) -> pl.Expr:
    """PARTS joined as text: literal strings and expressions."""
    return pl.concat_str([pl.lit(p) if isinstance(p, str) else p for p in parts])


def write_timeline(tables: TraceTables, path: str | Path, step: int | None = None, critical_path: bool = True,
                   label: str | None = None, inputs=()) -> TimelineSummary:
    """Write the timeline of every rank to `path` (gzip-compressed when it ends in .gz): the events of step N
    only with `step`, the critical path track unless `critical_path` is false."""
    suffix = f" · {label}" if label else ""
    # the critical path (the slowest query) runs beside the slices and their sub-tracks (bench/RESULTS.md)
    with connect(tables) as con, (in_background(con, tables, lambda cur: run_into(cur, "critical_path", {}))
                                  if critical_path else nullcontext(None)) as path_result:
        if step is None:
            slices = pl.from_arrow(run_stage(con, ["export/timeline_slices"])["timeline_slices"])
        else:
            with connect(step_tables(tables, step)) as shown:  # the step's events, as every --step's
                slices = pl.from_arrow(run_stage(shown, ["export/timeline_slices"])["timeline_slices"])
        if slices.is_empty():
            raise InputError("no events to show")
        base = slices["base_ns"][0]
        # sub-tracks: one sweep per track, in the query's order
        lanes = []
        for _, group in slices.group_by(["process_order", "track_order", "track_key"], maintain_order=True):
            lanes += sub_track_of(group["ts"].to_list(), group["end_ns"].to_list(), group["nests"][0])
        slices = slices.with_columns(lane=pl.Series(lanes, dtype=pl.Int64))
        path_rows = pl.DataFrame()
        if critical_path:
            path_rows = path_result().drop("kind", "carried_by", "inferred", "duration_us")
            if step is not None:
                path_rows = path_rows.filter(pl.col("step") == step)
        processes = pl.concat([
            slices.select("process", "process_order").unique(),
            pl.DataFrame({"process": [f"rank {r} · critical path" for r in path_rows["rank"].unique().to_list()],
                          "process_order": [r * 1000 for r in path_rows["rank"].unique().to_list()]},
                         schema={"process": pl.String, "process_order": pl.Int64}) if critical_path
            else pl.DataFrame(schema={"process": pl.String, "process_order": pl.Int64}),
        ], how="vertical_relaxed").sort("process_order", "process").with_row_index("pid", offset=1)
        slices = slices.join(processes.select("process", "pid"), on="process")
        tracks = (slices.select("pid", "track_key", "track", "track_order", "lane").unique(["pid", "track_key", "lane"])
                  .sort("pid", "track_order", "track_key", "lane")
                  .with_columns(tid=pl.int_range(1, pl.len() + 1).over("pid").cast(pl.Int64)))
        slices = slices.join(tracks.select("pid", "track_key", "lane", "tid"), on=["pid", "track_key", "lane"])
        con.register("placed_slices", slices.select("rank", "id", "pid", "tid", "ts", "end_ns").to_arrow())
        if critical_path:
            # a step's window runs until its last GPU work ends, so windows may overlap: each on the first
            # track free at its start
            windows = (path_rows.select("rank", "window_start_ns", "window_end_ns").unique()
                       .sort("rank", "window_start_ns", pl.col("window_end_ns"), descending=[False, False, True]))
            window_lanes = []
            for _, group in windows.group_by("rank", maintain_order=True):
                window_lanes += sub_track_of(group["window_start_ns"].to_list(), group["window_end_ns"].to_list(),
                                             nests=False)
            windows = windows.with_columns(tid=pl.Series(window_lanes, dtype=pl.Int64) + 1)
            path_rows = path_rows.join(
                processes.select(pl.col("process"), pl.col("pid")),
                left_on=pl.format("rank {} · critical path", "rank"), right_on="process", how="left"
            ).join(windows, on=["rank", "window_start_ns", "window_end_ns"])
            segments = path_rows.to_arrow()
            con.register("path_segments", segments)
        else:
            con.register("path_segments", pa.table({"rank": pa.array([], pa.int32()), "step": pa.array([], pa.int64()),
                                                    "position": pa.array([], pa.int64()),
                                                    "event_id": pa.array([], pa.int64()),
                                                    "start_ns": pa.array([], pa.int64()),
                                                    "end_ns": pa.array([], pa.int64())}))
        # the flows and path slices of the placed slices and path segments (the Python passes above), side by side
        with_path = critical_path and not path_rows.is_empty()
        with (in_background(con, tables, lambda cur: run_stage(cur, ["export/timeline_path"],
                                                              parameters={"export/timeline_path": {"base": base}}),
                            bound={"path_segments": segments})
              if with_path else nullcontext(None)) as path_made:
            arrows = pl.from_arrow(run_stage(con, ["export/timeline_flows"],
                                             parameters={"export/timeline_flows": {"base": base}})["timeline_flows"])
            path_slices = pl.from_arrow(path_made()["timeline_path"]) if with_path else None
        flows = arrows.filter("forward").drop("forward")

    def metadata() -> list[str]:
        events = []
        for pid, process, order in processes.select("pid", "process", "process_order").iter_rows():
            events.append(metadata_event("process_name", pid, process + suffix))
            events.append(metadata_event("process_sort_index", pid, order))
        for pid, track, lane, tid in tracks.select("pid", "track", "lane", "tid").iter_rows():
            events.append(metadata_event("thread_name", pid, track + suffix + (f" · {lane + 1}" if lane else ""), tid))
            events.append(metadata_event("thread_sort_index", pid, tid, tid))
        if critical_path:
            for pid, process, tid in (path_rows.select("pid", "tid").unique().join(processes, on="pid")
                                      .sort("pid", "tid").select("pid", "process", "tid").iter_rows()):
                events.append(metadata_event("thread_name", pid, process + suffix + (f" · {tid}" if tid > 1 else ""),
                                             tid))
        return events

    def write(temp: Path) -> None:
        # The slices and flows (hundreds of thousands) are formatted and written by Polars, WRITE_ROWS at a time
        # (not a Python loop; a bounded copy of their text), each event after the separator that precedes it (the
        # first event is a process's name).
        first, *named = metadata()
        after = pl.lit(",\n")
        slice_event = [after, '{"pid":', pl.col("pid"), ',"tid":', pl.col("tid"), ",", pl.col("body"), "}"]

        def flow_end(ph: str, side: str) -> list:
            return [f'{{"ph":"{ph}","id":', pl.col("id"), ',"cat":"', pl.col("cat"), '","name":"', pl.col("cat"),
                    '","pid":', pl.col(f"{side}_pid"), ',"tid":', pl.col(f"{side}_tid"), ',"ts":',
                    pl.col(f"{side}_ts"), "}"]

        parts = [(pl.DataFrame({"event": named}, schema={"event": pl.String}), [after, pl.col("event")]),
                 (slices, slice_event), *([] if path_slices is None else [(path_slices, slice_event)]),
                 # a flow's two ends one after the other
                 (flows.with_row_index("id", offset=1), [after, *flow_end("s", "src"), after,
                                                         *flow_end('f","bp":"e', "dst")])]
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(temp, "wb") as out:
            out.write(f'{{"traceEvents":[\n{first}'.encode())
            for frame, event in parts:
                for chunk in frame.iter_slices(WRITE_ROWS):
                    chunk.select(event=text(*event)).write_csv(out, include_header=False, quote_style="never",
                                                               line_terminator="")
            out.write(f'\n],"displayTimeUnit":"ns","baseTimeNanoseconds":{base}}}\n'.encode())

    write_output_file(path, write, inputs)
    return TimelineSummary(Path(path), slices.height, tracks.height, flows.height,
                           0 if path_slices is None else path_slices.height, arrows.height - flows.height)
