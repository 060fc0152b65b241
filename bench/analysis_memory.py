"""Peak RSS of every analysis, each in a fresh process, on the largest shared traces and on synth traces.

    python bench/analysis_memory.py [--synth-events 1000000] [--shared a100_trainer ...] [--only NAME ...]

Each input is ingested once into a Parquet dataset; then, per analysis, a fresh process opens the dataset in place
(`tracekit.open`: views over the Parquet files, so nothing is held before the query runs), runs the analysis (and
the analyses it reads) and reports its own peak RSS (VmHWM) and the RSS after opening, so "analysis MB" is what the
query added. DuckDB's memory limit is the default (half of RAM): a query near it would show here first.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "traces"
EVENTS_PER_SCALE = 4270  # events of 2 ranks x 4 steps per unit of --scale (117 → ~1M)

CHILD = """
import json, resource, sys, time
import tracekit
def vm(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024
db = tracekit.open(sys.argv[1])
opened = vm("VmRSS:")
start = time.perf_counter()
rows = len(db.query(sys.argv[2]))
print(json.dumps({"rows": rows, "seconds": time.perf_counter() - start, "opened_mb": opened,
                  "peak_mb": vm("VmHWM:")}))
"""


def measure(dataset: Path, name: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(dataset), name], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.stdout)


def ingest(inputs: list[Path], out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "tracekit.cli", "ingest", *map(str, inputs), "-o", str(out)], check=True,
                   stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synth-events", type=int, nargs="*", default=[1_000_000])
    parser.add_argument("--shared", nargs="*", default=["nvidia/a100_trainer_rank0of16_cudagraph.json.gz",
                                                        "amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz",
                                                        "multirank/dlrm_8ranks_v100"])
    parser.add_argument("--only", nargs="*", default=None, help="analyses to measure (default: all)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from tracekit.engine import catalog

    names = args.only or catalog.available()
    print(f"load average before: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        datasets = {}
        for name in args.shared:
            if (SHARED / name).exists():
                datasets[name] = ingest([SHARED / name], tmp_path / f"d{len(datasets)}")
        for events in args.synth_events:
            folder = tmp_path / f"synth_{events}"
            subprocess.run([sys.executable, "-m", "tracekit.cli", "synth", "--ranks", "2", "--steps", "4",
                            "--scale", f"{events / EVENTS_PER_SCALE:.1f}", "-o", str(folder)], check=True,
                           stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO)})
            datasets[f"synth ~{events:,} events"] = ingest([folder], tmp_path / f"d{len(datasets)}")
        for label, dataset in datasets.items():
            print(f"\n### {label}\n\n| analysis | rows | seconds | RSS after open MB | peak MB | analysis MB |")
            print("|---|---:|---:|---:|---:|---:|")
            for name in names:
                started = time.perf_counter()
                got = measure(dataset, name)
                if "error" in got:
                    print(f"| {name} | failed: {got['error']} | {time.perf_counter() - started:.1f} | | | |")
                    continue
                print(f"| {name} | {got['rows']:,} | {got['seconds']:.2f} | {got['opened_mb']:.0f} | "
                      f"{got['peak_mb']:.0f} | {got['peak_mb'] - got['opened_mb']:.0f} |", flush=True)
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
