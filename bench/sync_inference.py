"""Inferred host-waits-on-GPU edges (sync_inferred): agreement with recorded cuda_sync edges, and the critical path's
time inside waiting host calls with and without them. The numbers of docs/critical_path.md.

Agreement: on every trace with cuda_sync events (and synth jobs, whose Stream Syncs have ground truth), the
sync_inferred pass is run as if the trace had no sync events (sync_edges empty) and compared with the recorded
sync edges of host calls that blocked (an op they waited for ended while they ran; the last of those released the
call): the inferred edge names that op, an op ending at the same time, another op, or there is none; and the inferred
edges on calls whose recorded syncs say they did not block. The lag: how long after the op that released it each
recorded blocking call returned.

Waiting share: on every trace without sync events that has GPU work, the share of the critical path (all windows)
owned by host calls that waited for the GPU (the destination of a sync or sync_inferred edge whose op ended inside
the call): "after" is the critical_path analysis, "before" the walk without sync_inferred edges over the CPU step
windows, as the critical path was before them.

    python bench/sync_inference.py [--quick]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import polars as pl
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.measure import SHARED  # noqa: E402
from tracekit import synth  # noqa: E402
from tracekit.engine import catalog  # noqa: E402
from tracekit.engine.tables import TraceTables  # noqa: E402
from tracekit.link.edges import inferred_edges  # noqa: E402
from tracekit.pipeline import load  # noqa: E402
from tracekit.query import analyses  # noqa: E402

RECORDED = ["nvidia/a100_alexnet_cuda_sync.json.gz", "nvidia/a100_simple_add_cuda_sync.json.gz",
            "nvidia/a100_event_sync.json.gz", "nvidia/a100_event_sync_multi_stream.json.gz",
            "nvidia/h100_kineto_cuda_sync_unit.json", "legacy/kineto_cuda_sync_before_fix.json"]
# Recorded on an H200 (PyTorch 2.11, CUDA 13) by tests/data/gpu/record.py; in the repository, not in SHARED
H200_TRAIN = Path(__file__).resolve().parent.parent / "tests" / "data" / "gpu" / "kineto_train.json.gz"
WITHOUT_SYNC = ["nvidia/h100_qwen1.5-0.5b.json.gz", "amd/mi300x_qwen1.5-0.5b.json.gz",
                "nvidia/b200_eager_rank0of8.json.gz", "nvidia/a100_trainer_rank0of16_cudagraph.json.gz",
                "amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz",
                "diff_pairs/resnet50_v100_workers0_vs_workers4/workers0.pt.trace.json.gz",
                "diff_pairs/resnet50_v100_workers0_vs_workers4/workers4.pt.trace.json.gz",
                "multirank/dlrm_8ranks_v100", "nvidia/v100_ns_resolution.json.gz", "nvidia/h100_bert-small.json.gz",
                "amd/mi300x_bert-small.json.gz", "nvidia/a100_nccl_rank0of2.json.gz",
                "legacy/resnet50_2020-12_bare_list.pt.trace.json.gz", "et_pairs/rtx2080ti_linear/kineto.json.gz",
                "amd/mi300x_vllm_decode_graph_execution.json.gz"]
QUICK = ["nvidia/h100_qwen1.5-0.5b.json.gz", "amd/mi300x_qwen1.5-0.5b.json.gz", "nvidia/b200_eager_rank0of8.json.gz"]


def inferred_as_if_unrecorded(tables: TraceTables) -> pl.DataFrame:
    """The sync_inferred pass over TABLES with no recorded sync edge to defer to."""
    return pl.from_arrow(inferred_edges(tables, recorded_first=False)).filter(pl.col("kind") == "sync_inferred")


def stream_wait_agreement(tables: TraceTables) -> dict:
    """Recorded Stream Wait Event edges whose waiting op started within 25 µs of the waited op's end (the wait
    gated it): how many the stream_wait_inferred pass finds (same op or same end) with no sync event to go on; and
    inferred edges into ops whose recorded wait did not gate them (false)."""
    events = tables.polars("events").select("rank", "id", "ts", end=pl.col("ts") + pl.col("dur"))
    waits = (pl.col("kind") == "sync") & pl.col("subkind").str.starts_with("Stream Wait Event")  # named or inferred
    recorded = (tables.polars("edges").filter(waits)
                .join(events.select("rank", src="id", src_end="end"), on=["rank", "src"])
                .join(events.select("rank", dst="id", dst_ts="ts"), on=["rank", "dst"])
                .group_by("rank", "dst").agg(pl.col("dst_ts").first(), pl.col("src_end").max()))
    alone = (pl.from_arrow(inferred_edges(tables, recorded_first=False))
             .filter(pl.col("kind") == "stream_wait_inferred")
             .join(events.select("rank", src="id", inferred_end="end"), on=["rank", "src"]))
    compared = recorded.join(alone.select("rank", "dst", "inferred_end"), on=["rank", "dst"], how="left")
    gated = compared.filter(pl.col("dst_ts") - pl.col("src_end") <= 25_000)
    return {"stream_waits_gating": gated.height,
            "stream_waits_found": gated.filter(pl.col("inferred_end") == pl.col("src_end")).height,
            "stream_waits_not_gating": compared.height - gated.height,
            "inferred_on_not_gating": compared.filter((pl.col("dst_ts") - pl.col("src_end") > 25_000)
                                                      & pl.col("inferred_end").is_not_null()).height}


def recorded_calls(tables: TraceTables) -> pl.DataFrame:
    """Host calls with recorded sync edges: whether one of the ops they waited for ended while they ran (blocked),
    the last such op (released_by, released_at) and how long after it the call returned (tail_ns)."""
    return catalog.sql(tables, """
        with waits as (
            select e.rank, e.dst, e.src, c.name as call, c.ts + c.dur as call_end, g.ts + g.dur as src_end,
                   g.ts + g.dur > c.ts and g.ts + g.dur <= c.ts + c.dur as inside
            from edges e
            join events c on c.rank = e.rank and c.id = e.dst
            join events g on g.rank = e.rank and g.id = e.src
            where e.kind = 'sync' and c.kind in ('runtime', 'driver'))
        select rank, dst, any_value(call) as call, bool_or(inside) as blocked,
               arg_max(src, struct_pack(src_end, src)) filter (inside) as released_by,
               max(src_end) filter (inside) as released_at,
               any_value(call_end) - max(src_end) filter (inside) as tail_ns
        from waits
        group by rank, dst""")


def agreement(name: str, tables: TraceTables) -> dict:
    recorded = recorded_calls(tables)
    inferred = inferred_as_if_unrecorded(tables)
    ends = tables.polars("events").select("rank", "id", op_end=pl.col("ts") + pl.col("dur"))
    inferred = inferred.join(ends, left_on=["rank", "src"], right_on=["rank", "id"]).select(
        "rank", "dst", inferred_src="src", inferred_end="op_end")
    blocking = recorded.filter("blocked").join(inferred, on=["rank", "dst"], how="left")
    not_blocking = recorded.filter(~pl.col("blocked"))
    return {
        "trace": name,
        "blocking_calls": blocking.height,
        "same_op": blocking.filter(pl.col("inferred_src") == pl.col("released_by")).height,
        "same_end": blocking.filter((pl.col("inferred_src") != pl.col("released_by"))
                                    & (pl.col("inferred_end") == pl.col("released_at"))).height,
        "other_op": blocking.filter(pl.col("inferred_end") != pl.col("released_at")).height,
        "none": blocking.filter(pl.col("inferred_src").is_null()).height,
        "not_blocking_calls": not_blocking.height,
        "inferred_on_not_blocking": not_blocking.join(inferred, on=["rank", "dst"], how="semi").height,
        "inferred_on_unrecorded_calls": inferred.join(recorded, on=["rank", "dst"], how="anti").height,
        **stream_wait_agreement(tables),
        "tails_us": sorted(t / 1e3 for t in blocking["tail_ns"]),
    }


def waiting_share(tables: TraceTables) -> tuple[float, float, float, int]:
    """(before %, after %, path ms, waiting calls): the path's time owned by host calls that waited for the GPU.
    Before: the walk without sync_inferred edges over the CPU step windows (as the critical path was before them);
    after: the critical_path analysis."""
    waits = catalog.sql(tables, """
        select distinct e.rank, e.dst as event_id
        from edges e
        join events c on c.rank = e.rank and c.id = e.dst
        join events g on g.rank = e.rank and g.id = e.src
        where e.kind in ('sync', 'sync_inferred') and c.kind in ('runtime', 'driver')
          and g.ts + g.dur > c.ts and g.ts + g.dur <= c.ts + c.dur""")
    without = tables.with_tables(edges=tables.edges.filter(pc.not_equal(tables.edges["kind"],
                                                                                "sync_inferred")))
    before = catalog.sql(without, """
        with windows as materialized (select rank, window_id, start_ns, end_ns from step_or_trace_windows())
        select * from critical_path_segments('windows')""")
    after = analyses.run(tables, "critical_path")
    shares = [100.0 * path.join(waits, on=["rank", "event_id"], how="semi")["duration_ns"].sum()
              / path["duration_ns"].sum() for path in (before, after)]
    return shares[0], shares[1], after["duration_ns"].sum() / 1e6, waits.height


def main() -> None:
    quick = "--quick" in sys.argv
    pl.Config.set_tbl_rows(100)
    pl.Config.set_tbl_width_chars(200)
    rows = []
    for name in RECORDED[:2] if quick else RECORDED:
        rows.append(agreement(name, load([SHARED / name])))
    rows.append(agreement("h200 kineto_train (tests/data/gpu)", load([H200_TRAIN])))
    with tempfile.TemporaryDirectory() as folder:
        synth.generate(Path(folder), ranks=2, steps=3, seed=11)
        rows.append(agreement("synth 2 ranks x 3 steps (seed 11)", load(sorted(Path(folder).glob("rank*.json")))))
    study = pl.DataFrame(rows)
    print("Agreement of inferred edges (computed as if no sync event were recorded) with the recorded ones:")
    print(study.drop("tails_us"))
    tails = sorted(t for row in rows[:-1] for t in row["tails_us"])
    real = study.head(len(rows) - 1)
    for label, part in (("real traces", real), ("synth", study.tail(1))):
        matched = part["same_op"].sum() + part["same_end"].sum()
        print(f"{label}: recorded blocking calls {part['blocking_calls'].sum()}, inferred the same op or one ending "
              f"at the same time {matched} ({100.0 * matched / max(part['blocking_calls'].sum(), 1):.1f}%); "
              f"calls recorded as not blocking {part['not_blocking_calls'].sum()}, inferred on them "
              f"{part['inferred_on_not_blocking'].sum()}")
    if tails:
        print(f"lag (call end - end of the op it waited for) on real traces, µs: n={len(tails)} min={tails[0]:g} "
              f"median={tails[len(tails) // 2]:g} max={tails[-1]:g}; all: {tails}")

    print("\nCritical-path time owned by host calls that waited for the GPU (traces without sync events):")
    shares = []
    for name in QUICK if quick else WITHOUT_SYNC:
        path = SHARED / name
        tables = load(sorted(path.glob("worker*.json.gz")) if path.is_dir() else [path])
        before, after, path_ms, calls = waiting_share(tables)
        kinds = tables.polars("edges").filter(pl.col("kind") == "sync_inferred")["subkind"].value_counts()
        shares.append({"trace": name, "path_ms": round(path_ms, 1), "waiting_calls": calls,
                       "before_percent": round(before, 2), "after_percent": round(after, 2),
                       "inferred_by_class": ", ".join(f"{k} {n}" for k, n in sorted(kinds.iter_rows()))})
    print(pl.DataFrame(shares))


if __name__ == "__main__":
    main()
