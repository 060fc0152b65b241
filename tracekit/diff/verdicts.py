"""The diff's verdict rule: is a measure's per-step value shifted between two runs, by how much, and how sure is it?

Each side gives, per measure, one value per steady-state step (warm-up steps left out by the diff). The shift of the
candidate's steps against the baseline's is tested with the Wilcoxon–Mann–Whitney rank test and estimated with the
Hodges–Lehmann estimator (the median of the m·n pairwise differences cand_j − base_i), whose distribution-free
confidence interval (Moses) comes from the same null distribution of U:

    CI = [D_(c), D_(mn+1−c)],  c = the largest integer with P0(U ≤ c−1) ≤ alpha/2

(D sorted pairwise differences, 1-based). The test counts strict wins only (a tie counts against the change), which
makes the exact p-value conservative under ties, and makes "the CI excludes 0" and "p ≤ alpha" the same event.
Why ranks: a handful of steps, skewed and with the odd stall, break the normal assumption of a t interval (whose
standard deviation an outlier inflates); ranks need only that steps of one run are exchangeable. With c < 1 no
interval of that level exists (e.g. 3 steps against 3: the smallest two-sided p is 2/20): not enough steps to say.

U's null distribution is exact (a recursion over the sample sizes) up to EXACT_MAX_STEPS per side, and normal
(with continuity correction) beyond.
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

import numpy as np
import polars as pl

EXACT_MAX_STEPS = 50
NOT_ENOUGH = "not enough steps to say"
NO_CHANGE = "no change"  # the interval lies within the practical floor
INCONCLUSIVE = "inconclusive"  # the interval reaches zero (or the shift is under the floor) but not within the floor
STAT_SCHEMA = {"n_base": pl.Int64, "n_cand": pl.Int64, "effect": pl.Float64, "ci_low": pl.Float64,
               "ci_high": pl.Float64, "p_value": pl.Float64, "level": pl.Float64, "coverage": pl.Float64}


@lru_cache(maxsize=None)
def u_distribution(m: int, n: int) -> np.ndarray:
    """P0(U = u) for u = 0..m·n, U the number of (x, y) pairs with y > x, m ys and n xs, no ties, under the null.

    The largest of the m + n values is one of the ys with probability m/(m+n), and then beats all n xs."""
    if m == 0 or n == 0:
        return np.ones(1)
    out = np.zeros(m * n + 1)
    out[n:] += m / (m + n) * u_distribution(m - 1, n)
    out[: m * (n - 1) + 1] += n / (m + n) * u_distribution(m, n - 1)
    return out


def upper_tail(m: int, n: int, wins: np.ndarray) -> np.ndarray:
    """P0(U ≥ wins) for an array of win counts."""
    if max(m, n) <= EXACT_MAX_STEPS:
        tail = np.cumsum(u_distribution(m, n)[::-1])[::-1]
        return np.minimum(1.0, tail[np.clip(wins, 0, m * n)])
    sigma = math.sqrt(m * n * (m + n + 1) / 12)
    z = (wins - 0.5 - m * n / 2) / sigma
    return np.array([0.5 * math.erfc(v / math.sqrt(2)) for v in np.atleast_1d(z)])


def interval_rank(m: int, n: int, alpha: float) -> int:
    """c: the CI is [D_(c), D_(mn+1−c)]; 0 when no interval at level 1 − alpha exists."""
    if m == 0 or n == 0:
        return 0
    if max(m, n) <= EXACT_MAX_STEPS:
        cdf = np.cumsum(u_distribution(m, n))
        return int(np.searchsorted(cdf, alpha / 2 * (1 + 1e-12), side="right"))
    z = NormalDist().inv_cdf(1 - alpha / 2)
    return max(0, math.floor(m * n / 2 - z * math.sqrt(m * n * (m + n + 1) / 12) - 0.5) + 1)


def interval_level(m: int, n: int, c: int) -> float:
    """The interval's exact confidence level, 1 − 2 P0(U ≤ c − 1) (≥ 1 − alpha)."""
    if c < 1:
        return float("nan")
    if max(m, n) > EXACT_MAX_STEPS:
        return 1 - 2 * float(upper_tail(m, n, np.array([m * n - c + 1]))[0])
    return 1 - 2 * float(u_distribution(m, n)[:c].sum())


def shift_tests(base: list[list[float] | None], cand: list[list[float] | None], alpha: float) -> pl.DataFrame:
    """Per pair of samples: n_base, n_cand, effect (Hodges–Lehmann shift cand − base), ci_low, ci_high (null when
    there are not enough steps for level 1 − alpha), p_value (two-sided, exact for small samples), level (1 − alpha,
    the level asked for) and coverage (the interval's exact coverage, ≥ level: U is discrete). Pairs of the same
    sizes are computed together."""
    sizes = [(len(b or ()), len(c or ())) for b, c in zip(base, cand)]
    rows: list[dict | None] = [None] * len(sizes)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, size in enumerate(sizes):
        groups.setdefault(size, []).append(i)
    for (n, m), members in groups.items():
        if n == 0 or m == 0:
            for i in members:
                rows[i] = {"n_base": n, "n_cand": m}
            continue
        xs = np.array([base[i] for i in members], dtype=np.float64)
        ys = np.array([cand[i] for i in members], dtype=np.float64)
        diffs = np.sort((ys[:, None, :] - xs[:, :, None]).reshape(len(members), n * m), axis=1)
        effect = np.median(diffs, axis=1)
        wins, losses = (diffs > 0).sum(axis=1), (diffs < 0).sum(axis=1)
        p_value = np.minimum(1.0, 2 * np.minimum(upper_tail(m, n, wins), upper_tail(m, n, losses)))
        c = interval_rank(m, n, alpha)
        level = interval_level(m, n, c)
        for j, i in enumerate(members):
            rows[i] = {"n_base": n, "n_cand": m, "effect": float(effect[j]), "p_value": float(p_value[j]),
                       "ci_low": float(diffs[j, c - 1]) if c >= 1 else None,
                       "ci_high": float(diffs[j, n * m - c]) if c >= 1 else None,
                       "level": 1 - alpha if c >= 1 else None, "coverage": level if c >= 1 else None}
    return pl.DataFrame(rows, schema=STAT_SCHEMA)


def verdict(direction: pl.Expr, floor: pl.Expr, call_floor: pl.Expr | None = None) -> pl.Expr:
    """slower / faster when the CI of the shift excludes 0 and the shift exceeds `call_floor` (default `floor`: a
    practical minimum, in the measure's unit); no change when the whole CI lies within ±floor; inconclusive otherwise
    (the CI reaches 0, or a shift under the call floor whose CI reaches beyond the floor); not enough steps to say
    without a CI. A call floor above the floor (host times with one capture a side) leaves a significant shift under
    it inconclusive: run-to-run noise of that size is not ruled out. Keys on one side only are added / removed (a
    value null on both sides gets none); measures with no better direction (direction 0, counts) get none. Expects
    the columns of `shift_tests` (or blocks.capture_tests) beside base and cand."""
    called = ((pl.col("ci_low") > 0) | (pl.col("ci_high") < 0)) & (pl.col("effect").abs() > (
        floor if call_floor is None else call_floor))
    within = (pl.col("ci_low") >= -floor) & (pl.col("ci_high") <= floor)
    # A value null on both sides is a key both runs have with nothing to measure (a rate of an op that launched no
    # kernel): no verdict, not "added".
    return (pl.when(pl.col("base").is_null() & pl.col("cand").is_null()).then(pl.lit(None, pl.String))
            .when(pl.col("base").is_null()).then(pl.lit("added"))
            .when(pl.col("cand").is_null()).then(pl.lit("removed"))
            .when(direction == 0).then(pl.lit(None, pl.String))
            .when(pl.col("ci_low").is_null()).then(pl.lit(NOT_ENOUGH))
            .when(called & (pl.col("effect") * direction > 0)).then(pl.lit("slower"))
            .when(called).then(pl.lit("faster"))
            .when(within).then(pl.lit(NO_CHANGE))
            .otherwise(pl.lit(INCONCLUSIVE)))
