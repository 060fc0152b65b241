"""`--scheduler local:N` against a run without it on a synthetic job of many ranks: wall time, CPU and peak RSS of
`tracekit ingest` and `tracekit report` (fresh processes, alternating, medians), the cluster's overhead as a ratio,
and the per-rank costs docs/scale.md projects to large jobs.

    python bench/scheduler_scale.py [--ranks 32] [--steps 4] [--scale 1] [--workers 2] [--repeats 3] [--json FILE]

Per-rank cost: one rank's `tracekit report` in a fresh process (what a worker does for a file, plus the imports a
worker pays once), and the peak RSS of each worker process after a cluster report (Dask's `client.run`). The peak
RSS of a run is the largest of its process tree (os.wait4: the driver, or a worker it waited for).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import Summary, run_fresh, tracekit_cmd  # noqa: E402


def worker_peaks(traces: Path, out: Path, workers: int) -> list[float]:
    """Peak RSS (MB) of each worker process after a report of TRACES on a local cluster."""
    import resource

    from tracekit.cluster import runs
    from tracekit.cluster.scheduler import dask_client
    from tracekit.inputs import resolve_inputs
    from tracekit.output.terminal import QUERIES
    with dask_client(f"local:{workers}") as client:
        runs.report(client, resolve_inputs(traces), out, force=True, extra=QUERIES)
        peaks = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return sorted(peaks.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=32)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        traces = root / "traces"
        run_fresh(tracekit_cmd("synth", "--ranks", str(args.ranks), "--steps", str(args.steps), "--scale",
                               str(args.scale), "-o", str(traces)))
        size_mb = sum(p.stat().st_size for p in traces.glob("rank*.json")) / 1e6
        scheduler = ["--scheduler", f"local:{args.workers}"]
        runs: dict[str, list] = {}
        for _ in range(args.repeats):
            for command, out in (("ingest", root / "dataset"), ("report", root / "report")):
                for mode, extra in (("local", []), (f"local:{args.workers}", scheduler)):
                    run = run_fresh(tracekit_cmd(command, str(traces), "-o", str(out), "--force", *extra), (0, 3))
                    runs.setdefault(f"{command} {mode}", []).append(run)
        one_rank = [run_fresh(tracekit_cmd("report", str(traces / f"rank{r}.json"), "-o", str(root / f"one{r}"),
                                           "--force")) for r in (0, args.ranks // 2, args.ranks - 1)]
        imports = [run_fresh([sys.executable, "-c", "import tracekit.cli.traces, tracekit.cluster.tasks"])
                   for _ in range(3)]
        peaks = worker_peaks(traces, root / "peaks", args.workers)

    print(f"{args.ranks} synthetic ranks, {args.steps} steps, scale {args.scale}: {size_mb:.0f} MB of JSON; "
          f"medians of {args.repeats}")
    medians = {name: Summary.of(rs) for name, rs in runs.items()}
    print("| command | mode | wall s | CPU s | peak RSS MB (any process) |\n|---|---|---:|---:|---:|")
    for name, m in medians.items():
        command, mode = name.split(" ")
        print(f"| {command} | {mode} | {m.wall:.1f} | {m.cpu:.1f} | {m.peak_mb:.0f} |")
    ratios = {command: medians[f"{command} local:{args.workers}"].wall / medians[f"{command} local"].wall
              for command in ("ingest", "report")}
    print("cluster wall / local wall: " + ", ".join(f"{c} {v:.2f}x" for c, v in ratios.items()))
    one, imported = Summary.of(one_rank), Summary.of(imports)
    per_rank = {"wall_s": one.wall, "cpu_s": one.cpu, "peak_mb": one.peak_mb, "imports_s": imported.wall,
                "imports_peak_mb": imported.peak_mb, "worker_peaks_mb": peaks}
    print(f"one rank's report, fresh process: {per_rank['wall_s']:.2f} s wall, {per_rank['cpu_s']:.2f} s CPU, "
          f"{per_rank['peak_mb']:.0f} MB peak (of which imports {per_rank['imports_s']:.2f} s, "
          f"{per_rank['imports_peak_mb']:.0f} MB); worker peaks after the cluster report: "
          + ", ".join(f"{p:.0f} MB" for p in peaks))
    if args.json:
        args.json.write_text(json.dumps({
            "ranks": args.ranks, "steps": args.steps, "scale": args.scale, "json_mb": size_mb,
            "runs": {k: [vars(r) | {"stderr": ""} for r in v] for k, v in runs.items()},
            "ratios": ratios, "per_rank": per_rank}, indent=1))


if __name__ == "__main__":
    main()
