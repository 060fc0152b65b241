"""Replay what-ifs on GPU work against the time the host waited for the GPU, on traces without cuda_sync events.

Per step: the measured step, the host's wait for the GPU (the part of each waiting host call, by its sync or
sync_inferred edges, before the GPU op it waited for ended: queries/replay/constraints.sql's `waited`), and the
predicted step with GPU computation halved (`category:computation=0.5`), with and without the inferred edges
(without: what a replay predicts from recorded sync events alone, i.e. before inference). Done when the shortening
with them is at least a fifth of the host wait per step. Then the step containment after removing the DataLoader on
the V100 ResNet trace: how far the step's work runs past the predicted step (measured: GPU work launched late in the
step runs on after it).

    python bench/replay_host_waits.py [TRACE ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.measure import SHARED  # noqa: E402
from tracekit.engine import catalog  # noqa: E402
from tracekit.pipeline import load  # noqa: E402
from tracekit.replay import replay, retimed_tables  # noqa: E402

TRACES = ["nvidia/h100_qwen1.5-0.5b.json.gz", "amd/mi300x_qwen1.5-0.5b.json.gz",
          "diff_pairs/resnet50_v100_workers0_vs_workers4/workers0.pt.trace.json.gz",
          "diff_pairs/resnet50_v100_workers0_vs_workers4/workers4.pt.trace.json.gz"]
WHAT_IF = {"category:computation": 0.5}

# Host wait per step: each waiting host call's wait (its start to the end of the GPU op it waited for, within the
# call; a call waiting for several ops: the longest), summed over the calls starting in the step.
HOST_WAIT_SQL = """
with waits as (
    select e.rank, c.ts, max(least(greatest(g.ts + g.dur - c.ts, 0), c.dur)) as waited_ns,
           bool_or(e.kind = 'sync_inferred') as inferred
    from edges e
    join events g on g.rank = e.rank and g.id = e.src
    join events c on c.rank = e.rank and c.id = e.dst
    where e.kind in ('sync', 'sync_inferred') and c.kind not in ('kernel', 'memcpy', 'memset')
    group by e.rank, e.dst, c.ts
)
select w.rank, w.step, coalesce(sum(waited_ns), 0) / 1e6 as host_wait_ms,
       coalesce(sum(waited_ns) filter (where inferred), 0) / 1e6 as inferred_wait_ms
from step_or_trace_windows() w
left join waits x on x.rank = w.rank and x.ts >= w.start_ns and x.ts < w.end_ns
group by w.rank, w.step
"""

# How far the step's work (step_members: host events on every thread, GPU ops by their launch) runs past the step.
OVERHANG_SQL = """
select w.rank, w.step, (max(e.ts + coalesce(e.dur, 0)) - any_value(w.end_ns)) / 1e6 as overhang_ms,
       (max(e.ts + coalesce(e.dur, 0)) filter (where e.kind not in ('kernel', 'memcpy', 'memset'))
        - any_value(w.end_ns)) / 1e6 as host_overhang_ms
from step_members() m
join events e on e.rank = m.rank and e.id = m.id and e.kind not in ('gpu_annotation', 'sync')
join step_or_trace_windows() w on w.rank = m.rank and w.step = m.step
group by w.rank, w.step
"""


def sql(tables, text: str) -> pl.DataFrame:
    with catalog.connect(tables) as con:
        catalog.prepare(con, text)
        return con.sql(text).pl()


def without_inferred(tables):
    edges = pl.from_arrow(tables.edges)
    return tables.with_tables(edges=edges.filter(pl.col("kind") != "sync_inferred").to_arrow())


def host_waits(path: Path) -> dict:
    tables = load(path)
    waits = sql(tables, HOST_WAIT_SQL)
    after = replay(tables, scale=WHAT_IF).select("rank", "step", "measured_ms", "predicted_ms")
    before = replay(without_inferred(tables), scale=WHAT_IF).select("rank", "step",
                                                                     pl.col("predicted_ms").alias("before_ms"))
    rows = after.join(before, on=["rank", "step"], how="left", nulls_equal=True).join(
        waits, on=["rank", "step"], how="left", nulls_equal=True)
    mean = rows.select(pl.exclude("rank", "step").mean()).row(0, named=True)
    return {"trace": path.name, "steps": rows.height, **{k: round(v, 3) for k, v in mean.items()},
            "shortening_ms": round(mean["measured_ms"] - mean["predicted_ms"], 3),
            "shortening/wait": round((mean["measured_ms"] - mean["predicted_ms"]) / mean["host_wait_ms"], 3)
            if mean["host_wait_ms"] else None}


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or [SHARED / t for t in TRACES]
    with pl.Config(tbl_rows=50, tbl_cols=20, tbl_width_chars=220):
        print(f"what-if {WHAT_IF}: means per step")
        print(pl.DataFrame([host_waits(p) for p in paths if p.exists()]))
        workers0 = SHARED / TRACES[2]
        if workers0.exists():
            tables = load(workers0)
            measured = sql(tables, OVERHANG_SQL)
            predicted = sql(retimed_tables(tables, remove=["op:enumerate(DataLoader)"]), OVERHANG_SQL)
            print("workers0 --remove op:enumerate(DataLoader): step work past the step end, ms")
            print(measured.join(predicted, on=["rank", "step"], suffix="_predicted").sort("step"))


if __name__ == "__main__":
    main()
