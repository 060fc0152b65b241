"""Wall time and peak memory of `tracekit diff` against reporting both runs, on a pair of ~35 MB traces.

    python bench/bench_diff.py [--repeats 3] [BASELINE CANDIDATE]

Each variant runs in a fresh process (peak RSS is the process high-water mark), --repeats times round-robin;
medians printed:
  load     tracekit.load of both runs (ingest + edges)
  report   per run: load + tracekit.report.write_reports (every analysis the workbooks read, then the workbooks),
           i.e. `tracekit report` twice
  diff     load both + diff.compare + the diff workbook, i.e. `tracekit diff A B -o diff.xlsx`, by stage:
           summarize (the analyses of both runs: totals, then per step) and compare (joins, noise, verdicts)
The ratio diff / report is the figure of merit ("a diff costs little more than reporting both"). Default pair:
diff_pairs/resnet50_v100_workers0_vs_workers4 from the shared traces ($TRACEKIT_TRACES, else ../shared/traces;
35 MB of JSON each, 6 steps).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tracekit  # noqa: E402
import tracekit.inputs  # noqa: E402
from tracekit import diff
from tracekit.output import workbooks as report  # noqa: E402

TRACES = Path(os.environ.get("TRACEKIT_TRACES", Path(__file__).resolve().parent.parent.parent / "shared" / "traces"))
PAIR = TRACES / "diff_pairs" / "resnet50_v100_workers0_vs_workers4"
DEFAULT = (PAIR / "workers0.pt.trace.json.gz", PAIR / "workers4.pt.trace.json.gz")


def timed(stages: dict, name: str, fn):
    started = time.perf_counter()
    value = fn()
    stages[name] = stages.get(name, 0.0) + time.perf_counter() - started
    return value


def child(variant: str, base: Path, cand: Path) -> dict:
    stages: dict[str, float] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        if variant == "load":
            for path in (base, cand):
                timed(stages, "load", lambda: tracekit.load(path))
        elif variant == "report":
            for i, path in enumerate((base, cand)):
                tables = timed(stages, "load", lambda: tracekit.load(path))
                timed(stages, "report", lambda: report.write_reports(tables, Path(out) / str(i), problems=[]))
        else:
            sides = []
            for path in (base, cand):  # as the CLI does: one run's tables in memory at a time
                tables = timed(stages, "load", lambda: tracekit.load(path))
                sides.append(timed(stages, "summarize", lambda: diff.summarize(tables, path.name)))
                del tables
            result = timed(stages, "compare", lambda: diff.compare(*sides))
            timed(stages, "workbook", lambda: diff.write_workbook(result, Path(out) / "diff.xlsx"))
    return {"wall": time.perf_counter() - started, "stages": stages,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def json_mib(path: Path) -> float:
    """Uncompressed size of the trace files of a run (a file or a directory of ranks)."""
    files = tracekit.inputs.find_trace_files([path])
    return sum(len(gzip.decompress(f.read_bytes())) if f.name.endswith(".gz") else f.stat().st_size
               for f in files) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pair", nargs="*", type=Path, default=list(DEFAULT))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=("load", "report", "diff"))
    args = parser.parse_args()
    base, cand = args.pair
    if args.child:
        print(json.dumps(child(args.child, base, cand)))
        return
    sizes = [json_mib(p) for p in (base, cand)]
    print(f"baseline {base} ({sizes[0]:.1f} MiB of JSON), candidate {cand} ({sizes[1]:.1f} MiB); "
          f"{args.repeats} runs each, medians")
    variants = ("load", "report", "diff")
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for _ in range(args.repeats):  # round-robin, so a change in machine load hits every variant alike
        for variant in variants:
            out = subprocess.run([sys.executable, __file__, "--child", variant, str(base), str(cand)],
                                 check=True, capture_output=True, text=True).stdout
            runs[variant].append(json.loads(out))
    medians = {}
    for variant in variants:
        wall = statistics.median(r["wall"] for r in runs[variant])
        stages = {s: statistics.median(r["stages"][s] for r in runs[variant]) for s in runs[variant][0]["stages"]}
        rss = max(r["peak_rss_mib"] for r in runs[variant])
        medians[variant] = wall
        detail = ", ".join(f"{s} {v:.2f} s" for s, v in stages.items())
        print(f"{variant:7s} {wall:6.2f} s  peak RSS {rss:6.0f} MiB  ({detail})")
    print(f"diff / report both = {medians['diff'] / medians['report']:.2f}; "
          f"diff beyond loading = {medians['diff'] - medians['load']:.2f} s, "
          f"report beyond loading = {medians['report'] - medians['load']:.2f} s")


if __name__ == "__main__":
    main()
