"""Opening an ingested dataset and running a simple aggregate, against re-reading the JSON, on ~1M events.

    python bench/bench_sql.py [--repeats 5] [--scale 117]

Makes a synth trace (2 ranks x 4 steps; --scale 180 gives about 1M events rows), ingests it once, then runs each
way `--repeats` times, each in a fresh Python process (so nothing is cached in memory between runs, and peak RSS is
that run's own):
  dataset:   tracekit.open(DATASET) + the query (tables are views over the Parquet files)
  json:      tracekit.open(JSON FILES) + the same query (reads the JSON and builds the edges first)
  cli:       `tracekit sql QUERY DATASET --format csv` as a user runs it (Python start-up and imports included)
Times are medians; "open+query" excludes the interpreter start-up and the imports, which are timed separately.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QUERY = "select kind, count(*) as n, sum(dur) / 1e6 as ms from events group by kind order by ms desc"

CHILD = """
def peak_rss_mib():  # VmHWM, not ru_maxrss: that one survives exec and would report the parent's
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
import json, sys, time
t0 = time.perf_counter()
import tracekit
t1 = time.perf_counter()
with tracekit.open(sys.argv[1:-1] if len(sys.argv) > 3 else sys.argv[1]) as db:
    rows = db.sql(sys.argv[-1]).height
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "open_query_s": t2 - t1, "rows": rows,
                  "peak_rss_mib": peak_rss_mib()}))
"""


def child(inputs: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, *inputs, QUERY], capture_output=True, text=True, check=True,
                         cwd=REPO)
    return json.loads(out.stdout)


def cli(dataset: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tracekit.cli", "sql", QUERY, dataset, "--format", "csv"],
                   capture_output=True, check=True, cwd=REPO)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scale", type=float, default=180)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    import tracekit
    from tracekit import synth

    with tempfile.TemporaryDirectory() as tmp:
        traces = Path(tmp) / "traces"
        synth.generate(traces, ranks=2, steps=4, seed=0, scale=args.scale)
        files = [str(p) for p in sorted(traces.glob("rank*.json"))]
        tables = tracekit.load(files)
        dataset = Path(tmp) / "dataset"
        tracekit.write_dataset(tables, dataset)
        events, json_mb = tables.events.num_rows, sum(Path(f).stat().st_size for f in files) / 1e6
        parquet_mb = sum(p.stat().st_size for p in dataset.rglob("*.parquet")) / 1e6
        del tables
        runs = {"dataset": [], "json": []}
        cli_s = []
        for _ in range(args.repeats):  # interleaved, so machine noise hits both alike
            runs["dataset"].append(child([str(dataset)]))
            runs["json"].append(child(files))
            cli_s.append(cli(str(dataset)))
    print(f"input: {events:,} events rows, 2 ranks; JSON {json_mb:.0f} MB, dataset {parquet_mb:.0f} MB of Parquet")
    print(f"query: {QUERY}")
    print(f"{'way':<10}{'open+query s':>14}{'import s':>10}{'peak RSS MiB':>14}")
    for way, results in runs.items():
        med = {k: statistics.median(r[k] for r in results) for k in ("open_query_s", "import_s", "peak_rss_mib")}
        print(f"{way:<10}{med['open_query_s']:>14.3f}{med['import_s']:>10.3f}{med['peak_rss_mib']:>14.0f}")
    ratio = statistics.median(r["open_query_s"] for r in runs["json"]) / statistics.median(
        r["open_query_s"] for r in runs["dataset"])
    print(f"dataset is {ratio:.0f}x faster than re-reading the JSON; `tracekit sql ... --format csv` on the dataset: "
          f"{statistics.median(cli_s):.2f} s wall, start-up included (median of {args.repeats})")


if __name__ == "__main__":
    main()
