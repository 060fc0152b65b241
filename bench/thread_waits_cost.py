"""What the link's thread-wait pass (queries/link/thread_wait_inferred_edges.sql) costs where it has most to do: a
made-up rank whose THREADS host threads each run bursts of ops and wake up every ~2.2 ms, so that every 1 ms bucket
has threads waking in it (the pass then sorts every point, bucket by bucket), against another version of the query
given as a file (e.g. the one before it: `git show c378ec1~1:queries/link/thread_wait_inferred_edges.sql`), with
the same edges required of both. Also on real traces given by path.

    python bench/thread_waits_cost.py [--threads 64] [--ms 300] [--against OLD.sql] [TRACE ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tracekit.engine import catalog, connection  # noqa: E402
from tracekit.pipeline import load  # noqa: E402

PASS = "link/thread_wait_inferred_edges"
KEYS = ["rank", "src", "dst", "subkind", "lag"]


def waking_threads(threads: int, ms: int, seed: int = 1) -> pa.Table:
    """`events` of one rank: each thread runs bursts of 50 back-to-back 10 µs ops, 1.2-1.5 ms apart."""
    rng = np.random.default_rng(seed)
    starts, tids = [], []
    for tid in range(threads):
        t = int(rng.integers(0, 2000))
        while t < ms * 1000:
            starts += range(t, t + 50 * 20, 20)
            tids += [tid] * 50
            t += 50 * 20 + 1200 + int(rng.integers(0, 300))
    n = len(starts)
    return pa.table({"rank": pa.array(np.zeros(n, np.int32)), "id": pa.array(np.arange(n, dtype=np.int64)),
                     "kind": pa.array(["cpu_op"] * n), "pid": pa.array(["1"] * n),
                     "tid": pa.array([str(t) for t in tids]), "ts": pa.array(np.array(starts, np.int64) * 1000),
                     "dur": pa.array(np.full(n, 10_000, np.int64))})


def timed(events: pa.Table, sql: str, repeat: int = 3) -> tuple[float, pa.Table]:
    """Median seconds of SQL over EVENTS (each run on a fresh connection), and its edges in a stable order."""
    seconds = []
    for _ in range(repeat):
        with connection.connect() as con:
            con.register("events", events)
            start = time.perf_counter()
            edges = con.sql(sql).to_arrow_table()
            seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), edges.select(KEYS).sort_by([(k, "ascending") for k in KEYS])


def compare(label: str, events: pa.Table, against: str | None) -> None:
    seconds, edges = timed(events, catalog.load_query(PASS).statement)
    line = f"{label}: {events.num_rows:,} events, {edges.num_rows:,} edges, {seconds:.3f} s"
    if against:
        old_seconds, old_edges = timed(events, against)
        same = old_edges.equals(edges.cast(old_edges.schema))
        line += f"; the other query {old_seconds:.3f} s, {'the same edges' if same else 'OTHER EDGES'}"
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*")
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--ms", type=int, default=300)
    parser.add_argument("--against", type=Path, help="another version of the pass's SQL file")
    args = parser.parse_args()
    against = catalog.statement_text(args.against.read_text()) if args.against else None
    compare(f"{args.threads} threads waking every ~2.2 ms for {args.ms} ms", waking_threads(args.threads, args.ms),
            against)
    for trace in args.traces:
        compare(Path(trace).name, load(trace, edges=False).events, against)


if __name__ == "__main__":
    main()
