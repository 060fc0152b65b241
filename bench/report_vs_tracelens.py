"""`tracekit report` against TraceLens's perf report, on the same traces in the same run.

    python bench/report_vs_tracelens.py [--repeat 3] [--tracelens /tmp/tracelens/bin] [--synth-mb 60 120 250]
                                        [--shared nvidia/h100_bert-small.json.gz ...] [--small] [--baseline DIR]

--small: the shared traces of 2-2.7k events (SMALL_TRACES) and one 60 MB synth trace, whose ratio shows that a
change for small traces keeps the large ones where they were. --baseline DIR: a second tracekit checkout (e.g.
`git archive BASE | tar -x -C DIR`), run in the same rotation, for before/after figures from one run.

Each run is a fresh process (os.wait4 gives its own peak RSS and CPU time); the two tools alternate, run by run,
so a change of the machine's load hits both alike: read the ratios, which come from one run. Synth traces of about
the given sizes (MB of JSON, one rank) are written to a temporary folder first (`tracekit synth --scale`).
TraceLens: install its wheel in its own environment (see ../shared/peers/README.md) and pass its bin folder.
tracekit's modules are compiled to bytecode first, as `pip install` does for TraceLens's: where
PYTHONDONTWRITEBYTECODE is set (this machine), a checkout would otherwise compile ~30 modules on every run (~0.2 s).
CPU seconds (user + system, all threads) are printed too: on a loaded machine they move less than wall times.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, SHARED, run_fresh  # noqa: E402

MB_PER_SCALE = 0.96  # JSON MB of one rank, 4 steps, per unit of --scale (measured: scale 60 → 57.8 MB)


SMALL_TRACES = ["nvidia/h100_bert-small.json.gz", "amd/mi300x_bert-small.json.gz",
                "amd/mi300x_vllm_decode_graph_execution.json.gz"]


def tracekit_report(repo: Path, trace: Path, out: Path) -> list[str]:
    """`python -m tracekit.cli report` of the checkout REPO (first on the path)."""
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(repo)!r}); import tracekit.cli.__main__",
            "report", str(trace), "-o", str(out), "--force"]


def synth_trace(folder: Path, megabytes: float) -> Path:
    out = folder / f"synth_{megabytes:g}mb"
    subprocess.run([sys.executable, "-m", "tracekit.cli", "synth", "--ranks", "1", "--steps", "4", "--seed", "1",
                    "--scale", f"{megabytes / MB_PER_SCALE:.1f}", "-o", str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    return out / "rank0.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tracelens", type=Path, default=Path("/tmp/tracelens/bin"))
    parser.add_argument("--synth-mb", type=float, nargs="*", default=[60, 120, 250])
    parser.add_argument("--small", action="store_true", help="SMALL_TRACES and a 60 MB synth trace")
    parser.add_argument("--baseline", type=Path, help="another tracekit checkout, run in the same rotation")
    parser.add_argument("--shared", nargs="*", default=["nvidia/h100_bert-small.json.gz",
                                                        "nvidia/a100_trainer_rank0of16_cudagraph.json.gz",
                                                        "diff_pairs/resnet50_v100_workers0_vs_workers4/"
                                                        "workers0.pt.trace.json.gz"])
    args = parser.parse_args()
    if args.small:
        args.shared, args.synth_mb = SMALL_TRACES, [60]
    tracelens = args.tracelens / "TraceLens_generate_perf_report_pytorch"
    checkouts = [REPO] + ([args.baseline.resolve()] if args.baseline else [])
    for checkout in checkouts:
        compileall.compile_dir(checkout / "tracekit", quiet=1)
    print(f"load average before: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        traces = [SHARED / name for name in args.shared if (SHARED / name).is_file()]
        traces += [synth_trace(tmp_path, mb) for mb in args.synth_mb]
        print("| trace | MB | tracekit s | TraceLens s | speed-up | tracekit peak MB | TraceLens peak MB | "
              "memory ratio | tracekit CPU s | TraceLens CPU s | CPU ratio |"
              + (" baseline s | baseline peak MB | baseline CPU s |" if args.baseline else ""))
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if args.baseline else ""))
        for trace in traces:
            ours, theirs, base = [], [], []
            for _ in range(args.repeat):
                ours.append(run_fresh(tracekit_report(REPO, trace, tmp_path / "tk")))
                theirs.append(run_fresh([str(tracelens), "--profile_json_path", str(trace), "--output_xlsx_path",
                                         str(tmp_path / "tl.xlsx")]))
                if args.baseline:
                    base.append(run_fresh(tracekit_report(args.baseline.resolve(), trace, tmp_path / "base")))
            wall, rss, cpu = ([statistics.median(getattr(r, field) for r in runs) for runs in (ours, theirs, base)
                               if runs] for field in ("wall", "peak_mb", "cpu"))
            size = trace.stat().st_size / 2**20
            name = trace.parent.name if trace.name == "rank0.json" else trace.name
            print(f"| {name} | {size:.1f} | {wall[0]:.2f} | {wall[1]:.2f} | {wall[1] / wall[0]:.2f}× | "
                  f"{rss[0]:.0f} | {rss[1]:.0f} | {rss[1] / rss[0]:.2f}× | {cpu[0]:.2f} | {cpu[1]:.2f} | "
                  f"{cpu[1] / cpu[0]:.2f}× |" + (f" {wall[2]:.2f} | {rss[2]:.0f} | {cpu[2]:.2f} |" if base else ""),
                  flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
