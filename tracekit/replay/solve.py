"""Re-time the dependency graph: every event's start and end as the latest time its predecessors allow.

The graph is held as points (each event's start and end) on chains (a host thread in nesting order, a GPU stream
in start order) plus cross-chain constraints (launch, sync, stream-wait, flow). Along a chain each point follows
the previous one by a measured delta (scaled by the what-if): x[i] = max(x[i-1] + delta[i], b[i]), where b[i] is
the latest cross-chain constraint on the point. That recurrence is a prefix scan,
x = S + cummax(b - S) with S the running sum of the deltas, so a whole chain is solved at once. The chains are
solved together, the cross-chain constraints recomputed from the new times, and so on until nothing moves: each
pass settles one more hop of host → GPU → host dependency, so the passes are as many as the longest such
alternation, not as many as the events.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

NEVER = np.int64(-(2 ** 62))  # no constraint


@dataclass(frozen=True)
class Chains:
    """Points in chain order: `order[k]` is a point index (2 * event + 0 for its start, + 1 for its end)."""

    order: np.ndarray      # point indices, chain after chain, in chain order
    segment: np.ndarray    # chain number of each position of `order`
    delta: np.ndarray      # ns from the previous point of the chain (0 at a chain's first point), what-if applied
    anchor: np.ndarray     # ns lower bound of each position (a chain's first point keeps its measured time)


@dataclass(frozen=True)
class Constraints:
    """Cross-chain constraints: point dst >= point src + weight."""

    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray


def solve(chains: Chains, constraints: Constraints, start: np.ndarray, max_passes: int = 10_000) -> tuple[np.ndarray, int]:
    """Point times (ns) that satisfy every chain and constraint with equality on the binding one, and the passes
    it took. `start` is the first guess (the measured times); the graph has no cycles, so the answer is unique."""
    x = start.copy()
    frame = pl.DataFrame({"segment": chains.segment, "delta": chains.delta})
    running = frame.select(pl.col("delta").cum_sum().over("segment"))["delta"].to_numpy()
    for passes in range(1, max_passes + 1):
        bound = np.full(len(x), NEVER, dtype=np.int64)
        np.maximum.at(bound, constraints.dst, x[constraints.src] + constraints.weight)
        along = np.maximum(bound[chains.order], chains.anchor)
        best = (pl.DataFrame({"segment": chains.segment, "v": along - running})
                .select(pl.col("v").cum_max().over("segment"))["v"].to_numpy())
        new = x.copy()
        new[chains.order] = running + best
        if np.array_equal(new, x):
            return x, passes
        x = new
    raise RuntimeError(f"replay did not settle in {max_passes} passes (a dependency cycle?)")
