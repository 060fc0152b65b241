"""Benchmark `tracekit report`: end to end (fresh process) and by phase, and the sheet writer on a large table.

    python bench/bench_report.py [--repeat 3] [--rows 100000] [--traces DIR]

End to end: wall time and peak RSS of `python -m tracekit.cli report TRACE -o OUT --force`, each run a fresh
process (os.wait4 gives its own peak RSS), median of --repeat runs, on the two traces TraceLens was timed on
(TraceLens's own figures, from the task brief, are printed beside them: it was not run here).
Phases (in one process): import, load (ingest + edges), analyses, workbook writing.
Writer: a synthetic op_by_shape-like table of --rows rows written by tracekit's writer (rows rendered by Polars)
and, as the baseline in the same run, cell by cell with xlsxwriter's write_number / write_string.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's tracekit, installed or not
sys.path.insert(0, str(REPO / "bench"))
from common import run_fresh  # noqa: E402

TRACES = {  # trace → TraceLens perf report (seconds, MB), as measured by the brief's author
    "amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz": (3.9, 346),
    "nvidia/b200_eager_rank0of8.json.gz": (2.15, 239),
}


def tracekit_fresh(args: list[str]):
    """One fresh `python -m tracekit.cli ...` (bench/common.py), any exit but 0 an error."""
    return run_fresh([sys.executable, "-m", "tracekit.cli", *args], ok_codes=(0,))


def end_to_end(trace: Path, repeat: int) -> dict:
    runs = []
    with tempfile.TemporaryDirectory() as out:
        for _ in range(repeat):
            runs.append(tracekit_fresh(["report", str(trace), "-o", out, "--force"]))
        import_only = [tracekit_fresh(["--version"]) for _ in range(repeat)]
    return {"wall": statistics.median(r.wall for r in runs), "rss": statistics.median(r.peak_mb for r in runs),
            "cpu": statistics.median(r.cpu for r in runs), "startup": statistics.median(r.wall for r in import_only),
            "startup_rss": statistics.median(r.peak_mb for r in import_only)}


def phases(trace: Path) -> dict:
    """Seconds per phase in this process (imports are already done: see startup in end_to_end)."""
    import tracekit
    from tracekit.output import workbooks as report

    t0 = time.perf_counter()
    tables = tracekit.load(trace)
    t1 = time.perf_counter()
    done = report.run_analyses(tables)
    t2 = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        paths = report.write_reports(tables, Path(out), analyses_done=done, problems=[])
        t3 = time.perf_counter()
        size = sum(p.stat().st_size for p in paths)
    return {"load": t1 - t0, "analyses": t2 - t1, "write": t3 - t2, "events": tables.events.num_rows,
            "bytes": size, "failures": len(done.failures)}


def large_table(rows: int):
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(0)
    times = {c: rng.integers(1_000, 50_000_000, rows) / 1e6 for c in (
        "direct_kernel_ms", "percent_kernel", "cumulative_percent", "kernel_mean_us", "kernel_median_us",
        "kernel_min_us", "kernel_max_us", "subtree_kernel_ms", "total_cpu_ms", "self_cpu_ms")}
    return pl.DataFrame({
        "rank": [0] * rows, "name": [f"aten::op_{i % 700}" for i in range(rows)],
        "input_dims": [f"[[{i % 4096}, {i % 13}], [{i % 31}]]" for i in range(rows)],
        "input_type": [["float", "c10::BFloat16"][i % 2] for i in range(rows)],
        "category": [["GEMM", "elementwise", "attention"][i % 3] for i in range(rows)],
        "count": rng.integers(1, 1000, rows), **times})


def writer(rows: int) -> dict:
    """tracekit's writer vs xlsxwriter cell by cell, same table, CPU seconds (the machine may be shared)."""
    import xlsxwriter

    from tracekit.output import workbooks as report
    from tracekit.output.xlsx import Sheet, shape_rows, write_workbook
    frame = large_table(rows)
    block = next(b for s in report.workbook_spec("rank").sheets for b in s.blocks if b.query == "op_by_shape")
    shaped = shape_rows(block, frame)
    with tempfile.TemporaryDirectory() as out:
        c0 = time.process_time()
        write_workbook(Path(out) / "tracekit.xlsx", [Sheet("Ops by shape", ((block, shaped),))], report.style())
        ours = time.process_time() - c0

        c0 = time.process_time()
        book = xlsxwriter.Workbook(str(Path(out) / "cells.xlsx"))
        ws = book.add_worksheet()
        columns = [c.col for c in block.columns]
        number = book.add_format({"num_format": "#,##0.000"})
        for c, name in enumerate(columns):
            series = shaped.get_column(name)
            write = ws.write_string if series.dtype.is_numeric() is False else ws.write_number
            fmt = None if series.dtype.is_numeric() is False else number
            for r, value in enumerate(series.to_list(), start=1):
                if value is not None:
                    write(r, c, value, fmt) if fmt else write(r, c, value)
        book.close()
        cells = time.process_time() - c0
    return {"rows": rows, "cells": rows * len(block.columns), "ours": ours, "xlsxwriter_cells": cells}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--traces", type=Path,
                        default=Path(os.environ.get("TRACEKIT_TRACES", REPO.parent / "shared" / "traces")))
    parser.add_argument("--phases-of", type=Path, help=argparse.SUPPRESS)  # internal: print phases of one trace
    args = parser.parse_args()
    if args.phases_of:
        print(json.dumps(phases(args.phases_of)))
        return

    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print("| trace | events | tracekit report wall (s) | CPU (s) | peak RSS (MB) | startup alone (s / MB) | load / "
          "analyses / write (s) | TraceLens (s / MB) | speed-up | memory ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, (tl_seconds, tl_mb) in TRACES.items():
        trace = args.traces / name
        if not trace.exists():
            print(f"| {name} | absent under {args.traces} | | | | | | | | |")
            continue
        e2e = end_to_end(trace, args.repeat)
        # Phases in a child too: this process stays small, so the next children's peak RSS is their own.
        ph = json.loads(subprocess.run([sys.executable, __file__, "--phases-of", str(trace)], check=True,
                                       capture_output=True, text=True).stdout)
        print(f"| {name} | {ph['events']:,} | {e2e['wall']:.2f} | {e2e['cpu']:.2f} | {e2e['rss']:.0f} | "
              f"{e2e['startup']:.2f} / "
              f"{e2e['startup_rss']:.0f} | {ph['load']:.2f} / {ph['analyses']:.2f} / {ph['write']:.2f} | "
              f"{tl_seconds} / {tl_mb} | {tl_seconds / e2e['wall']:.1f}× | {tl_mb / e2e['rss']:.2f}× |"
              + (f" ({ph['failures']} queries missing)" if ph["failures"] else ""))
    w = writer(args.rows)
    print(f"\nwriter, {w['rows']:,} rows × 15 columns ({w['cells']:,} cells), CPU s: tracekit {w['ours']:.2f}, "
          f"xlsxwriter cell by cell {w['xlsxwriter_cells']:.2f} ({w['xlsxwriter_cells'] / w['ours']:.1f}× slower), "
          f"{w['cells'] / w['ours'] / 1e6:.2f} M cells/s")


if __name__ == "__main__":
    main()
