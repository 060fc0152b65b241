"""The replay graph: chains and cross-chain constraints from `events` and `edges`, with a what-if's factors.

Who waited for whom is read from the measurement: where an event had several predecessors, the one whose measured
lag is smallest is the one it waited for (the binding one) and keeps its measured lag, so that an unchanged graph
replays to the measured times. The others are assumed not to have held it up: their lag is floored (a stream gap
or a flow to 0, a launch latency to the rank's median latency of the GPU ops that did wait for their launch).
Collective kernels of one instance (matched across ranks) end at the last rank's arrival plus each rank's transfer:
one extra point per instance. All of it is column arithmetic over every event at once.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tracekit.replay.solve import NEVER, Chains, Constraints


def tree_walk(parent: np.ndarray):
    """Yield (nodes, ancestor) pairs: each node with each of its ancestors in turn, nearest first, one tree level
    per step for all nodes at once (parent -1: a root)."""
    nodes = np.nonzero(parent >= 0)[0]
    ancestor = parent[nodes]
    while len(nodes):
        yield nodes, ancestor
        up = parent[ancestor]
        keep = up >= 0
        nodes, ancestor = nodes[keep], up[keep]


def inside_selection(picked: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """True for every picked event and every event below one."""
    inside = picked.copy()
    for nodes, ancestor in tree_walk(parent):
        inside[nodes] |= picked[ancestor]
    return inside


def host_chains(nodes: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Host events as an Euler tour per thread: each event's start, its subtree, then its end.

    Returns point order, chain number, measured delta from the previous point of the chain and the row of the event
    owning that delta (-1: between top-level events or at a chain's first point)."""
    host = np.nonzero(~nodes["is_gpu"].to_numpy())[0]
    frame = nodes[host].with_columns(row=pl.Series(host)).sort(
        ["chain", "ts", "end_ns", "outer_first", "id"], descending=[False, False, True, False, False])
    rows = frame["row"].to_numpy()
    parent_row = nodes["parent_row"].to_numpy()
    n = len(rows)
    preorder = np.zeros(len(nodes), dtype=np.int64)
    preorder[rows] = np.arange(n)
    last = preorder.copy()
    depth = np.zeros(len(nodes), dtype=np.int64)
    for members, ancestor in tree_walk(parent_row):
        np.maximum.at(last, ancestor, preorder[members])
        depth[members] += 1
    chain_code = frame["chain"].rank("dense").to_numpy().astype(np.int64)
    # Points: a start sorts at its preorder position, an end after its last descendant (deeper ends first).
    key_chain = np.concatenate([chain_code, chain_code])
    key_pos = np.concatenate([preorder[rows], last[rows]])
    key_phase = np.concatenate([np.zeros(n, np.int64), np.ones(n, np.int64)])
    key_depth = np.concatenate([np.zeros(n, np.int64), -depth[rows]])
    point = np.concatenate([2 * rows, 2 * rows + 1])
    sort = np.lexsort((key_depth, key_phase, key_pos, key_chain))
    point, segment = point[sort], key_chain[sort]
    times = np.where(point % 2 == 0, nodes["ts"].to_numpy()[point // 2], nodes["end_ns"].to_numpy()[point // 2])
    first = chain_starts(segment)
    delta = np.where(first, 0, times - np.r_[0, times[:-1]])
    previous = np.r_[-1, point[:-1]]
    # The time after a start belongs to that event; after an end, to the event's parent.
    owner = np.where(first, -1, np.where(previous % 2 == 0, previous // 2, parent_row[np.maximum(previous, 0) // 2]))
    return point, segment, delta, owner


def chain_starts(segment: np.ndarray) -> np.ndarray:
    return np.r_[True, segment[1:] != segment[:-1]] if len(segment) else np.zeros(0, dtype=bool)


def build(nodes: pl.DataFrame, constraints: pl.DataFrame, collectives: pl.DataFrame, host_factor: np.ndarray,
          gpu_factor: np.ndarray) -> tuple[Chains, Constraints, np.ndarray]:
    """Chains, constraints and measured point times for `nodes` (replay/nodes.sql, with `parent_row`),
    `constraints` (replay/constraints.sql, with `src_row`, `dst_row`) and `collectives` (replay/collectives.sql,
    with `row`). Points 0 .. 2n-1 are the events' starts and ends; points 2n + i, the arrival of the last rank at
    collective instance i.

    host_factor: factor on a host event's own time (from the cpu and op selections it lies in); gpu_factor: factor
    on a GPU op's duration (from the selections that pick it, or the op that launched it)."""
    n = len(nodes)
    big = np.iinfo(np.int64).max
    parent_row = nodes["parent_row"].to_numpy()
    ts, end = nodes["ts"].to_numpy(), nodes["end_ns"].to_numpy()
    measured = np.empty(2 * n, dtype=np.int64)
    measured[0::2], measured[1::2] = ts, end

    h_point, h_segment, h_delta, h_owner = host_chains(nodes)
    h_first, h_start = chain_starts(h_segment), h_point % 2 == 0
    gpu = nodes.with_columns(row=pl.int_range(pl.len())).filter(pl.col("is_gpu")).sort(["chain", "ts", "id"])
    g_rows = gpu["row"].to_numpy()
    g_chain = gpu["chain"].rank("dense").to_numpy().astype(np.int64)
    g_first = chain_starts(g_chain)
    g_gap = np.where(g_first, 0, ts[g_rows] - np.r_[0, end[g_rows][:-1]])

    c = constraints
    src, dst = c["src_row"].to_numpy(), c["dst_row"].to_numpy()
    kind, lag, dst_dur = c["kind"].to_numpy(), c["lag"].to_numpy(), c["dst_dur"].to_numpy()
    from_start = (kind == "launch_start") | ((kind == "wake") & ~c["src_end"].to_numpy())
    launch, sync, flow = (kind == "launch") | (kind == "launch_start"), kind == "sync", kind == "flow"
    # A thread that resumed after another thread's point: into the start of its next event, or the end of the
    # event it waited in (thread_wait_inferred edges).
    wake_end = (kind == "wake") & c["dst_end"].to_numpy()
    # A flow lands on the backward op; the thread waited at the outermost event it entered together with it.
    dst = np.where(flow, flow_entry_rows(parent_row, h_point, h_segment)[dst], dst)
    lag = np.where(flow, ts[dst] - end[src], lag)

    # Binding predecessor of each start point: the smallest measured lag among its chain gap (the measured time
    # since the previous point of its thread or stream) and the cross constraints into it.
    chain_gap = np.full(n, big, dtype=np.int64)
    chain_gap[g_rows[~g_first]] = g_gap[~g_first]
    host_entry = h_start & ~h_first
    chain_gap[h_point[host_entry] // 2] = h_delta[host_entry]
    into_start = ~sync & ~wake_end
    cross_best = np.full(n, big, dtype=np.int64)
    np.minimum.at(cross_best, dst[into_start], lag[into_start])
    chain_binds = chain_gap <= cross_best
    binding = into_start & (lag <= np.minimum(chain_gap, cross_best)[dst])

    latency = rank_median_latency(c["rank"].to_numpy(), lag, (kind == "launch") & binding)
    weight = np.where(binding, lag, np.where(kind == "launch", np.minimum(lag, latency), np.minimum(lag, 0)))
    # Into an end (a wait inside the event): binding where its lag is below the measured piece before that end.
    end_gap = np.full(n, big, dtype=np.int64)
    end_gap[h_point[~h_start] // 2] = h_delta[~h_start]
    end_best = np.full(n, big, dtype=np.int64)
    np.minimum.at(end_best, dst[wake_end], lag[wake_end])
    end_binds = wake_end & (lag <= np.minimum(end_gap, end_best)[dst])
    weight = np.where(wake_end, np.where(end_binds, lag, np.minimum(lag, 0)), weight)
    waits_at_end = np.zeros(n, dtype=bool)
    waits_at_end[dst[end_binds]] = True
    # A sync call ends no earlier than the op it waited for plus the time it took to return (measured); of its own
    # duration it keeps the part it did not spend waiting. A call that waited for several ops (a device sync: the
    # last op of each stream) waited for the one that ended last (smallest lag); it returns no earlier than the
    # others' ends.
    sync_best = np.full(n, big, dtype=np.int64)
    np.minimum.at(sync_best, dst[sync], lag[sync])
    sync_binds = sync & (lag <= sync_best[dst])
    weight = np.where(sync, np.where(sync_binds, np.minimum(lag, dst_dur), np.minimum(lag, 0)), weight)
    waited = np.zeros(n, dtype=np.int64)
    np.maximum.at(waited, dst[sync], np.clip(dst_dur[sync] - lag[sync], 0, dst_dur[sync]))

    # Host deltas: scaled by the innermost open event's factor; a start whose cross constraint binds does not also
    # wait out its thread's gap; a sync call's own time excludes its wait (taken from the piece before its end, its
    # own: the whole call for a leaf).
    host_scale = host_factor
    h_event = h_point // 2
    h_delta = h_delta - np.where(h_start, 0, np.minimum(waited[h_event], h_delta))
    h_delta = np.where((h_start & ~chain_binds[h_event]) | (~h_start & waits_at_end[h_event]),
                       np.minimum(h_delta, 0), h_delta)
    scale = np.where(h_owner >= 0, host_scale[np.maximum(h_owner, 0)], 1.0)
    h_delta = np.round(h_delta * scale).astype(np.int64)

    # GPU deltas: the gap before an op only where the stream was what it waited for; its duration scaled.
    g_start_delta = np.where(chain_binds[g_rows], g_gap, np.minimum(g_gap, 0))
    # A coupled collective kernel lasts its transfer time after the last rank's arrival (its own start included):
    # its wait for the peers is not its own work, and a what-if scales the transfer alone.
    own_time = end - ts
    c_rows, c_instance = collectives["row"].to_numpy(), collectives["instance"].to_numpy()
    transfer = np.round(collectives["transfer"].to_numpy() * gpu_factor[c_rows]).astype(np.int64)
    own_time[c_rows] = collectives["transfer"].to_numpy()
    g_end_delta = np.round(own_time[g_rows] * gpu_factor[g_rows]).astype(np.int64)
    g_point = np.stack([2 * g_rows, 2 * g_rows + 1], axis=1).ravel()
    g_delta = np.stack([np.where(g_first, 0, g_start_delta), g_end_delta], axis=1).ravel()
    g_segment = np.repeat(g_chain, 2) + (h_segment.max() + 1 if len(h_segment) else 0)

    order = np.concatenate([h_point, g_point])
    segment = np.concatenate([h_segment, g_segment])
    delta = np.concatenate([h_delta, g_delta])
    # A chain's first point keeps its measured time, unless it is a GPU op whose launch is in the trace or a host
    # event whose start a flow or another thread released.
    launched = np.zeros(n, dtype=bool)
    launched[dst[launch | binding]] = True
    anchored = chain_starts(segment) & ~((order % 2 == 0) & launched[order // 2])
    anchor = np.where(anchored, measured[order], NEVER)
    # Constraints run from the source's end to the dependant's start (a sync: to the waiting call's end); a
    # collective's arrival point (a chain of its own) from each of its kernels' starts, and to each of their ends.
    arrivals = 2 * n + np.arange(c_instance.max() + 1 if len(c_instance) else 0)
    arrival_time = np.full(len(arrivals), NEVER, dtype=np.int64)
    np.maximum.at(arrival_time, c_instance, ts[c_rows])
    first_arrival_segment = segment.max() + 1 if len(segment) else 0
    chains = Chains(order=np.concatenate([order, arrivals]),
                    segment=np.concatenate([segment, first_arrival_segment + np.arange(len(arrivals))]),
                    delta=np.concatenate([delta, np.zeros(len(arrivals), np.int64)]),
                    anchor=np.concatenate([anchor, np.full(len(arrivals), NEVER, dtype=np.int64)]))
    cons = Constraints(src=np.concatenate([2 * src + ~from_start, 2 * c_rows, arrivals[c_instance]]),
                       dst=np.concatenate([2 * dst + (sync | wake_end), arrivals[c_instance], 2 * c_rows + 1]),
                       weight=np.concatenate([weight.astype(np.int64), np.zeros(len(c_rows), np.int64), transfer]))
    return chains, cons, np.concatenate([measured, arrival_time])


def flow_entry_rows(parent_row: np.ndarray, h_point: np.ndarray, h_segment: np.ndarray) -> np.ndarray:
    """For each event, the outermost event whose start leads to its start through first-child starts only (the
    event its thread entered together with it); itself when its start follows a gap or an end."""
    follows_parent_start = np.r_[False, (h_point[:-1] % 2 == 0) & (h_segment[:-1] == h_segment[1:])
                                 & (h_point[1:] % 2 == 0)]
    rows = h_point[follows_parent_start] // 2
    first_child = np.zeros(len(parent_row), dtype=bool)
    first_child[rows] = parent_row[rows] >= 0
    current = np.arange(len(parent_row))
    while True:
        up = np.where(first_child[current], parent_row[current], current)
        if np.array_equal(up, current):
            return current
        current = up


def rank_median_latency(ranks: np.ndarray, lag: np.ndarray, waited_for_launch: np.ndarray) -> np.ndarray:
    """Per constraint, the median launch latency of its rank's GPU ops that waited for their launch (0: none)."""
    medians = (pl.DataFrame({"rank": ranks[waited_for_launch], "lag": lag[waited_for_launch]})
               .group_by("rank").agg(pl.col("lag").median().round().cast(pl.Int64).clip(lower_bound=0)))
    return (pl.DataFrame({"rank": ranks}).join(medians, on="rank", how="left", maintain_order="left")
            ["lag"].fill_null(0).to_numpy())
