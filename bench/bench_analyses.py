"""Wall time and peak memory of the analyses (queries/*.sql), on real traces and on a ~1M-event trace.

    python bench/bench_analyses.py [--repeats 5] [--events 1000000] [--source auto|synth|replicate]

For each input: load time (ingest + edges), then every analysis on one connection as `run_all` does it (shared
macros materialized once), `--repeats` times; prints medians (wall and CPU) and writes nothing. The ~1M-event
input comes from `tracekit synth` when it is installed (or --source synth), else from replicating a real trace in
time on one rank (ids, correlations and timestamps shifted per copy, edges rebuilt).
Peak RSS is the process high-water mark, so inputs run in increasing size order.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tracekit  # noqa: E402
from tracekit.engine import catalog  # noqa: E402
from tracekit.engine.tables import TraceTables  # noqa: E402
from tracekit.query import analyses  # noqa: E402

TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"
REAL = ["amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz", "nvidia/a100_trainer_rank0of16_cudagraph.json.gz"]
REPLICATED_FROM = "amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz"
TRACELENS_RESNET_S = 3.9  # TraceLens's whole perf report on the resnet trace (figure given in the project brief)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def replicate(tables: TraceTables, copies: int) -> TraceTables:
    """`copies` back-to-back copies of every rank's events, as if the profiler had run that much longer."""
    events = pl.from_arrow(tables.events)
    span = events["ts"].max() - events["ts"].min() + events["dur"].max()
    id_stride = events["id"].max() + 1
    corr_stride = (events["correlation"].max() or 0) + 1
    frames = [events.with_columns(ts=pl.col("ts") + i * span, id=pl.col("id") + i * id_stride,
                                  correlation=pl.col("correlation") + i * corr_stride) for i in range(copies)]
    grown = tables.with_tables(events=pl.concat(frames).to_arrow(), edges=tables.edges.slice(0, 0),
                               diagnostics=tables.diagnostics.slice(0, 0))
    return tracekit.build_edges(grown)


def million_event_input(target: int, source: str, workdir: Path) -> tuple[str, float, TraceTables]:
    synth = None
    if source in ("auto", "synth"):
        try:
            from tracekit import synth
        except ImportError:
            if source == "synth":
                raise
    if synth is not None:
        scale = 180 * target / 1_000_000  # synth --ranks 2 --steps 4 --scale 180: about 1M events rows
        synth.generate(workdir, ranks=2, steps=4, seed=0, scale=scale)
        files = sorted(workdir.glob("rank*.json"))
        started = time.perf_counter()
        tables = tracekit.load(files)
        return f"synth 2 ranks x 4 steps, scale {scale:.0f}", time.perf_counter() - started, tables
    base = tracekit.load(TRACES / REPLICATED_FROM)
    copies = max(1, round(target / base.events.num_rows))
    started = time.perf_counter()
    tables = replicate(base, copies)
    return f"{REPLICATED_FROM} x{copies} (edges rebuilt)", time.perf_counter() - started, tables


def bench(label: str, load_s: float, tables: TraceTables, repeats: int) -> dict:
    """Medians over `repeats` of: the shared step (connect + materialize the shared macros), each analysis, and
    all of it together (wall and process CPU seconds; CPU counts every DuckDB thread); and, as a baseline, all of
    it without the shared step (each query recomputing the shared macros)."""
    per_query: dict[str, list[float]] = {name: [] for name in catalog.available()}
    shared, totals, cpu = [], [], []
    for _ in range(repeats):
        started, cpu_started = time.perf_counter(), time.process_time()
        with catalog.connect(tables, materialize=True) as con:
            shared.append(time.perf_counter() - started)
            for name in per_query:
                t0 = time.perf_counter()
                analyses.run(tables, name, con)
                per_query[name].append(time.perf_counter() - t0)
        totals.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
    unshared = []  # baseline in the same run: every query recomputing the shared macros (no materialize)
    for _ in range(repeats):
        started = time.perf_counter()
        with catalog.connect(tables) as con:
            for name in per_query:
                analyses.run(tables, name, con)
        unshared.append(time.perf_counter() - started)
    row = {"input": label, "events": tables.events.num_rows, "edges": tables.edges.num_rows,
           "load_s": round(load_s, 3), "all_analyses_s": round(statistics.median(totals), 3),
           "all_analyses_cpu_s": round(statistics.median(cpu), 3),
           "shared_macros_s": round(statistics.median(shared), 3),
           "unshared_all_analyses_s": round(statistics.median(unshared), 3),
           "peak_rss_mib": round(peak_rss_mib())}
    row.update({f"{name}_s": round(statistics.median(ts), 3) for name, ts in per_query.items()})
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--source", choices=("auto", "synth", "replicate"), default="auto")
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs")
    rows = []
    for relative in REAL:
        path = TRACES / relative
        if not path.exists():
            print(f"skipped {relative}: not found under {TRACES}", file=sys.stderr)
            continue
        started = time.perf_counter()
        tables = tracekit.load(path)
        rows.append(bench(relative, time.perf_counter() - started, tables, args.repeats))
    with tempfile.TemporaryDirectory() as tmp:
        label, load_s, tables = million_event_input(args.events, args.source, Path(tmp))
        rows.append(bench(label, load_s, tables, args.repeats))
    frame = pl.DataFrame(rows)
    with pl.Config(tbl_cols=-1, tbl_width_chars=200, fmt_str_lengths=60, tbl_rows=-1):
        print(frame.transpose(include_header=True, column_names="input"))
    resnet = frame.filter(pl.col("input") == REAL[0])
    if resnet.height:
        ours = resnet["load_s"][0] + resnet["all_analyses_s"][0]
        print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        print(f"resnet: load + all analyses {ours:.2f} s vs TraceLens's whole report {TRACELENS_RESNET_S} s "
              f"(ratio {TRACELENS_RESNET_S / ours:.1f}x)")


if __name__ == "__main__":
    main()
