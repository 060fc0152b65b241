"""The dependency graph: `edges` built from `events` with joins, never per-event loops.

Kinds built here:
- nest: parent → child on the same (rank, pid, tid), by time containment;
- launch: runtime/driver call → GPU kernel/memcpy/memset, joined on (rank, correlation);
- stream: GPU op → the next GPU op on the same (rank, device, stream);
- sync: GPU op a `cuda_sync` event waited for → the host call that waited (Event Sync, Stream Sync, Context Sync) or
  the next GPU op on the waiting stream (Stream Wait Event); an event wait that names no record (-1) takes the
  waiting thread's last event-record call (queries/link/sync_records.sql);
- sync_inferred: GPU op → the blocking host call that waited for it, where no sync event covers the call: inferred
  from the call's class and its end just after the op's (queries/link/sync_inferred_edges.sql, docs/critical_path.md);
- stream_wait_inferred: GPU op → a GPU op on another stream that started just after it ended, late for its own stream
  and launch (an unrecorded cross-stream event wait; queries/link/stream_wait_inferred_edges.sql);
- thread_wait_inferred: an event's start or end on one host thread → the event on another thread of the rank that
  started or ended right after it, its thread idle until then (queries/link/thread_wait_inferred_edges.sql);
- flow: forward op → backward op, from `fwdbwd` flow endpoints bound to the cpu_op they sit on.

Every join key includes rank, so merged multi-rank input (whose correlation ids restart per rank) cannot cross-link.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracekit import schema
from tracekit.engine import catalog
from tracekit.engine.tables import TraceTables

# Host-side kinds that nest on a thread; GPU ops live on streams and are linked by launch/stream edges instead.
NESTING_KINDS = ("trace", "user_annotation", "python_function", "cpu_op", "runtime", "driver", "overhead", "other")
# Among events with identical start and duration, the outer one comes first in this order.
NESTING_RANK = {kind: i for i, kind in enumerate(NESTING_KINDS)}
NEST_KIND = pa.scalar("nest", pa.string())  # typed: pyarrow's type inference tries to import dateutil each time
# The link passes whose results build_edges keeps (queries/link/NAME.sql); the catalog adds the passes they read
# (host_calls, gpu_launched, sync_edges, flow_bindings) and orders them all.
LINK_RESULTS = ("launch_edges", "stream_edges", "unlinked_launches", "sync_edge_pairs", "unresolved_syncs",
                "sync_inferred_edges", "stream_wait_inferred_edges", "thread_wait_inferred_edges", "flow_edges",
                "unbound_flows")
# Passes whose every row comes from entries a trace may lack, by their SQL's own filters: `cuda_sync` events
# (sync_records, sync_edges and what they read), `fwdbwd` flow endpoints (flow_bindings), host points on two threads
# of a rank (thread_wait_inferred_edges joins a point to one on another thread; the nest pass, which sorts the host
# events by thread, says whether a rank has them). Most real traces hold no sync events, inference traces no fwdbwd
# flows and often one host thread: the results are then empty, and their passes are not run (on OWLv2, 10 of the 15
# statements, 0.31 of the SQL passes' 0.50 CPU s on one thread: planning, hash tables and sorts built for no row).
# What the passes after them read (sync_edges) is bound empty, as `inferred_edges` binds it without sync events.
FAMILY_RESULTS = {"sync": {"sync_edge_pairs": "edges", "unresolved_syncs": "diagnostics"},
                  "flow": {"flow_edges": "edges", "unbound_flows": "diagnostics"},
                  "thread_wait": {"thread_wait_inferred_edges": "edges"}}
# the events whose starts and ends are the points of queries/link/thread_wait_inferred_edges.sql
THREAD_WAIT_POINT_KINDS = ("cpu_op", "user_annotation", "python_function")


def build_edges(tables: TraceTables) -> TraceTables:
    """Tables with `edges` filled (nest, launch, stream, sync, sync_inferred, stream_wait_inferred,
    thread_wait_inferred, flow) and what could not be linked in `diagnostics`."""
    # the nest pass (numpy and Arrow, which release the GIL) runs beside the SQL passes, which do not read it
    with ThreadPoolExecutor(1, thread_name_prefix="tracekit-nest") as pool:
        nesting = pool.submit(nest_edges, tables.events)
        families = absent_families(tables)
        bound = ("sync_edges",) if "sync" in families else ()
        thread_waits = list(FAMILY_RESULTS["thread_wait"])
        with tables.connect() as con:
            for name in bound:
                con.register(name, schema.empty("edges"))
            # each pass after the passes whose results it reads (their `inputs:` headers), each computed once, into
            # a temp table: a result fetched as Arrow would be bound twice (once for its schema, once to run it),
            # and the passes after it scan a table faster than Arrow; the thread waits last, once the nest pass says
            # whether a rank has host points on two threads
            skipped = family_results(families)
            run = [name for name in LINK_RESULTS if name not in skipped and name not in thread_waits]
            catalog.run_stage(con, [f"link/{name}" for name in run], temp_tables=True, bound=bound)
            nest, nest_notes, several_threads = nesting.result()
            if several_threads:
                catalog.run_stage(con, [f"link/{name}" for name in thread_waits], temp_tables=True)
                run += thread_waits
            else:
                families.add("thread_wait")
            made = family_results(families) | {name: con.table(name).to_arrow_table() for name in run}
    launch, stream, sync, sync_inferred, stream_wait_inferred, thread_wait_inferred, flow = (
        made[name] for name in ("launch_edges", "stream_edges", "sync_edge_pairs", "sync_inferred_edges",
                                "stream_wait_inferred_edges", "thread_wait_inferred_edges", "flow_edges"))
    launch_notes, sync_notes, flow_notes = (made[name] for name in ("unlinked_launches", "unresolved_syncs",
                                                                     "unbound_flows"))
    edges = pa.concat_tables([schema.conform("edges", t) for t in (nest, launch, stream, sync, sync_inferred,
                                                                    stream_wait_inferred, thread_wait_inferred,
                                                                    flow)])
    notes = pa.concat_tables([tables.diagnostics] + [schema.conform("diagnostics", t)
                                                     for t in (nest_notes, launch_notes, sync_notes, flow_notes)])
    return tables.with_tables(edges=edges, diagnostics=notes)


def family_results(families: set[str]) -> dict[str, pa.Table]:
    """The results of the pass families FAMILIES on a trace without their entries: empty."""
    return {name: schema.empty(table) for family in families for name, table in FAMILY_RESULTS[family].items()}


def absent_families(tables: TraceTables) -> set[str]:
    """The pass families of FAMILY_RESULTS whose entries TABLES lack (the same filters as their SQL's), but
    thread_wait, which the nest pass tells."""
    events, flows = tables.events, tables.flows
    absent = set()
    if not pc.any(pc.equal(events.column("kind"), "sync")).as_py():
        absent.add("sync")
    if not pc.any(pc.and_(pc.equal(flows.column("cat"), "fwdbwd"),
                          pc.is_in(flows.column("phase"), pa.array(["s", "f"])))).as_py():
        absent.add("flow")
    return absent


def inferred_edges(tables: TraceTables, recorded_first: bool = True) -> pa.Table:
    """The sync_inferred and stream_wait_inferred passes over TABLES (edges built): with recorded_first false, as if
    the trace had no sync events (what the agreement study compares with the recorded edges)."""
    kinds = tables.edges["kind"]
    with tables.connect() as con:
        for kind in ("launch", "stream"):
            con.register(f"{kind}_edges", tables.edges.filter(pc.equal(kinds, kind)))
        con.register("sync_edges", tables.edges.filter(pc.equal(kinds, "sync")) if recorded_first
                     else schema.empty("edges"))
        made = catalog.run_stage(con, ["link/sync_inferred_edges", "link/stream_wait_inferred_edges"],
                                 bound=("launch_edges", "stream_edges", "sync_edges"))
        return pa.concat_tables([schema.conform("edges", made[name])
                                 for name in ("sync_inferred_edges", "stream_wait_inferred_edges")])


def nest_edges(events: pa.Table) -> tuple[pa.Table, pa.Table, bool]:
    """parent → child by containment on each (rank, pid, tid), a diagnostic per improper overlap, and whether a rank
    has points of THREAD_WAIT_POINT_KINDS (a timed event of those kinds) on two threads or more.

    An event's parent is the nearest earlier-starting event on its thread that ends no earlier than it does.
    Real traces hold sub-microsecond overlaps that are not nesting (an op that starts inside another and ends after
    it): such an event is attached to the innermost event that fully contains it, and counted in diagnostics.
    Both searches are "nearest previous element with value ≥ v", done for all events at once by binary lifting over
    a sparse table of range maxima: O(n log n) vectorised, no per-event loop.
    """
    # Sorted in numpy over integer codes of the thread columns (arrow, not a Polars sort of the strings: that sort
    # took 15 MB, four times the columns, on a 25 MB trace).
    outer_first = pc.index_in(events.column("kind"), pa.array(NESTING_KINDS))  # NESTING_RANK; null: does not nest
    nesting = pc.and_(pc.is_valid(outer_first), pc.is_valid(events.column("ts")))
    kept = events.select(["rank", "id", "pid", "tid", "ts", "dur"]).filter(nesting)
    if kept.num_rows == 0:
        return schema.empty("edges"), schema.empty("diagnostics"), False
    ts, ids = kept.column("ts").to_numpy(), kept.column("id").to_numpy()
    end = ts + np.maximum(pc.fill_null(kept.column("dur"), 0).to_numpy(), 0)
    thread = [sort_codes(kept.column(c)) for c in ("rank", "pid", "tid")]
    kinds = outer_first.filter(nesting).to_numpy()
    order = np.lexsort((ids, kinds, -end, ts, *thread[::-1]))
    ts, end, ids = ts[order], end[order], ids[order]
    ranks = kept.column("rank").to_numpy()[order]
    n = len(order)
    index = np.arange(n)
    new_thread = np.r_[True, np.any([t[order][1:] != t[order][:-1] for t in thread], axis=0)]
    thread_start = np.maximum.accumulate(np.where(new_thread, index, 0))
    # the first row of each thread with points, in (rank, thread) order: a rank twice has two such threads
    with_points = np.unique(thread_start[np.isin(kinds[order], [NESTING_RANK[k] for k in THREAD_WAIT_POINT_KINDS])])
    several_threads = bool(np.any(ranks[with_points][1:] == ranks[with_points][:-1]))

    # parent: a container must still be open after the child starts (a zero-length event at the instant a sibling
    # ends belongs to the enclosing event, not to that sibling). open_at_start: the nearest earlier event still open
    # when this one starts; if it is not the parent, the two overlap improperly.
    parent, open_at_start = nearest_previous_at_least(end, [np.maximum(end, ts + 1), ts + 1], thread_start)
    improper = (open_at_start >= 0) & (open_at_start != parent)

    has_parent = parent >= 0
    edges = pa.table({
        "rank": pa.array(ranks[has_parent], pa.int32()),
        "src": pa.array(ids[parent[has_parent]], pa.int64()),
        "dst": pa.array(ids[has_parent], pa.int64()),
        "kind": pa.repeat(NEST_KIND, int(has_parent.sum())),
    })
    overlap_with = ids[open_at_start[improper]]
    notes = pa.table({
        "rank": pa.array(ranks[improper], pa.int32()),
        "position": pa.array(ids[improper], pa.int64()),
        "stage": pa.array(["edges"] * int(improper.sum()), pa.string()),
        "reason": pa.array(["improper_nesting"] * int(improper.sum()), pa.string()),
        "detail": pa.array([f"starts inside event {o} but ends after it; nested under the innermost event that "
                            f"contains it" for o in overlap_with], pa.string()),
        "dropped": pa.array(np.zeros(int(improper.sum()), dtype=bool)),
    })
    return edges, notes, several_threads


def sort_codes(values: pa.ChunkedArray) -> np.ndarray:
    """Integers that sort as VALUES do (nulls last, equal to each other): each value's place among the distinct
    values in sorted order."""
    distinct = pc.drop_null(pc.unique(values))
    distinct = distinct.take(pc.array_sort_indices(distinct))
    return pc.fill_null(pc.index_in(values, value_set=distinct), len(distinct)).to_numpy()


def nearest_previous_at_least(values: np.ndarray, targets: list[np.ndarray], start: np.ndarray
                              ) -> list[np.ndarray]:
    """For each array of TARGETS: for each i, the largest j in [start[i], i) with values[j] >= targets[i], or -1.

    Binary lifting: skip back over the longest run of elements all below the target, in power-of-two blocks whose
    maxima come from a sparse table (built once for all the targets). Runs over every element at once.
    """
    n = len(values)
    # No search crosses a segment start, so blocks longer than the longest segment are never used: the depth (and
    # the cost per element) depends on the longest thread, not on how many threads or ranks there are.
    longest = int((np.arange(n) - start).max()) + 1 if n else 0
    table = [values]
    while (1 << len(table)) <= longest:
        prev, half = table[-1], 1 << (len(table) - 1)
        table.append(np.maximum(prev[:-half] if half < len(prev) else prev[:0], prev[half:]))
    return [_search_back(values, table, each, start) for each in targets]


def _search_back(values: np.ndarray, table: list[np.ndarray], targets: np.ndarray, start: np.ndarray
                 ) -> np.ndarray:
    """nearest_previous_at_least for one array of targets, over its sparse table of VALUES."""
    n = len(values)
    pos = np.arange(n)  # exclusive end of the unsearched prefix
    for level in range(len(table) - 1, -1, -1):
        size = 1 << level
        block_start = pos - size
        can_skip = block_start >= start
        idx = np.where(can_skip, block_start, 0)
        level_max = table[level]
        valid_idx = np.minimum(idx, len(level_max) - 1)
        can_skip &= idx < len(level_max)
        can_skip &= level_max[valid_idx] < targets
        pos = np.where(can_skip, block_start, pos)
    candidate = pos - 1
    found = (candidate >= start) & (values[np.maximum(candidate, 0)] >= targets)
    return np.where(found, candidate, -1)
