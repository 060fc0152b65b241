"""Wall time of the step, collective and critical-path analyses: medians over repeats, peak RSS, and each
analysis's time against loading the same trace (ingest + edges: the baseline, measured in the same run).

    python3 bench/step_analyses.py [--repeat 5] [--synth-ranks 8 --synth-steps 20] [--copies 15]

Traces: the largest shared trace (A100 trainer, 67k events, 5 steps), the 8 DLRM ranks, a synthetic job (tracekit
synth) for many steps and ranks at once, and the A100 trainer replicated back to back (--copies, ~1M events, its
ProfilerStep numbers shifted per copy so that every copy's steps are steps).
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

import polars as pl  # noqa: E402

import tracekit  # noqa: E402
from tracekit import synth  # noqa: E402
from tracekit.engine import catalog
from tracekit.engine.tables import TraceTables  # noqa: E402
from tracekit.query import analyses

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


def replicate(tables: TraceTables, copies: int) -> TraceTables:
    """`copies` back-to-back copies of the events, ProfilerStep#N of copy i renamed ProfilerStep#(N + 1000 i)."""
    events = pl.from_arrow(tables.events)
    span = events["ts"].max() - events["ts"].min() + events["dur"].max()
    id_stride, corr_stride = events["id"].max() + 1, (events["correlation"].max() or 0) + 1
    step = pl.col("name").str.extract(r"^ProfilerStep#(\d+)$").cast(pl.Int64)
    frames = [events.with_columns(
        ts=pl.col("ts") + i * span, id=pl.col("id") + i * id_stride,
        correlation=pl.col("correlation") + i * corr_stride,
        name=pl.when(step.is_not_null()).then(pl.format("ProfilerStep#{}", step + 1000 * i)).otherwise("name"))
        for i in range(copies)]
    grown = tables.with_tables(events=pl.concat(frames).to_arrow(), edges=tables.edges.slice(0, 0),
                               diagnostics=tables.diagnostics.slice(0, 0))
    return tracekit.build_edges(grown)


def bench(label: str, paths: list[Path], repeat: int, copies: int = 1) -> None:
    if copies == 1:
        tables = tracekit.load(paths)
        load_s = median_s(lambda: tracekit.load(paths), repeat)
        what = "load (ingest + edges)"
    else:
        base = tracekit.load(paths)
        tables = replicate(base, copies)
        load_s = median_s(lambda: replicate(base, copies), repeat)
        what = "replicate + edges"
    events = tables.events.num_rows
    print(f"\n{label}: {events:,} events, {len(tables.rank_list)} rank(s); {what} {load_s:.3f} s")
    print(f"  {'analysis':24} {'median s':>9} {'x load':>7} {'rows':>8}")
    with catalog.connect(tables) as con:
        for name in QUERIES:
            rows = analyses.run(tables, name, con).height
            seconds = median_s(lambda: analyses.run(tables, name, con), repeat)
            print(f"  {name:24} {seconds:9.3f} {seconds / load_s:7.2f} {rows:8,}")
    if copies == 1:
        print(f"  peak RSS: load only {peak_rss_mb(paths, []):.0f} MB, load + these analyses "
              f"{peak_rss_mb(paths, QUERIES):.0f} MB")


def main() -> None:
    print("load average before:", open("/proc/loadavg").read().split()[:3])
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--synth-ranks", type=int, default=8)
    parser.add_argument("--synth-steps", type=int, default=20)
    parser.add_argument("--copies", type=int, default=15)
    args = parser.parse_args()
    largest = TRACES / "nvidia/a100_trainer_rank0of16_cudagraph.json.gz"
    if largest.exists():
        bench("A100 trainer (largest shared trace)", [largest], args.repeat)
    if largest.exists() and args.copies > 1:
        bench(f"A100 trainer x{args.copies}", [largest], args.repeat, args.copies)
    dlrm = TRACES / "multirank/dlrm_8ranks_v100"
    if dlrm.exists():
        bench("DLRM 8 ranks", sorted(dlrm.glob("worker*.pt.trace.json.gz")), args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        paths = synth.generate(tmp, ranks=args.synth_ranks, steps=args.synth_steps, seed=0)
        bench(f"synth {args.synth_ranks} ranks x {args.synth_steps} steps", paths, args.repeat)
    print("load average after:", open("/proc/loadavg").read().split()[:3])


if __name__ == "__main__":
    main()
