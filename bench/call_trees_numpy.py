"""A measurement for a design question, not product code: the critical path's call trees (the statement
`_critical_path_calls` of queries/lib/critical_path.sql: each CPU event's pre-order on its thread, parent, siblings
and last descendant) computed in numpy from the events and the nest edges, as the link's nest pass sorts them,
against the SQL statement: are the rows equal, and what does each take (one thread)?

    python bench/call_trees_numpy.py [TRACE ...]     # default: every shared Kineto trace and the DLRM 8-rank set
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import SHARED  # noqa: E402

from tracekit import pipeline  # noqa: E402
from tracekit.engine import catalog  # noqa: E402
from tracekit.link.edges import sort_codes  # noqa: E402

# the critical path's CPU kinds, outer first (its cpu_kind_order)
CPU_KINDS = ["user_annotation", "python_function", "cpu_op", "runtime", "driver", "overhead"]
COLUMNS = ["rank", "id", "ts", "end_ns", "parent", "pre", "prev_sibling", "prev_sibling_end", "next_sibling_pre",
           "last_pre"]


def call_trees(events: pa.Table, edges: pa.Table) -> pa.Table:
    """COLUMNS of `_critical_path_calls`, in numpy."""
    kind_order = pc.index_in(events["kind"], pa.array(CPU_KINDS))
    keep = pc.and_(pc.is_valid(kind_order), pc.is_valid(events["ts"]))
    ev = events.select(["rank", "id", "pid", "tid", "ts", "dur"]).filter(keep)
    ts = ev["ts"].to_numpy()
    end = ts + pc.fill_null(ev["dur"], 0).to_numpy()
    ids, rank = ev["id"].to_numpy(), ev["rank"].to_numpy()
    thread = [sort_codes(ev[c]) for c in ("rank", "pid", "tid")]
    order = np.lexsort((ids, kind_order.filter(keep).to_numpy(), -end, ts, *thread[::-1]))
    ts, end, ids, rank, thread = ts[order], end[order], ids[order], rank[order], [t[order] for t in thread]
    n = len(order)
    index = np.arange(n)
    new_lane = np.r_[True, np.any([t[1:] != t[:-1] for t in thread], axis=0)] if n else np.zeros(0, bool)
    lane = np.cumsum(new_lane) - 1
    lane_start = np.flatnonzero(new_lane)
    pre = index - lane_start[lane] + 1
    lane_events = np.diff(np.r_[lane_start, n])
    # parents: the nest edges between two kept events, looked up by (rank, id)
    keys = (rank.astype(np.int64) << 40) + ids
    by_key = np.argsort(keys)

    def position(ranks: np.ndarray, event_ids: np.ndarray) -> np.ndarray:
        wanted = (ranks.astype(np.int64) << 40) + event_ids
        at = np.minimum(np.searchsorted(keys[by_key], wanted), max(n - 1, 0))
        return np.where(keys[by_key][at] == wanted, by_key[at], -1) if n else np.full(len(wanted), -1)

    nest = edges.filter(pc.equal(edges["kind"], "nest"))
    child = position(nest["rank"].to_numpy(), nest["dst"].to_numpy())
    parent_of = position(nest["rank"].to_numpy(), nest["src"].to_numpy())
    parent = np.full(n, -1)
    both = (child >= 0) & (parent_of >= 0)
    parent[child[both]] = parent_of[both]
    # siblings: the children of one parent (the roots of one thread), in pre-order
    group = np.where(parent >= 0, parent, -1 - lane)
    by_group = np.lexsort((index, group))
    follows = group[by_group][1:] == group[by_group][:-1]
    next_sibling = np.full(n, -1)
    next_sibling[by_group[:-1][follows]] = by_group[1:][follows]
    prev_sibling = np.full(n, -1)
    prev_sibling[next_sibling[next_sibling >= 0]] = np.flatnonzero(next_sibling >= 0)
    # last descendant: from the nearest ancestor-or-self with a next sibling (pointer jumping), else the thread's end
    target = np.where((next_sibling >= 0) | (parent < 0), index, parent)
    while not np.array_equal(target[target], target):
        target = target[target]
    last_pre = np.where(next_sibling[target] >= 0, pre[np.maximum(next_sibling[target], 0)] - 1,
                        lane_events[lane[target]])

    def of(positions: np.ndarray, values: np.ndarray) -> pa.Array:
        return pa.array(np.where(positions >= 0, values[np.maximum(positions, 0)], 0), mask=positions < 0)

    return pa.table({"rank": rank.astype(np.int32), "id": ids, "ts": ts, "end_ns": end, "parent": of(parent, ids),
                     "pre": pre, "prev_sibling": of(prev_sibling, ids), "prev_sibling_end": of(prev_sibling, end),
                     "next_sibling_pre": of(next_sibling, pre), "last_pre": last_pre})


def main(paths: list[Path]) -> None:
    totals = [0.0, 0.0]
    for path in paths:
        tables = pipeline.load(path)
        start = time.perf_counter()
        mine = call_trees(tables.events, tables.edges).sort_by([("rank", "ascending"), ("id", "ascending")])
        numpy_s = time.perf_counter() - start
        with catalog.connect(tables, materialize=True, threads=1) as con:
            catalog.materialize_macro(con, "_critical_path_events")
            start = time.perf_counter()
            catalog.materialize_macro(con, "_critical_path_calls")
            sql_s = time.perf_counter() - start
            # the statement numbers the pre-order across threads and ranks (one sort); each thread's from 1 here,
            # as above
            per_thread = {"pre", "next_sibling_pre", "last_pre"}
            theirs = con.sql(
                f"select {', '.join(f'{c} - first_pre + 1 as {c}' if c in per_thread else c for c in COLUMNS)} "
                "from (select *, min(pre) over (partition by rank, lane) as first_pre "
                "from _critical_path_calls_result) "
                "order by rank, id").to_arrow_table()
        differ = [c for c in COLUMNS if not mine[c].cast(theirs[c].type).equals(theirs[c])]
        totals[0] += numpy_s
        totals[1] += sql_s
        print(f"{path.name}: {theirs.num_rows} events, numpy {numpy_s:.3f} s, SQL {sql_s:.3f} s, "
              + (f"columns that differ: {differ}" if differ else "equal"))
    print(f"all: numpy {totals[0]:.3f} s, SQL {totals[1]:.3f} s")


if __name__ == "__main__":
    given = [Path(p) for p in sys.argv[1:]]
    main(given or sorted(p for p in SHARED.rglob("*.json*") if p.name.endswith((".json", ".json.gz"))
                         and not p.name.startswith("et") and "oracles" not in p.parts)
         + [SHARED / "multirank" / "dlrm_8ranks_v100"])
