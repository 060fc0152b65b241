"""Inferred waits between host threads (thread_wait_inferred edges) against the critical path, which follows
them: how much of the path lies on a host thread while that thread sat idle waiting for another thread (the gap
before each thread_wait_inferred edge's dst point). Only what is left after following them (the hand-overs' lags)
should remain; docs/critical_path.md ("Waits between host threads") has the numbers.

    python bench/thread_waits_on_path.py [TRACE ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.measure import SHARED  # noqa: E402
from tracekit.engine import catalog  # noqa: E402
from tracekit.pipeline import load  # noqa: E402
from tracekit.query import analyses  # noqa: E402

TRACES = ["diff_pairs/resnet50_v100_workers0_vs_workers4/workers0.pt.trace.json.gz",
          "diff_pairs/resnet50_v100_workers0_vs_workers4/workers4.pt.trace.json.gz",
          "amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz", "nvidia/a100_nccl_rank0of2.json.gz",
          "multirank/dlrm_8ranks_v100", "nvidia/a100_trainer_rank0of16_cudagraph.json.gz",
          "nvidia/v100_ns_resolution.json.gz", "nvidia/h100_qwen1.5-0.5b.json.gz",
          "legacy/resnet50_2020-12_bare_list.pt.trace.json.gz"]

# Each edge's wait: on dst's thread, from the thread's previous point (start or end of a cpu_op, annotation or
# Python function) to dst's point; the path's segments on that thread inside it.
WAITS_SQL = """
with points as (
    select rank, id, pid, tid, false as is_end, ts as t from events
    where kind in ('cpu_op', 'user_annotation', 'python_function') and ts is not null
    union all
    select rank, id, pid, tid, true, ts + greatest(coalesce(dur, 0), 0) from events
    where kind in ('cpu_op', 'user_annotation', 'python_function') and ts is not null
),
previous as (
    select *, lag(t) over (partition by rank, pid, tid order by t, is_end desc, id) as prev_t from points
)
select e.rank, e.subkind, p.pid, p.tid, coalesce(p.prev_t, p.t) as wait_start, p.t as wait_end
from edges e join previous p on p.rank = e.rank and p.id = e.dst and p.is_end = ends_with(e.subkind, 'end')
where e.kind = 'thread_wait_inferred'
"""


def on_path(path: Path) -> dict:
    tables = load(path)
    with catalog.connect(tables) as con:
        waits = con.sql(WAITS_SQL).pl()
        threads = con.sql("select rank, id as event_id, pid, tid from events").pl()
    segments = analyses.run(tables, "critical_path").select("rank", "event_id", "category", "start_ns", "end_ns")
    total = segments["end_ns"].sum() - segments["start_ns"].sum()
    on_thread = segments.join(threads, on=["rank", "event_id"], how="left")
    overlap = (on_thread.join(waits, on=["rank", "pid", "tid"])
               .filter(pl.col("start_ns") < pl.col("wait_end"), pl.col("end_ns") > pl.col("wait_start"))
               .with_columns(ns=pl.min_horizontal("end_ns", "wait_end") - pl.max_horizontal("start_ns", "wait_start")))
    return {"trace": path.name, "edges": waits.height,
            "by_subkind": ", ".join(f"{k} {n}" for k, n in waits.group_by("subkind").len().sort("subkind").iter_rows()),
            "wait_ms": round((waits["wait_end"] - waits["wait_start"]).sum() / 1e6, 1),
            "path_ms": round(total / 1e6, 1),
            "path_in_waits_ms": round(overlap["ns"].sum() / 1e6, 3),
            "share_percent": round(100 * overlap["ns"].sum() / total, 2) if total else None}


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or [SHARED / t for t in TRACES]
    with pl.Config(tbl_rows=50, tbl_cols=20, tbl_width_chars=220, fmt_str_lengths=80):
        print(pl.DataFrame([on_path(p) for p in paths if p.exists()]))


if __name__ == "__main__":
    main()
