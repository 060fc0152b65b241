"""Instructions instead of seconds: a command, or the report's analyses alone, under valgrind's callgrind, in this
checkout and in a baseline. For changes a few percent large on a machine whose speed moves more than that (the
shared 2-core machine of 2026-12-02 ran the same Python loop in 27 to 54 ms within a few seconds): the counts of one
binary on one input are the same from run to run, whatever else the machine is doing.

    python bench/instructions.py [--baseline DIR] [--traces NAME ...] [WHAT ...]

WHAT (default: analyses report):
  analyses   the report's analyses of each trace on one DuckDB thread (`analyses.run_all`, as `report` runs them,
             one at a time), counted from after the trace is loaded: the SQL alone, without the read and the link
  report     the whole `tracekit report TRACE -o DIR`, its helper processes included (`--trace-children`)
  timeline   the whole `tracekit timeline TRACE -o FILE`
  ingest     the whole `tracekit ingest TRACE -o DIR`

A process under callgrind runs ~50 times slower, one thread at a time: a report of OWLv2 takes ~5 minutes. The two
checkouts run side by side (two processes). Instructions are not seconds: a change that moves memory rather than
work (a copy avoided, a sort of data already in order) may show in one and not the other; the bench's wall-clock
tables are the measure, these counts say which way a small change went. Needs valgrind (Debian's `valgrind`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import REPO, table, trace_path  # noqa: E402

# the analyses of a report, after the load: callgrind counts only between the two callgrind_control calls
# (`--instr-atstart=no`), so the read, the link and the imports are left out
ANALYSES = """
import os, subprocess, sys
import tracekit
from tracekit.output.workbooks import per_rank_report_queries
from tracekit.query import analyses
tables = tracekit.load(sys.argv[1])
control = lambda *args: subprocess.run(["callgrind_control", *args, str(os.getpid())], check=True,
                                       stdout=subprocess.DEVNULL)
control("-i", "on")
analyses.run_all(tables, per_rank_report_queries(), threads=1)
control("-d", "analyses")
"""
DEFAULT_TRACES = ["recorded/owlv2.json.gz", "recorded/sd35_a.json.gz"]


def callgrind(args: list[str], repo: Path, out: Path, whole: bool) -> int:
    """Instructions of `python ARGS` with REPO's tracekit: every process of it (WHOLE), or between the program's own
    callgrind_control calls."""
    out.mkdir(parents=True)
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/callgrind.%p"]
    valgrind += ["--trace-children=yes"] if whole else ["--instr-atstart=no"]
    proc = subprocess.run([*valgrind, sys.executable, *args], cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if proc.returncode not in (0, 3):
        raise SystemExit(f"{' '.join(args)} in {repo} failed: {proc.stderr.decode(errors='replace')[-2000:]}")
    # a whole run's processes each write a file; a program that dumps its part writes that part's file too
    files = sorted(out.glob("callgrind.*"))
    parts = [f for f in files if "." in f.name[len("callgrind."):]] or files
    return sum(totals(f) for f in (files if whole else parts))


def totals(path: Path) -> int:
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    return 0


def command_args(what: str, trace: Path, tmp: Path) -> tuple[list[str], bool]:
    if what == "analyses":
        return ["-c", ANALYSES, str(trace)], False
    out = tmp / ("out.json.gz" if what == "timeline" else "out")
    return ["-m", "tracekit.cli", what, str(trace), "-o", str(out)] + ([] if what == "timeline" else ["--force"]), True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="*", default=["analyses", "report"],
                        choices=["analyses", "report", "timeline", "ingest"])
    parser.add_argument("--traces", nargs="+", default=DEFAULT_TRACES)
    parser.add_argument("--baseline", type=Path, help="another checkout (e.g. a git worktree of the base commit)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("needs valgrind and callgrind_control (Debian: apt-get install valgrind)")
    checkouts = {"this checkout": REPO} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    rows = []
    with tempfile.TemporaryDirectory(prefix="tracekit-instructions-") as tmp:
        for name in args.traces:
            trace = trace_path(name)
            for what in args.what:
                runs = {}
                with ThreadPoolExecutor(len(checkouts)) as pool:
                    for i, (label, repo) in enumerate(checkouts.items()):
                        work = Path(tmp) / f"{trace.name}-{what}-{i}"
                        cmd, whole = command_args(what, trace, work)
                        runs[label] = pool.submit(callgrind, cmd, repo, work / "callgrind", whole)
                counts = {label: future.result() for label, future in runs.items()}
                row = [trace.name, what, f"{counts['this checkout'] / 1e9:.2f}"]
                if args.baseline:
                    row += [f"{counts['baseline'] / 1e9:.2f}", f"{counts['this checkout'] / counts['baseline']:.3f}"]
                rows.append(row)
                print(".", end="", flush=True)
    header = ["trace", "what", "instructions (G)"] + (["baseline (G)", "ratio"] if args.baseline else [])
    print("\n" + table(header, rows))


if __name__ == "__main__":
    main()
