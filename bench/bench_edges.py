"""Wall time of edge building (`tracekit.build_edges`): the largest shared trace, and merged synthetic traces of
K ranks of one per-rank size, to check that the time grows linearly in K.

    python bench/bench_edges.py [--repeats 5] [--ranks 1,8,32] [--scale 24] [--steps 4] [--workdir DIR]
                                [--results bench/RESULTS.md]

Inputs are prepared once, without edges, as Parquet datasets in a scratch folder: the largest shared trace by events
(`a100_trainer_rank0of16_cudagraph`, 67k events) and `tracekit synth --merged` traces of K ranks (at --scale 24 a rank
holds about as many events as that trace). Each timed run is a fresh process that reads a dataset and times
`build_edges` alone; runs go round-robin over the inputs so that load from other jobs spreads evenly. The summary
gives the median over --repeats runs (min and max beside it), CPU time, peak RSS, and time(K) / (K * time(1)),
which stays near (or below: fixed costs) 1 when the cost is linear in K.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import tracekit  # noqa: E402
from tracekit import synth  # noqa: E402
from tracekit.pipeline import is_dataset  # noqa: E402

TRACES = REPO.parent / "shared" / "traces"
LARGEST = "nvidia/a100_trainer_rank0of16_cudagraph.json.gz"  # most `events` rows among the shared traces


def peak_rss_mib() -> float:
    """This process's RSS high-water mark. Not getrusage: Linux carries ru_maxrss over exec from the parent."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def time_one(dataset: Path) -> dict:
    """In this (fresh) process: read the dataset, time build_edges once."""
    if not is_dataset(dataset):
        raise SystemExit(f"{dataset}: not a tracekit dataset")
    tables = tracekit.read_dataset(dataset)
    rss_before = peak_rss_mib()
    wall, cpu = time.perf_counter(), time.process_time()
    built = tracekit.build_edges(tables)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"seconds": wall, "cpu_seconds": cpu, "events": tables.events.num_rows, "edges": built.edges.num_rows,
            "ranks": len(tables.rank_list), "peak_rss_mib": peak_rss_mib(), "rss_before_mib": rss_before}


def prepare(workdir: Path, ranks: list[int], scale: float, steps: int) -> dict[str, Path]:
    """Datasets without edges: the largest shared trace, and one merged synthetic trace per K (kept in workdir and
    reused when already there)."""
    datasets = {}
    real = TRACES / LARGEST
    if real.exists():
        datasets["largest shared trace"] = dataset(workdir / "real", lambda: tracekit.load(real, edges=False))
    else:
        print(f"skipping the shared trace: {real} not found", file=sys.stderr)
    for k in ranks:
        datasets[f"synth K={k}"] = dataset(workdir / f"synth_k{k}_s{steps}_x{scale:g}",
                                           lambda k=k: synthetic_tables(workdir / "json", k, scale, steps))
    return datasets


def synthetic_tables(out: Path, ranks: int, scale: float, steps: int):
    synth.generate(out, ranks=ranks, steps=steps, seed=0, scale=scale, merged=True)
    tables = tracekit.load(out / synth.MERGED_DIR / "merged.json", edges=False)
    shutil.rmtree(out)
    return tables


def dataset(path: Path, make) -> Path:
    if not is_dataset(path):
        tracekit.write_dataset(make(), path, force=True)
    return path


def run(dataset: Path) -> dict:
    result = subprocess.run([sys.executable, __file__, "--time", str(dataset)], capture_output=True, text=True,
                            check=True)
    return json.loads(result.stdout)


def summarise(label: str, runs: list[dict]) -> dict:
    seconds = [r["seconds"] for r in runs]
    return {"input": label, "ranks": runs[0]["ranks"], "events": runs[0]["events"], "edges": runs[0]["edges"],
            "median_s": statistics.median(seconds), "min_s": min(seconds), "max_s": max(seconds),
            "cpu_s": statistics.median(r["cpu_seconds"] for r in runs),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
            "rss_before_mib": statistics.median(r["rss_before_mib"] for r in runs)}


def report(rows: list[dict], repeats: int, scale: float, steps: int, load: tuple[float, float]) -> str:
    base = next((r for r in rows if r["input"] == "synth K=1"), None)
    setup = (f"{platform.node()}, Python {platform.python_version()}, {os.cpu_count()} cores shared with other jobs "
             f"(1-minute load average {load[0]:.1f} before, {load[1]:.1f} after: wall times are noisy, CPU times "
             f"less so); median of {repeats} runs, round-robin over the inputs, each a fresh process timing "
             f"`build_edges` alone on a Parquet dataset read beforehand. Synthetic inputs: "
             f"`tracekit synth --merged --steps {steps} --scale {scale:g}` (seed 0).")
    lines = [f"## {datetime.date.today().isoformat()} — edge building, `bench/bench_edges.py`", "",
             textwrap.fill(setup, 116), "",
             "| input | ranks | events | edges | median s | min–max s | CPU s | µs / event | s / (K × s K=1) "
             "| CPU / (K × CPU K=1) | peak RSS MiB (before build) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        synthetic = base is not None and r["input"].startswith("synth")
        ratio = f"{r['median_s'] / (r['ranks'] * base['median_s']):.2f}" if synthetic else ""
        cpu_ratio = f"{r['cpu_s'] / (r['ranks'] * base['cpu_s']):.2f}" if synthetic else ""
        lines.append(f"| {r['input']} | {r['ranks']} | {r['events']:,} | {r['edges']:,} | {r['median_s']:.2f} | "
                     f"{r['min_s']:.2f}–{r['max_s']:.2f} | {r['cpu_s']:.2f} | {1e6 * r['median_s'] / r['events']:.2f} "
                     f"| {ratio} | {cpu_ratio} | {r['peak_rss_mib']:.0f} ({r['rss_before_mib']:.0f}) |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time", type=Path, help=argparse.SUPPRESS)  # internal: one timed run in this process
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ranks", default="1,8,32")
    parser.add_argument("--scale", type=float, default=24)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--workdir", type=Path, default=None,
                        help="Folder for the prepared datasets, reused by later runs (default: a temporary one).")
    parser.add_argument("--results", type=Path, default=None, help="Markdown file to append the table to.")
    args = parser.parse_args()
    if args.time:
        print(json.dumps(time_one(args.time)))
        return
    ranks = [int(k) for k in args.ranks.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        datasets = prepare(args.workdir or Path(scratch), ranks, args.scale, args.steps)
        print(f"prepared inputs in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        load_before = os.getloadavg()[0]
        # Round-robin over the inputs, so that load from other jobs falls on every input alike.
        runs: dict[str, list[dict]] = {label: [] for label in datasets}
        for _ in range(args.repeats):
            for label, dataset in datasets.items():
                runs[label].append(run(dataset))
        rows = [summarise(label, done) for label, done in runs.items()]
        for label, done in runs.items():
            print(f"{label}: {[round(r['seconds'], 2) for r in done]} s", file=sys.stderr)
    table = report(rows, args.repeats, args.scale, args.steps, (load_before, os.getloadavg()[0]))
    print(table)
    if args.results:
        existing = args.results.read_text() if args.results.exists() else "# Benchmark results\n"
        args.results.write_text(existing.rstrip("\n") + "\n\n" + table)


if __name__ == "__main__":
    main()
