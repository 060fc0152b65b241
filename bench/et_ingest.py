"""Execution Trace ingest + link time: wall-time medians and peak RSS, the ET's cost measured against loading the
same Kineto trace alone (the baseline, same run).

    python3 bench/et_ingest.py [--repeat 5] [--scale 20]

`--scale K` also times reading + edges of one synthetic ET made of K copies of cpu_torch2.13_single's nodes
(ids, parents and tensor ids shifted per copy), to see how the per-node decoding grows.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import tracekit  # noqa: E402
from tracekit.link import et  # noqa: E402
from tracekit.read.text import parse_file  # noqa: E402

TRACES = REPO.parent / "shared" / "traces"
PAIRS = {  # name → (Kineto files, ET files)
    "rtx2080ti_linear (name_order)": (["et_pairs/rtx2080ti_linear/kineto.json.gz"],
                                      ["et_pairs/rtx2080ti_linear/et.json.gz"]),
    "cpu_torch2.13_single (rf_id)": (["et_pairs/cpu_torch2.13_single/kineto.json.gz"],
                                     ["et_pairs/cpu_torch2.13_single/et.json.gz"]),
    "ddp_gloo 2 ranks (rf_id)": ([f"multirank/cpu_torch2.13_ddp_gloo_2ranks/kineto_rank{r}.json.gz" for r in (0, 1)],
                                 [f"multirank/cpu_torch2.13_ddp_gloo_2ranks/et_rank{r}.json.gz" for r in (0, 1)]),
    "dlrm 8 ranks (name_order)": ([f"multirank/dlrm_8ranks_v100/worker{r}.pt.trace.json.gz" for r in range(8)],
                                  [f"multirank/dlrm_8ranks_v100/et_rank{r}.json.gz" for r in range(8)]),
}


def median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peak_rss_mb(paths: list[Path]) -> float:
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forking parent (this process) across exec.
    code = ("import re, sys, tracekit; tracekit.load(sys.argv[1:]); "
            "print(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))")
    out = subprocess.run([sys.executable, "-c", code, *map(str, paths)], capture_output=True, text=True, check=True,
                         cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    return int(out.stdout.strip()) / 1024


def stages(et_paths: list[Path], kineto, repeat: int) -> dict[str, float]:
    """Median seconds of each ET stage over the already loaded Kineto tables."""
    parsed = [parse_file(p) for p in et_paths]
    read = et.attach_execution_traces  # the whole stage: read, link, edges
    parts = {}
    parts["parse"] = median_s(lambda: [parse_file(p) for p in et_paths], repeat)
    parts["read"] = median_s(lambda: [et.read_execution_trace(p, r) for r, p in enumerate(parsed)], repeat)
    with_nodes = read(kineto, parsed)
    parts["link"] = median_s(lambda: et.link_events(with_nodes), repeat)
    parts["edges"] = median_s(lambda: et.et_edges(with_nodes), repeat)
    parts["stage total"] = median_s(lambda: read(kineto, parsed), repeat)
    return parts


def scaled_et(copies: int, out: Path) -> int:
    doc = json.loads(gzip.decompress((TRACES / "et_pairs/cpu_torch2.13_single/et.json.gz").read_bytes()))
    span = max(n["id"] for n in doc["nodes"]) + 1
    tensor_span = 10_000_000
    nodes = []
    for k in range(copies):
        for node in doc["nodes"]:
            copy = json.loads(json.dumps(node))
            copy["id"] += k * span
            copy["ctrl_deps"] += k * span
            for io in (copy["inputs"], copy["outputs"]):
                for value, type_ in zip(io["values"], io["types"]):
                    if type_.startswith("Tensor(") and isinstance(value, list) and len(value) == 6:
                        value[0] += k * tensor_span
                        value[1] += k * tensor_span if value[1] else 0
            nodes.append(copy)
    out.write_bytes(gzip.compress(json.dumps({**doc, "nodes": nodes}).encode(), 1))
    return len(nodes)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--scale", type=int, default=20)
    args = parser.parse_args()
    print(f"repeat {args.repeat}; medians in seconds; RSS = peak resident set of a fresh process running load()")
    for name, (kineto_files, et_files) in PAIRS.items():
        kineto_paths = [TRACES / f for f in kineto_files]
        et_paths = [TRACES / f for f in et_files]
        base = median_s(lambda: tracekit.load(kineto_paths), args.repeat)
        full = median_s(lambda: tracekit.load(kineto_paths + et_paths), args.repeat)
        kineto = tracekit.load(kineto_paths)
        parts = stages(et_paths, kineto, args.repeat)
        nodes = sum(len(json.loads(gzip.decompress(p.read_bytes()))["nodes"]) for p in et_paths)
        rss_base, rss_full = peak_rss_mb(kineto_paths), peak_rss_mb(kineto_paths + et_paths)
        print(f"\n{name}: {nodes:,} ET nodes, {kineto.events.num_rows:,} Kineto events")
        print(f"  load Kineto only {base:.3f}  load Kineto+ET {full:.3f}  ratio {full / base:.2f}  "
              f"(ET adds {full - base:.3f})")
        print("  ET stage: " + "  ".join(f"{k} {v:.3f}" for k, v in parts.items()))
        print(f"  peak RSS Kineto only {rss_base:.0f} MB, Kineto+ET {rss_full:.0f} MB")
    if args.scale:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "et_scaled.json.gz"
            n = scaled_et(args.scale, path)
            parsed = parse_file(path)
            repeat = max(1, args.repeat // 2)
            text = gzip.decompress(path.read_bytes())
            json_s = median_s(lambda: json.loads(text), repeat)
            read_s = median_s(lambda: et.read_execution_trace(parsed, 0), repeat)
            tables = et.attach_execution_traces(tracekit.TraceTables(), [parsed])
            edges_s = median_s(lambda: et.et_edges(tables), repeat)
            total_s = median_s(lambda: tracekit.load(path), repeat)
            print(f"\nsynthetic ET, {args.scale} copies of cpu_torch2.13_single: {n:,} nodes "
                  f"({len(text) / 1e6:.0f} MB JSON), {tables.et_tensors.num_rows:,} tensor rows, "
                  f"{tables.edges.num_rows:,} edges")
            print(f"  baseline json.loads of the file {json_s:.3f}")
            print(f"  read {read_s:.3f} ({read_s / json_s:.2f}x json.loads)  edges {edges_s:.3f}  "
                  f"load (ET alone: gunzip+parse+read+link+edges) {total_s:.3f} ({total_s / json_s:.2f}x json.loads)")
    print(f"\npeak RSS of this process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
