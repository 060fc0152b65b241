"""The critical path's call trees, finished in numpy: the one table macro whose SQL body gives its inputs and whose
result Python computes (`catalog.FINISHED_IN_NUMPY`).

`_critical_path_calls()` (queries/lib/critical_path.sql) selects each CPU event the walk goes through with its
parent, in pre-order (its thread, then start, longest first, outer kind first). Each event's siblings before and
after it and its last descendant took two window sorts and a recursive CTE with one iteration per tree level:
0.2–0.35 s of one core on OWLv2, on the critical path's chain of statements (the timeline's long pole); here one
sort of the siblings and pointer jumping over the parents, 0.06 s (bench/RESULTS.md).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

# What the SQL body selects (in pre-order), and what the finished table holds beside it, with the types DuckDB's
# statement had (row_number and the ids are BIGINT, lanes UBIGINT hashes).
INPUT_COLUMNS = ("rank", "id", "lane", "ts", "end_ns", "parent")
SCHEMA = pa.schema([("rank", pa.int32()), ("id", pa.int64()), ("lane", pa.uint64()), ("ts", pa.int64()),
                    ("end_ns", pa.int64()), ("parent", pa.int64()), ("pre", pa.int64()),
                    ("prev_sibling", pa.int64()), ("prev_sibling_end", pa.int64()),
                    ("next_sibling_pre", pa.int64()), ("last_pre", pa.int64())])


def finished_calls(rows: pa.Table) -> pa.Table:
    """ROWS (INPUT_COLUMNS, in pre-order) with each event's pre-order number (`pre`, from 1 across threads and
    ranks), its siblings before it (id, end) and after it (pre-order number), and the pre-order number of its last
    descendant (itself for a leaf).

    Siblings are the children of one parent, or the top-level events of one thread. An event's last descendant is
    the one before the next sibling of its nearest ancestor-or-self that has one, else its thread's last event."""
    n = rows.num_rows
    rank, ids, lane, end = (rows.column(c).to_numpy() for c in ("rank", "id", "lane", "end_ns"))
    has_parent = rows.column("parent").is_valid().to_numpy(zero_copy_only=False)
    parent_id = rows.column("parent").fill_null(0).to_numpy()
    index = np.arange(n)
    pre = index + 1
    parent = np.where(has_parent, _positions(rank, ids, parent_id), -1)
    has_parent &= parent >= 0  # a parent among the rows (the body's join keeps only those)
    # siblings: one parent's children, or one thread's top-level events (rows of a thread are contiguous)
    new_lane = np.r_[True, (lane[1:] != lane[:-1]) | (rank[1:] != rank[:-1])] if n else np.zeros(0, bool)
    lane_no = np.cumsum(new_lane) - 1
    group = np.where(has_parent, parent, n + lane_no)
    by_group = np.argsort(group, kind="stable")  # pre-order within a group
    follows = group[by_group][1:] == group[by_group][:-1]
    next_sibling = np.full(n, -1)
    next_sibling[by_group[:-1][follows]] = by_group[1:][follows]
    prev_sibling = np.full(n, -1)
    prev_sibling[by_group[1:][follows]] = by_group[:-1][follows]
    # last descendant: from the nearest ancestor-or-self with a next sibling, or the top-level one (pointer jumping:
    # each pass doubles the levels skipped, so a tree of depth d takes log2(d) passes)
    target = np.where((next_sibling >= 0) | ~has_parent, index, parent)
    while True:
        jumped = target[target]
        if np.array_equal(jumped, target):
            break
        target = jumped
    lane_last = np.r_[np.flatnonzero(new_lane)[1:], n][lane_no]  # pre-order number of each row's lane's last row
    last_pre = np.where(next_sibling[target] >= 0, pre[next_sibling[target]] - 1, lane_last[target])

    def of(positions: np.ndarray, values: np.ndarray) -> pa.Array:
        return pa.array(values[positions], pa.int64(), mask=positions < 0)

    return pa.table([rows.column(c).cast(SCHEMA.field(c).type) for c in INPUT_COLUMNS]
                    + [pa.array(pre), of(prev_sibling, ids), of(prev_sibling, end), of(next_sibling, pre),
                       pa.array(last_pre)], schema=SCHEMA)


def _positions(rank: np.ndarray, ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Each row's position of the event (rank, WANTED) among the rows (-1 where there is none); the rows sorted by
    rank, as the body gives them. Event ids are dense per rank (0 to a rank's event count), so a table indexed by
    (rank, id) finds them without a sort (OWLv2's 149k rows: 13 -> 3 ms); ids too sparse for one are sorted."""
    if len(ids) == 0:
        return np.zeros(0, np.int64)
    rank_code = np.cumsum(np.r_[False, rank[1:] != rank[:-1]])
    low = min(int(ids.min()), int(wanted.min()))
    span = max(int(ids.max()), int(wanted.max())) - low + 1
    size = (int(rank_code[-1]) + 1) * span  # of the (rank, id) keys' range
    if size >= 2**62:
        raise ValueError("event ids span too wide to pack with their ranks")
    keys = rank_code * span + (ids - low)
    wanted_keys = rank_code * span + (wanted - low)
    if size <= 4 * len(ids) + 4096:
        at = np.full(size, -1, np.int64)
        at[keys] = np.arange(len(ids))
        return at[wanted_keys]
    sorted_at = np.argsort(keys, kind="stable")
    at = np.minimum(np.searchsorted(keys[sorted_at], wanted_keys), len(keys) - 1)
    found = keys[sorted_at[at]] == wanted_keys
    return np.where(found, sorted_at[at], -1)
