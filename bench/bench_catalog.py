"""What the SQL catalog costs per analysis: connection setup (the macros a query needs defined) and one analysis
run on a fresh connection, on one shared trace; plus `tracekit run kernel_summary` as a user runs it.

    python bench/bench_catalog.py [--repeats 5] [--trace nvidia/h100_bert-small.json.gz]

Medians of `--repeats`, all in one run (the machine is noisy: compare numbers of one run only):
  setup:     a fresh `catalog.connect(tables)` ready for the analysis (before the catalog declared includes, every
             prelude ran on every connection; now the analysis's includes, transitively);
  run:       `analyses.run(tables, NAME)`: a fresh connection, its setup, the analyses it reads and its own query;
  cli:       `tracekit run kernel_summary TRACE` in a fresh process (interpreter start-up, imports, reading).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from common import REPO, SHARED, run_fresh

from tracekit.engine import catalog
from tracekit.pipeline import load
from tracekit.query import analyses

NAMES = ("kernel_summary", "op_summary", "gpu_timeline", "steps", "critical_path_summary", "collectives",
         "rank_info")


def ready(con, name: str) -> None:
    """Whatever a connection needs before NAME's query can run (nothing more than `connect` before includes)."""
    load = getattr(catalog, "load_includes", None)
    if load is not None:
        load(con, catalog.load_query(name).includes)


def median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--trace", default="nvidia/h100_bert-small.json.gz")
    args = parser.parse_args()
    trace = SHARED / args.trace
    tables = load([trace])
    analyses.run(tables, "kernel_summary")  # warm: imports, file reads, DuckDB start-up

    def setup(name):
        with catalog.connect(tables) as con:
            ready(con, name)

    print(f"{args.trace}: {tables.events.num_rows} events; medians of {args.repeats} (ms)")
    print(f"{'analysis':24} {'setup':>8} {'run':>8}")
    for name in NAMES:
        setup_s = median_s(lambda: setup(name), args.repeats)
        run_s = median_s(lambda: analyses.run(tables, name), args.repeats)
        print(f"{name:24} {setup_s * 1e3:8.1f} {run_s * 1e3:8.1f}")
    cli = [run_fresh([sys.executable, "-m", "tracekit.cli", "run", "kernel_summary", str(trace), "--format", "csv"]).wall
           for _ in range(args.repeats)]
    print(f"tracekit run kernel_summary (fresh process): {statistics.median(cli):.3f} s  ({REPO.name})")


if __name__ == "__main__":
    main()
