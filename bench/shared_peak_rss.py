"""Peak RSS of `tracekit report` on every shared trace and of `tracekit diff` on the shared workers0/workers4 pair,
each in a fresh process, with whether the critical path was computed (no analysis left out).

    python bench/shared_peak_rss.py [--limit-mb 1500]

Prints a table and the largest peak; "left out" lists the analyses that failed (a `tracekit: warning: analysis ...`
line), which must be empty.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, run_fresh  # noqa: E402

PAIR = SHARED / "diff_pairs" / "resnet50_v100_workers0_vs_workers4"


def left_out(stderr: str) -> list[str]:
    return [line.split("analysis ", 1)[1].split(" ", 1)[0] for line in stderr.splitlines()
            if line.startswith("tracekit: warning: analysis ")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-mb", type=float, default=1500)
    args = parser.parse_args()
    inputs = sorted(p for p in SHARED.rglob("*.json*") if "tracelens" not in str(p) and p.name.endswith(
        (".json", ".json.gz")) and "oracles" not in p.parts)
    folders = ("multirank", "et_pairs")  # a folder is one input: ranks, or a Kineto trace with its ET
    inputs = [p for p in inputs if p.parent.parent.name not in folders] + sorted(
        d for f in folders for d in (SHARED / f).iterdir() if d.is_dir())
    print("| command | input | wall s | peak MB | left out |\n|---|---|---:|---:|---|")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [("report", [str(p), "-o", f"{tmp}/r", "--force"], p) for p in inputs]
        jobs.append(("diff", [str(PAIR / "workers0.pt.trace.json.gz"), str(PAIR / "workers4.pt.trace.json.gz"),
                              "-o", f"{tmp}/d.xlsx", "--force"], PAIR))
        for command, extra, shown in jobs:
            run = run_fresh([sys.executable, "-m", "tracekit.cli", command, *extra], ok_codes=(0, 1, 3))
            worst = max(worst, run.peak_mb)
            print(f"| {command} | {shown.relative_to(SHARED)} | {run.wall:.1f} | {run.peak_mb:.0f} | "
                  f"{', '.join(left_out(run.stderr)) or '-'} |", flush=True)
    print(f"\nlargest peak RSS: {worst:.0f} MB ({'under' if worst < args.limit_mb else 'OVER'} {args.limit_mb:g} MB)")


if __name__ == "__main__":
    main()
