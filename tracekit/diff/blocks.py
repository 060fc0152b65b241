"""The verdict rule when a side holds several captures: captures as blocks.

Steps of one capture share that capture's conditions (the machine it ran on, its clocks, its data order, what else
ran beside it): the step-level rank test (verdicts.py) measures step-to-step variance only, so between two single
captures it calls run-to-run drift a change. With several captures a side, each capture is one block and
contributes one value per measure: the median of its steady steps' values (the capture's value over the trace where
it has no per-step values). The test is Welch's t on those per-capture values:

    shift = mean(cand blocks) − mean(base blocks),  se² = s_b²/k_b + s_c²/k_c,
    df = se⁴ / ((s_b²/k_b)²/(k_b − 1) + (s_c²/k_c)²/(k_c − 1))   (Welch–Satterthwaite),
    CI = shift ± t_(1−alpha/2; df) · se,  p = P(|T_df| ≥ |shift| / se)

so both the step-to-step noise (through each capture's median) and the capture-to-capture drift (through the spread
of the medians) widen the interval. With one capture on a side and k ≥ 2 on the other, the single capture's
between-capture variance is taken to be the other side's (se² = s²(1 + 1/k), df = k − 1). Why t and not ranks here:
captures are few (2-5 a side), and a rank test on 3 against 3 cannot reach p < 0.1; a capture's median of several
steps is close to normal. The level is 1 − alpha per measure, not corrected for the number of measures.

The t distribution comes from the regularised incomplete beta function, P(|T_ν| ≥ t) = I_(ν/(ν+t²))(ν/2, 1/2),
evaluated by its continued fraction (vectorised over measures), and its quantiles by bisection.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from tracekit.diff.verdicts import STAT_SCHEMA

TINY = 1e-300
FRACTION_TERMS = 200  # continued-fraction terms: converges to double precision for ν ≤ 1e6 at the tails used here


def incomplete_beta(x: np.ndarray, a: np.ndarray, b: float) -> np.ndarray:
    """I_x(a, b), the regularised incomplete beta function, elementwise (x in [0, 1], a > 0, b > 0)."""
    x, a = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(a, dtype=np.float64))
    lbeta = np.array([math.lgamma(ai + b) - math.lgamma(ai) - math.lgamma(b) for ai in a.ravel()]).reshape(a.shape)
    # The fraction converges fast for x < (a+1)/(a+b+2); beyond, I_x(a, b) = 1 − I_(1−x)(b, a).
    flip = x > (a + 1) / (a + b + 2)
    xx, aa, bb = np.where(flip, 1 - x, x), np.where(flip, b, a), np.where(flip, a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        front = np.exp(lbeta + aa * np.log(xx) + bb * np.log1p(-xx)) / aa
        value = front * continued_fraction(xx, aa, bb)
    value = np.where(flip, 1 - value, value)
    return np.clip(np.where(x <= 0, 0.0, np.where(x >= 1, 1.0, value)), 0.0, 1.0)


def continued_fraction(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The continued fraction of I_x(a, b) (modified Lentz), a fixed number of terms for every element."""

    def nonzero(v):
        return np.where(np.abs(v) < TINY, TINY, v)

    c = np.ones_like(x)
    d = 1 / nonzero(1 - (a + b) * x / (a + 1))
    h = d.copy()
    for m in range(1, FRACTION_TERMS + 1):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 / nonzero(1 + numerator * d)
            c = nonzero(1 + numerator / c)
            h = h * d * c
    return h


def t_two_sided_p(t: np.ndarray, df: np.ndarray) -> np.ndarray:
    """P(|T_df| ≥ |t|)."""
    t, df = np.broadcast_arrays(np.abs(np.asarray(t, dtype=np.float64)), np.asarray(df, dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(np.isinf(t), 0.0, df / (df + t * t))
    return incomplete_beta(x, df / 2, 0.5)


def t_quantile(prob: float, df: np.ndarray) -> np.ndarray:
    """t with P(T_df ≤ t) = prob (prob > 0.5), by bisection on x = df / (df + t²) (I_x is increasing in x)."""
    df = np.asarray(df, dtype=np.float64)
    tail = 2 * (1 - prob)
    low, high = np.zeros_like(df), np.ones_like(df)
    for _ in range(80):
        mid = (low + high) / 2
        below = incomplete_beta(mid, df / 2, 0.5) < tail
        bracket = np.where(below, mid, low), np.where(below, high, mid)
        if np.array_equal(bracket[0], low) and np.array_equal(bracket[1], high):
            break  # converged everywhere (adjacent floats): every further step would repeat this one
        low, high = bracket
    x = (low + high) / 2
    return np.sqrt(df * (1 - x) / x)


def capture_tests(base: list[list[float] | None], cand: list[list[float] | None], alpha: float) -> pl.DataFrame:
    """Per pair of block samples (one value per capture): n_base, n_cand (captures), effect (difference of the
    means), ci_low, ci_high (null when there are not enough captures: one on each side, or none on a side),
    p_value and level (the interval's level, 1 − alpha, exact under normality)."""
    rows = []
    spreads, dfs, effects, where = [], [], [], []
    for i, (xs, ys) in enumerate(zip(base, cand)):
        xs, ys = np.asarray(xs or [], dtype=np.float64), np.asarray(ys or [], dtype=np.float64)
        kb, kc = len(xs), len(ys)
        rows.append({"n_base": kb, "n_cand": kc})
        if kb == 0 or kc == 0 or kb + kc < 3:
            continue
        vb = xs.var(ddof=1) if kb > 1 else None
        vc = ys.var(ddof=1) if kc > 1 else None
        if vb is None:  # one baseline capture: its variance taken to be the candidate's
            se2, df = vc * (1 + 1 / kc), kc - 1
        elif vc is None:
            se2, df = vb * (1 + 1 / kb), kb - 1
        else:
            se2 = vb / kb + vc / kc
            parts = (vb / kb) ** 2 / (kb - 1) + (vc / kc) ** 2 / (kc - 1)
            df = se2 * se2 / parts if parts > 0 else kb + kc - 2
        spreads.append(math.sqrt(se2))
        dfs.append(df)
        effects.append(float(ys.mean() - xs.mean()))
        where.append(i)
    if where:
        se, df, effect = np.array(spreads), np.array(dfs), np.array(effects)
        half = t_quantile(1 - alpha / 2, df) * se
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(se > 0, effect / se, np.where(effect == 0, 0.0, np.inf))
        p_value = t_two_sided_p(t, df)
        for j, i in enumerate(where):
            rows[i].update(effect=effects[j], ci_low=float(effect[j] - half[j]), ci_high=float(effect[j] + half[j]),
                           p_value=float(p_value[j]), level=1 - alpha, coverage=1 - alpha)
    return pl.DataFrame(rows, schema=STAT_SCHEMA)
