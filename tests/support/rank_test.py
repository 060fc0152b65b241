"""The diff's rank test and shift interval by brute force (tracekit/diff/verdicts.py's documented rule): an oracle
that enumerates what verdicts.py computes in closed form."""

from __future__ import annotations

import itertools
import statistics


def exact_rank_test(base: list[float], cand: list[float], alpha: float = 0.05) -> dict:
    """The documented rule by brute force: every way of splitting the pooled ranks into the two sides (the null
    distribution of U), the sorted pairwise differences, and the Hodges-Lehmann shift with its Moses interval."""
    m, n = len(cand), len(base)
    null_u = [sum(1 for j in ys for i in range(m + n) if i not in ys and j > i)
              for ys in map(set, itertools.combinations(range(m + n), m))]
    diffs = sorted(c - b for b in base for c in cand)
    wins, losses = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    tail = {w: sum(u >= w for u in null_u) / len(null_u) for w in (wins, losses)}
    c = sum(1 for u in range(m * n + 1) if sum(v <= u for v in null_u) / len(null_u) <= alpha / 2)
    return {"effect": statistics.median(diffs), "p_value": min(1.0, 2 * min(tail.values())),
            "ci_low": diffs[c - 1] if c else None, "ci_high": diffs[m * n - c] if c else None}
