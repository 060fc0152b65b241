"""Ingest benchmark: wall time and peak memory of `tracekit.load` (files → Arrow tables) against `orjson.loads`.

Every measurement runs in a fresh Python process, so its peak RSS (VmHWM, read inside that process) belongs to
that one configuration; medians over --repeat runs, orjson and ingest runs interleaved. Per case it prints: JSON
size, traceEvents entries, orjson.loads of the decompressed bytes (median s), ingest (median s, gunzip included),
their ratio for the first call in a process and for a second one (warm), entries per second, peak RSS, peak RSS
minus the RSS after importing tracekit/polars/pyarrow/duckdb (what ingest itself costs), that delta over the JSON
size, and orjson's delta.

Cases: the files or directories given, or by default the largest shared traces, the 8 DLRM ranks (read in this
process, and in 2 worker processes), a synthetic ~400 MB trace, and 4 synthetic ~100 MB rank files (1 process and
2 workers). Synthetic traces are a real trace's events repeated with shifted timestamps and flow ids, written under
--scratch (never into the repository).

    python bench/bench_ingest.py                       # default cases, 3 runs each
    python bench/bench_ingest.py --repeat 5 a.json.gz  # given files
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRACES = Path(os.environ.get("TRACEKIT_TRACES", REPO.parent / "shared" / "traces"))
LARGEST = ["diff_pairs/resnet50_v100_workers0_vs_workers4/workers0.pt.trace.json.gz",
           "legacy/resnet50_2020-12_bare_list.pt.trace.json.gz",
           "nvidia/a100_trainer_rank0of16_cudagraph.json.gz",
           "nvidia/v100_ns_resolution.json.gz"]
DLRM = "multirank/dlrm_8ranks_v100"
SYNTHETIC_SOURCE = "diff_pairs/resnet50_v100_workers0_vs_workers4/workers0.pt.trace.json.gz"

# --------------------------------------------------------------------------- one measurement (child process)


def status_mb(field: str, pid: str = "self") -> float:
    """VmHWM (peak RSS) or VmRSS from /proc, in MB. Not ru_maxrss: Linux carries that over fork + exec, so a child
    of a large parent would report the parent's size."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def tree_peak_sampler() -> tuple[threading.Event, list[float]]:
    """Sample the RSS of this process plus its children every 10 ms, for worker processes' memory."""
    stop, peak = threading.Event(), [0.0]

    def sample():
        while not stop.wait(0.01):
            total = status_mb("VmRSS")
            for task in Path("/proc/self/task").iterdir():
                for child in (task / "children").read_text().split():
                    try:
                        total += status_mb("VmRSS", child)
                    except OSError:
                        pass
            peak[0] = max(peak[0], total)

    threading.Thread(target=sample, daemon=True).start()
    return stop, peak


def child(mode: str, paths: list[str], workers: int | None) -> dict:
    if mode == "orjson":
        import orjson
        baseline = status_mb("VmRSS")  # before reading: orjson's peak holds the decompressed bytes too
        data = [read_json_bytes(Path(p)) for p in paths]
        start, cpu = time.perf_counter(), time.process_time()
        docs = [orjson.loads(d) for d in data]
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        peak = status_mb("VmHWM")
        entries = sum(len(d if isinstance(d, list) else d["traceEvents"]) for d in docs)
        del docs
        start = time.perf_counter()
        docs = [orjson.loads(d) for d in data]
        return dict(seconds=seconds, cpu_seconds=cpu, warm_seconds=time.perf_counter() - start, entries=entries,
                    baseline_mb=baseline, peak_mb=peak, tree_peak_mb=0.0)
    import duckdb  # noqa: F401  (the import baseline includes every library a session loads)
    import polars  # noqa: F401
    import pyarrow  # noqa: F401

    import tracekit
    baseline = status_mb("VmRSS")
    stop, tree_peak = tree_peak_sampler() if workers and workers > 1 else (None, [0.0])
    start, cpu = time.perf_counter(), time.process_time()
    tables = tracekit.load(paths, edges=False, workers=workers)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = status_mb("VmHWM")
    if stop:
        stop.set()
    entries = sum(tables.ranks.column("trace_entries").to_pylist())
    del tables
    start = time.perf_counter()
    tracekit.load(paths, edges=False, workers=workers)
    return dict(seconds=seconds, cpu_seconds=cpu, warm_seconds=time.perf_counter() - start, entries=entries,
                baseline_mb=baseline, peak_mb=peak, tree_peak_mb=tree_peak[0])


def read_json_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def measure(mode: str, paths: list[Path], workers: int | None) -> dict:
    command = [sys.executable, __file__, "--child", mode, "--workers", str(workers or 0), *map(str, paths)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    if done.returncode:
        raise SystemExit(f"{mode} {paths}: failed\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- synthetic traces


def synthetic_trace(source: Path, out: Path, target_bytes: int, rank: int | None = None) -> Path:
    """`source`'s events repeated until the JSON reaches `target_bytes`: each copy shifted past the previous one in
    time, with flow ids shifted too; metadata entries only once. Written gzipped (level 1)."""
    if out.exists():
        return out
    import orjson
    doc = orjson.loads(read_json_bytes(source))
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000
    id_step = max((e["id"] for e in events if isinstance(e.get("id"), int)), default=0) + 1
    top = {k: v for k, v in doc.items() if k != "traceEvents"}
    if rank is not None:
        top["distributedInfo"] = {"rank": rank, "world_size": 4, "backend": "nccl"}
    head = orjson.dumps(top)[:-1] + b', "traceEvents": [\n'
    tmp = out.with_suffix(".partial")
    written, copy = len(head), 0
    with gzip.open(tmp, "wb", compresslevel=1) as fh:
        fh.write(head)
        while written < target_bytes:
            lines = []
            for e in events:
                if copy and e.get("ph") == "M":
                    continue
                if copy:
                    e = dict(e)
                    if isinstance(e.get("ts"), (int, float)):
                        e["ts"] = e["ts"] + copy * span
                    if isinstance(e.get("id"), int):
                        e["id"] = e["id"] + copy * id_step
                lines.append(orjson.dumps(e))
            text = (b",\n" if copy else b"") + b",\n".join(lines)
            fh.write(text)
            written += len(text)
            copy += 1
        fh.write(b"\n]}\n")
    tmp.rename(out)
    return out


# --------------------------------------------------------------------------- cases and table


def trace_files(paths: list[Path]) -> list[Path]:
    """The Kineto files among the paths (directories expanded, Execution Traces left out)."""
    out = []
    for p in paths:
        out += [p] if not p.is_dir() else sorted(
            f for f in p.iterdir() if f.name.endswith((".json", ".json.gz")) and not f.name.startswith("et"))
    return out


def json_megabytes(paths: list[Path]) -> float:
    return sum(len(read_json_bytes(f)) for f in trace_files(paths)) / 1e6


def default_cases(scratch: Path) -> list[tuple[str, list[Path], int | None]]:
    cases = [(Path(f).name, [TRACES / f], None) for f in LARGEST if (TRACES / f).exists()]
    ranks = sorted((TRACES / DLRM).glob("worker*.pt.trace.json.gz"))  # the Kineto files (not the Execution Traces)
    if ranks:
        cases += [("dlrm 8 ranks, 1 process", ranks, 1), ("dlrm 8 ranks, 2 workers", ranks, 2)]
    source = TRACES / SYNTHETIC_SOURCE
    if source.exists():
        scratch.mkdir(parents=True, exist_ok=True)
        big = synthetic_trace(source, scratch / "synthetic_400mb.json.gz", 400_000_000)
        cases.append(("synthetic ~400 MB", [big], None))
        big_ranks = [synthetic_trace(source, scratch / f"synthetic_rank{r}_100mb.json.gz", 100_000_000, rank=r)
                     for r in range(4)]
        cases += [("4 x ~100 MB ranks, 1 process", big_ranks, 1), ("4 x ~100 MB ranks, 2 workers", big_ranks, 2)]
    return cases


def run_case(name: str, paths: list[Path], workers: int | None, repeat: int) -> dict:
    orjson_runs, ingest_runs = [], []
    for _ in range(repeat):  # interleaved, so that each ratio compares runs under the same machine load
        orjson_runs.append(measure("orjson", trace_files(paths), None))
        ingest_runs.append(measure("ingest", paths, workers))
    med = statistics.median
    orjson_s, ingest_s = med(r["seconds"] for r in orjson_runs), med(r["seconds"] for r in ingest_runs)
    json_mb = json_megabytes(paths)
    peak = med(r["peak_mb"] for r in ingest_runs)
    delta = med(r["peak_mb"] - r["baseline_mb"] for r in ingest_runs)
    entries = ingest_runs[0]["entries"]
    if entries != orjson_runs[0]["entries"]:
        raise SystemExit(f"{name}: ingest saw {entries} entries, orjson {orjson_runs[0]['entries']}")
    return dict(case=name, json_mb=json_mb, entries=entries, orjson_s=orjson_s, ingest_s=ingest_s,
                ratio=med(i["seconds"] / o["seconds"] for i, o in zip(ingest_runs, orjson_runs)),
                warm_ratio=med(i["warm_seconds"] / o["warm_seconds"] for i, o in zip(ingest_runs, orjson_runs)),
                cpu_ratio=med(i["cpu_seconds"] / o["cpu_seconds"] for i, o in zip(ingest_runs, orjson_runs)),
                events_per_s=entries / ingest_s, peak_mb=peak, delta_mb=delta, delta_per_json=delta / json_mb,
                orjson_delta_mb=med(r["peak_mb"] - r["baseline_mb"] for r in orjson_runs),
                baseline_mb=med(r["baseline_mb"] for r in ingest_runs),
                tree_peak_mb=med(r["tree_peak_mb"] for r in ingest_runs))


COLUMNS = [  # (key, header, format)
    ("case", "case", "{}"), ("json_mb", "JSON MB", "{:.1f}"), ("entries", "entries", "{:,}"),
    ("orjson_s", "orjson s", "{:.3f}"), ("ingest_s", "ingest s", "{:.3f}"), ("ratio", "ratio", "{:.2f}"),
    ("warm_ratio", "warm ratio", "{:.2f}"), ("cpu_ratio", "CPU ratio", "{:.2f}"),
    ("events_per_s", "events/s", "{:,.0f}"), ("peak_mb", "peak MB", "{:.0f}"), ("delta_mb", "Δ MB", "{:.0f}"),
    ("delta_per_json", "Δ/JSON", "{:.2f}"), ("orjson_delta_mb", "orjson Δ MB", "{:.0f}"),
]


def print_table(rows: list[dict]) -> None:
    print("| " + " | ".join(header for _, header, _ in COLUMNS) + " |")
    print("|" + "|".join("---" for _ in COLUMNS) + "|")
    for row in rows:
        print("| " + " | ".join(fmt.format(row[key]) for key, _, fmt in COLUMNS) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", type=Path, help="trace files or directories (each one case)")
    parser.add_argument("--repeat", type=int, default=3, help="fresh-process runs per measurement (default 3)")
    parser.add_argument("--workers", type=int, default=0,
                        help="worker processes for the given paths (default: none, read in the measuring process)")
    parser.add_argument("--scratch", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "tracekit-bench",
                        help="where synthetic traces are written (default: $TMPDIR/tracekit-bench)")
    parser.add_argument("--child", choices=["orjson", "ingest"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, [str(p) for p in args.paths], args.workers or None)))
        return
    cases = [(p.name, [p], args.workers or None) for p in args.paths] or default_cases(args.scratch)
    rows, load_before = [], os.getloadavg()[0]
    for name, paths, workers in cases:
        rows.append(run_case(name, paths, workers, args.repeat))
        print(f"measured {name}", file=sys.stderr)
    print(f"{args.repeat} fresh-process runs per measurement; medians. ratio = ingest / orjson.loads, first call in "
          "each process (same run pairs); warm ratio = the same for a second call in that process; CPU ratio = process "
          "CPU seconds (all threads), first call; "
          f"Δ = peak RSS (VmHWM) − RSS after imports (~{statistics.median(r['baseline_mb'] for r in rows):.0f} MB); "
          "orjson Δ = the same for gunzip + orjson.loads (timed: orjson.loads alone)")
    print(f"1-minute load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after; {os.cpu_count()} CPUs")
    print_table(rows)
    for r in rows:
        if r["tree_peak_mb"]:
            print(f"{r['case']}: peak RSS of the process and its workers together (10 ms samples) "
                  f"{r['tree_peak_mb']:.0f} MB")


if __name__ == "__main__":
    main()
