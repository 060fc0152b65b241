"""Wall time of the step, collective and critical-path analyses: medians over repeats, peak RSS, and each
analysis's time against loading the same trace (ingest + edges: the baseline, measured in the same run).

    python3 bench/step_analyses.py [--repeat 5] [--synth-ranks 8 --synth-steps 20]

Traces: the largest shared trace (A100 trainer, 109k events, 5 steps), the 8 DLRM ranks, and a synthetic job
(tracekit synth) for many steps and ranks at once.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import tracekit  # noqa: E402
from tracekit import analyses, synth  # noqa: E402

TRACES = REPO.parent / "shared" / "traces"
QUERIES = ["steps", "step_stats", "collectives", "collective_skew", "collective_waits", "critical_path",
           "critical_path_summary"]


def median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peak_rss_mb(paths: list[Path], queries: list[str]) -> float:
    # VmHWM of a fresh process: ru_maxrss would carry the parent's peak over across exec.
    code = ("import re, sys, tracekit; from tracekit import analyses; t = tracekit.load(sys.argv[2:]); "
            "[analyses.run(t, q) for q in sys.argv[1].split(',') if q]; "
            "print(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))")
    out = subprocess.run([sys.executable, "-c", code, ",".join(queries), *map(str, paths)], capture_output=True,
                         text=True, check=True, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    return int(out.stdout.strip()) / 1024


def bench(label: str, paths: list[Path], repeat: int) -> None:
    tables = tracekit.load(paths)
    events = tables.events.num_rows
    load_s = median_s(lambda: tracekit.load(paths), repeat)
    print(f"\n{label}: {events:,} events, {len(tables.rank_list)} rank(s); load (ingest + edges) {load_s:.3f} s")
    print(f"  {'analysis':24} {'median s':>9} {'x load':>7} {'rows':>8}")
    with analyses.connect(tables) as con:
        for name in QUERIES:
            rows = analyses.run(tables, name, con).height
            seconds = median_s(lambda: analyses.run(tables, name, con), repeat)
            print(f"  {name:24} {seconds:9.3f} {seconds / load_s:7.2f} {rows:8,}")
    print(f"  peak RSS: load only {peak_rss_mb(paths, []):.0f} MB, load + these analyses "
          f"{peak_rss_mb(paths, QUERIES):.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--synth-ranks", type=int, default=8)
    parser.add_argument("--synth-steps", type=int, default=20)
    args = parser.parse_args()
    largest = TRACES / "nvidia/a100_trainer_rank0of16_cudagraph.json.gz"
    if largest.exists():
        bench("A100 trainer (largest shared trace)", [largest], args.repeat)
    dlrm = TRACES / "multirank/dlrm_8ranks_v100"
    if dlrm.exists():
        bench("DLRM 8 ranks", sorted(dlrm.glob("worker*.pt.trace.json.gz")), args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        paths = synth.generate(tmp, ranks=args.synth_ranks, steps=args.synth_steps, seed=0)
        bench(f"synth {args.synth_ranks} ranks x {args.synth_steps} steps", paths, args.repeat)


if __name__ == "__main__":
    main()
