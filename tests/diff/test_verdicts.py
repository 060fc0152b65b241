"""The statistics under the diff's verdicts (tracekit/diff/verdicts.py): the null distribution of U, the interval's
ranks and the rank test, against enumeration and published critical values."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from tests.support.rank_test import exact_rank_test
from tracekit.diff import verdicts


@pytest.mark.parametrize("sizes", [(2, 2), (3, 3), (3, 4), (4, 4), (4, 5), (5, 5), (3, 7), (6, 6)])
def test_null_distribution_of_u_matches_enumeration(sizes):
    m, n = sizes
    counts = [0] * (m * n + 1)
    for ys in map(set, itertools.combinations(range(m + n), m)):
        counts[sum(1 for j in ys for i in range(m + n) if i not in ys and j > i)] += 1
    total = math.comb(m + n, m)
    assert verdicts.u_distribution(m, n) == pytest.approx([c / total for c in counts], abs=1e-15)


def test_interval_ranks_match_published_critical_values():
    # Two-sided 5% critical values of the Mann-Whitney U (the largest U with P0(U <= u) <= 2.5%), from the
    # standard table (e.g. Siegel & Castellan, Table J): the interval is [D_(u+1), D_(mn-u)].
    published = {(4, 4): 0, (4, 5): 1, (5, 5): 2, (5, 6): 3, (6, 6): 5, (7, 7): 8, (8, 8): 13, (10, 10): 23,
                 (20, 20): 127}
    for (m, n), u in published.items():
        assert verdicts.interval_rank(m, n, 0.05) == u + 1, (m, n)
    # No interval at 95%: even total separation of 3 steps against 3 has p = 2/20.
    assert verdicts.interval_rank(3, 3, 0.05) == 0 and verdicts.interval_rank(1, 1, 0.05) == 0
    stats = verdicts.shift_tests([[1.0, 2, 3, 4, 5]], [[6.0, 7, 8, 9, 10]], 0.05).row(0, named=True)
    assert stats["p_value"] == pytest.approx(2 / 252) and stats["effect"] == 5.0
    # The level is the one asked for (1 - alpha, what the label says); the exact coverage is beside it.
    assert stats["level"] == pytest.approx(0.95) and stats["coverage"] == pytest.approx(1 - 2 * 4 / 252)


def test_rank_test_agrees_with_enumeration_on_random_samples_with_ties():
    rng = np.random.default_rng(7)
    for _ in range(30):
        n, m = rng.integers(2, 7, size=2)
        base = rng.integers(0, 6, size=n).astype(float).tolist()  # few distinct values: many ties
        cand = (rng.integers(0, 6, size=m) + rng.integers(0, 3)).astype(float).tolist()
        row = verdicts.shift_tests([base], [cand], 0.05).row(0, named=True)
        expected = exact_rank_test(base, cand)
        for column in ("effect", "p_value", "ci_low", "ci_high"):
            assert row[column] == pytest.approx(expected[column]), (base, cand, column)
