"""`tracekit report` against TraceLens's perf report, on the same traces in the same run.

    python bench/report_vs_tracelens.py [--repeat 3] [--tracelens /tmp/tracelens/bin] [--synth-mb 60 120 250]
                                        [--shared nvidia/h100_bert-small.json.gz ...]

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
    parser.add_argument("--shared", nargs="*", default=["nvidia/h100_bert-small.json.gz",
                                                        "nvidia/a100_trainer_rank0of16_cudagraph.json.gz",
                                                        "diff_pairs/resnet50_v100_workers0_vs_workers4/"
                                                        "workers0.pt.trace.json.gz"])
    args = parser.parse_args()
    tracelens = args.tracelens / "TraceLens_generate_perf_report_pytorch"
    compileall.compile_dir(REPO / "tracekit", quiet=1)
    print(f"load average before: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        traces = [SHARED / name for name in args.shared if (SHARED / name).is_file()]
        traces += [synth_trace(tmp_path, mb) for mb in args.synth_mb]
        print("| trace | MB | tracekit s | TraceLens s | speed-up | tracekit peak MB | TraceLens peak MB | "
              "memory ratio | tracekit CPU s | TraceLens CPU s | CPU ratio |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for trace in traces:
            ours, theirs = [], []
            for _ in range(args.repeat):
                ours.append(run_fresh([sys.executable, "-m", "tracekit.cli", "report", str(trace), "-o",
                                       str(tmp_path / "tk"), "--force"]))
                theirs.append(run_fresh([str(tracelens), "--profile_json_path", str(trace), "--output_xlsx_path",
                                         str(tmp_path / "tl.xlsx")]))
            wall = [statistics.median(r.wall for r in runs) for runs in (ours, theirs)]
            rss = [statistics.median(r.peak_mb for r in runs) for runs in (ours, theirs)]
            cpu = [statistics.median(r.cpu for r in runs) for runs in (ours, theirs)]
            size = trace.stat().st_size / 2**20
            name = trace.parent.name if trace.name == "rank0.json" else trace.name
            print(f"| {name} | {size:.1f} | {wall[0]:.2f} | {wall[1]:.2f} | {wall[1] / wall[0]:.2f}× | "
                  f"{rss[0]:.0f} | {rss[1]:.0f} | {rss[1] / rss[0]:.2f}× | {cpu[0]:.2f} | {cpu[1]:.2f} | "
                  f"{cpu[1] / cpu[0]:.2f}× |", flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
