"""False-positive rate and detection power of `tracekit diff`'s verdicts, on synthetic captures with known truth.

    python bench/diff_verdicts.py [--jobs 4] [--pairs 10] [--noise 0.05] [--processes 2]
    python bench/diff_verdicts.py --captures 3 --drift 0.03 [--jobs 4] [--pairs 5] [--scale 0.5]

The second form measures the verdicts under run-level drift (`tracekit synth --drift`: one log-normal factor per
capture on every duration), several captures a side: see `captures_trial` below.

For each job (`tracekit synth --seed J`, 2 ranks × 6 steps) and each pair index k, one baseline capture
(--noise-seed 2k) is compared by the real diff (summarize + compare, i.e. what `tracekit diff` computes) with:
  same      another capture of the same job (--noise-seed 2k+1): every slower/faster verdict is a false positive
  slow F    that capture with one kernel (cunn_SoftMaxForward) F× slower (--slow-kernel): the kernel's row (all
            ranks) should be called slower; the step time's verdict is reported too (the kernel is a
            small part of a step, so the step slows by far less than F)
Prints, per section, judged measures (verdict slower, faster or unchanged) and the share called slower/faster in
the `same` pairs — per row (the verdict a section's row shows, decided by its deciding measures) and per measure —
and, per injected factor, the share of pairs whose kernel row is called slower (power). Pairs are independent captures.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import polars as pl  # noqa: E402

import tracekit  # noqa: E402
from tracekit import (
    diff,
    synth,  # noqa: E402
)

SLOWED_KERNEL = "cunn_SoftMaxForward"
FACTORS = (1.02, 1.05, 1.10, 1.50)
CALLED = ("slower", "faster")
JUDGED = ("slower", "faster", "no change", "inconclusive")
GEMM = "gemm"  # substring of the synth job's GEMM kernels (most of a step's GPU time): slowed for step-time power
GEMM_FACTORS = (1.05, 1.10, 1.25)


def side(root: Path, name: str, job: int, noise: float, noise_seed: int, slow: float | None) -> diff.Side:
    synth.generate(root / name, ranks=2, steps=6, seed=job, noise=noise, noise_seed=noise_seed,
                   slow_kernels={SLOWED_KERNEL: slow} if slow else None)
    return diff.summarize(tracekit.load(root / name), name)


def one_pair(task: tuple[int, int, float]) -> dict:
    """Counts for job `job`, pair `k`: false positives per section, and the verdicts of the slowed kernel."""
    job, k, noise, warmup = task
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = side(root, "base", job, noise, 2 * k, None)
        same = diff.compare(base, side(root, "same", job, noise, 2 * k + 1, None), warmup_steps=warmup)
        judged = same.measures.filter(pl.col("verdict").is_in(JUDGED))
        out = {"rows": Counter(), "rows_called": Counter(), "measures": Counter(), "measures_called": Counter(),
               "kernel": Counter(), "kernel_slower": Counter(), "step_slower": Counter()}
        for level, frame in (("rows", judged.filter(pl.col("decides"))), ("measures", judged)):
            out[level].update(frame["section"].to_list())
            out[f"{level}_called"].update(frame.filter(pl.col("verdict").is_in(CALLED))["section"].to_list())
        for factor in FACTORS:
            slowed = diff.compare(base, side(root, f"slow{factor}", job, noise, 2 * k + 1, factor),
                                  warmup_steps=warmup)
            rows = slowed.sections["kernels"].filter(pl.col("kernel_name").str.contains(SLOWED_KERNEL, literal=True))
            out["kernel"][factor] += rows.height
            out["kernel_slower"][factor] += rows.filter(pl.col("verdict") == "slower").height
            out["step_slower"][factor] += slowed.headline()["verdict"] == "slower"
    return out


def captures_side(root: Path, name: str, job: int, seeds: range, args, slow: dict | None = None) -> list[diff.Side]:
    sides = []
    for seed in seeds:
        synth.generate(root / f"{name}{seed}", ranks=2, steps=6, seed=job, scale=args.scale, noise=args.noise,
                       noise_seed=seed, drift=args.drift, slow_kernels=slow)
        sides.append(diff.summarize(tracekit.load(root / f"{name}{seed}"), f"{name}{seed}"))
    return sides


def called_by_section(result: diff.DiffResult) -> tuple[Counter, Counter]:
    rows = result.measures.filter(pl.col("verdict").is_in(JUDGED) & pl.col("decides"))
    return Counter(rows["section"].to_list()), Counter(rows.filter(pl.col("verdict").is_in(CALLED))["section"].to_list())


def captures_trial(task: tuple) -> dict:
    """Job `job`, trial `k`: K baseline captures and K candidate captures of the same job (other noise seeds, so
    other drift factors), and the candidate captures again with the GEMM kernels slowed by each of GEMM_FACTORS.
    Counts, per section, rows judged and called by the K-against-K block test and by the single-capture test on
    the first capture of each side; the step time's verdicts; the true median step slowdown (ground truth)."""
    job, k, args = task
    K = args.captures
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        seeds = [range(1000 * k + 10 * i, 1000 * k + 10 * i + K) for i in range(2)]
        base = captures_side(root, "base", job, seeds[0], args)
        same = captures_side(root, "same", job, seeds[1], args)
        out = {"blocks": called_by_section(diff.compare(base, same)),
               "single": called_by_section(diff.compare(base[0], same[0])),
               "step_blocks": Counter(), "step_single": Counter(), "truth": {}}
        for factor in GEMM_FACTORS:
            slow = captures_side(root, f"slow{factor}", job, seeds[1], args, {GEMM: factor})
            out["step_blocks"][factor] += diff.compare(base, slow).headline()["verdict"] == "slower"
            out["step_single"][factor] += diff.compare(base[0], slow[0]).headline()["verdict"] == "slower"
            truth = [synth.read_ground_truth(root / f"{name}{seeds[1][0]}")["ranks"][0]["steps"]
                     for name in ("same", f"slow{factor}")]
            medians = [sorted(s["dur_ns"] for s in steps)[len(steps) // 2] for steps in truth]
            out["truth"][factor] = medians[1] / medians[0] - 1
    return out


def captures_main(args) -> None:
    start = time.perf_counter()
    tasks = [(job, k, args) for job in range(args.jobs) for k in range(args.pairs)]
    with Pool(args.processes) as pool:
        results = pool.map(captures_trial, tasks, chunksize=1)
    trials = len(tasks)
    print(f"{trials} trials (jobs 0..{args.jobs - 1} × {args.pairs}), {args.captures} captures a side, 2 ranks × 6 "
          f"steps, scale {args.scale}, noise {args.noise}, drift {args.drift}, alpha {diff.DEFAULT_ALPHA}, floor "
          f"{diff.DEFAULT_FLOOR_PERCENT}%; {time.perf_counter() - start:.0f} s")
    print("\nfalse positives under drift (same job; rows called slower/faster of rows judged):")
    print(f"  {'section':<17}{'blocks judged':>14}{'called':>8}{'rate':>8} {'single judged':>14}{'called':>8}"
          f"{'rate':>8}")
    for section in diff.SECTIONS:
        cells = []
        for test in ("blocks", "single"):
            judged = sum(r[test][0][section] for r in results)
            called = sum(r[test][1][section] for r in results)
            cells.append(f"{judged:>14}{called:>8}{100 * called / judged if judged else 0:>7.2f}%")
        print(f"  {section:<17}{cells[0]} {cells[1]}")
    print("\npower on the step time (GEMM kernels slowed; share of trials called slower):")
    for factor in GEMM_FACTORS:
        truth = 100 * sum(r["truth"][factor] for r in results) / trials
        blocks_hit = sum(r["step_blocks"][factor] for r in results)
        single_hit = sum(r["step_single"][factor] for r in results)
        print(f"  GEMM ×{factor:.2f} (median step +{truth:.1f}% in the ground truth): {args.captures} captures a side "
              f"{blocks_hit}/{trials}; one capture a side {single_hit}/{trials}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=4, help="synth job seeds 0..JOBS-1")
    parser.add_argument("--pairs", type=int, default=10, help="independent capture pairs per job")
    parser.add_argument("--noise", type=float, default=0.05, help="synth --noise (log-normal sigma per duration)")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--warmup-steps", type=int, default=1,
                        help="diff --warmup-steps for the pairs (the published table: 1, i.e. 5 steps against 5)")
    parser.add_argument("--captures", type=int, default=0,
                        help="captures a side: run the drift experiment (captures_trial) instead of the pairs")
    parser.add_argument("--drift", type=float, default=0.03, help="synth --drift (with --captures)")
    parser.add_argument("--scale", type=float, default=0.5, help="synth --scale (with --captures)")
    args = parser.parse_args()
    if args.captures:
        captures_main(args)
        return
    start = time.perf_counter()
    tasks = [(job, k, args.noise, args.warmup_steps) for job in range(args.jobs) for k in range(args.pairs)]
    with Pool(args.processes) as pool:
        results = pool.map(one_pair, tasks, chunksize=1)
    total = {key: sum((r[key] for r in results), Counter()) for key in results[0]}
    pairs = len(tasks)
    level = diff.DEFAULT_ALPHA
    print(f"{pairs} pairs (jobs 0..{args.jobs - 1} × {args.pairs}), 2 ranks × 6 steps, noise {args.noise}, "
          f"alpha {level}, --warmup-steps {args.warmup_steps}, floor {diff.DEFAULT_FLOOR_PERCENT}%; "
          f"{time.perf_counter() - start:.0f} s")
    print("\nfalse positives (two captures of one job):")
    print(f"  {'section':<14}{'rows judged':>12}{'called':>8}{'rate':>8}{'measures':>10}{'called':>8}{'rate':>8}")
    worst = 0.0
    for section in diff.SECTIONS:
        rows, measures = total["rows"][section], total["measures"][section]
        row_rate = total["rows_called"][section] / rows if rows else 0.0
        measure_rate = total["measures_called"][section] / measures if measures else 0.0
        worst = max(worst, row_rate, measure_rate)
        print(f"  {section:<14}{rows:>12}{total['rows_called'][section]:>8}{100 * row_rate:>7.2f}%"
              f"{measures:>10}{total['measures_called'][section]:>8}{100 * measure_rate:>7.2f}%")
    print(f"  worst section rate {100 * worst:.2f}% (level {100 * level:.0f}%): {'OK' if worst <= level else 'OVER'}")
    print(f"\npower ({SLOWED_KERNEL} slowed; its row, all ranks):")
    for factor in FACTORS:
        rows = total["kernel"][factor]
        print(f"  +{100 * (factor - 1):>4.0f}%: kernel row called slower {total['kernel_slower'][factor]}/{rows} "
              f"({100 * total['kernel_slower'][factor] / rows:.0f}%); step time called slower "
              f"{total['step_slower'][factor]}/{pairs}")


if __name__ == "__main__":
    main()
