"""The executors against each other on a synthetic job of many ranks (or on `--traces DIR`): in process,
`--jobs N` and `--scheduler local:N`; wall time, CPU and peak RSS of `tracekit ingest` and `tracekit report` (fresh
processes, alternating, medians), each executor's wall time as a ratio of the in-process one, and the per-rank costs
docs/scale.md projects to large jobs.

    python bench/scheduler_scale.py [--ranks 32] [--steps 4] [--scale 1] [--workers 2] [--repeats 3] [--json FILE]
    python bench/scheduler_scale.py --traces ../shared/traces/multirank/dlrm_8ranks_v100 --commands report

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

    from tracekit.cluster.scheduler import dask_executor
    from tracekit.inputs import resolve_inputs
    from tracekit.output.terminal import QUERIES
    from tracekit.output.workbooks import report
    with dask_executor(f"local:{workers}") as executor:
        report(resolve_inputs(traces), out, executor, force=True, extra=QUERIES)
        peaks = executor.client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return sorted(peaks.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=32)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--traces", type=Path, default=None, help="A set of traces instead of a synthetic job.")
    parser.add_argument("--commands", nargs="+", default=["ingest", "report"], choices=["ingest", "report"])
    args = parser.parse_args()
    modes = {"in process": [], f"--jobs {args.workers}": ["--jobs", str(args.workers)],
             f"--scheduler local:{args.workers}": ["--scheduler", f"local:{args.workers}"]}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        traces = args.traces or root / "traces"
        if args.traces is None:
            run_fresh(tracekit_cmd("synth", "--ranks", str(args.ranks), "--steps", str(args.steps), "--scale",
                                  str(args.scale), "-o", str(traces)))
        size_mb = sum(p.stat().st_size for p in traces.iterdir() if p.name.endswith((".json", ".json.gz"))) / 1e6
        runs: dict[str, list] = {}
        for _ in range(args.repeats):
            for command in args.commands:
                out = root / command
                for mode, extra in modes.items():
                    run = run_fresh(tracekit_cmd(command, str(traces), "-o", str(out), "--force", *extra), (0, 3))
                    runs.setdefault(f"{command}|{mode}", []).append(run)
        if args.traces is None:
            one_rank = [run_fresh(tracekit_cmd("report", str(traces / f"rank{r}.json"), "-o", str(root / f"one{r}"),
                                              "--force")) for r in (0, args.ranks // 2, args.ranks - 1)]
            imports = [run_fresh([sys.executable, "-c", "import tracekit.cli.traces, tracekit.output.workbooks"])
                       for _ in range(3)]
            peaks = worker_peaks(traces, root / "peaks", args.workers)

    print((f"{traces}" if args.traces else f"{args.ranks} synthetic ranks, {args.steps} steps, scale {args.scale}")
          + f": {size_mb:.0f} MB of trace files; medians of {args.repeats}")
    print("| command | executor | wall s | CPU s | peak RSS MB (any process) |\n|---|---|---:|---:|---:|")
    for name, rs in runs.items():
        command, mode = name.split("|")
        print(f"| {command} | {mode} | {Summary.of(rs).wall:.1f} | {Summary.of(rs).cpu:.1f} | "
              f"{Summary.of(rs).peak_mb:.0f} |")
    ratios = {f"{command} {mode}": Summary.of(runs[f"{command}|{mode}"]).wall
              / Summary.of(runs[f"{command}|in process"]).wall
              for command in args.commands for mode in list(modes)[1:]}
    print("wall / in-process wall: " + ", ".join(f"{c} {v:.2f}x" for c, v in ratios.items()))
    if args.traces is not None:
        if args.json:
            args.json.write_text(json.dumps({"traces": str(traces), "json_mb": size_mb, "ratios": ratios, "runs": {
                k: [vars(r) | {"stderr": ""} for r in v] for k, v in runs.items()}}, indent=1))
        return
    per_rank = {"wall_s": Summary.of(one_rank).wall, "cpu_s": Summary.of(one_rank).cpu,
                "peak_mb": Summary.of(one_rank).peak_mb, "imports_s": Summary.of(imports).wall,
                "imports_peak_mb": Summary.of(imports).peak_mb, "worker_peaks_mb": peaks}
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
