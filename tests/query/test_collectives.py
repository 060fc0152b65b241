"""collectives, collective_skew, collective_waits against args read straight from the JSON, nccl-tests' bus bandwidth
formulas, and synth ground truth."""

from __future__ import annotations

import re

import polars as pl
import pytest

import tracekit
from tests.conftest import shared_trace
from tests.support import raw_trace
from tests.support.categories import communication_kernel
from tracekit import synth
from tracekit.query import analyses

# c10d / annotation names in the test traces -> collective type
TYPES = {"allreduce": "all_reduce", "nccl:all_reduce": "all_reduce", "broadcast": "broadcast",
         "_allgather_base": "all_gather", "_reduce_scatter_base": "reduce_scatter", "nccl:all_to_all": "all_to_all"}
ELEMENT_BYTES = {"Float": 4, "BFloat16": 2, "Long": 8, "float": 4, "int": 4, "long int": 8}


def nccl_tests_busbw(collective: str, algbw: float, n: int) -> float:
    """nccl-tests' busBw = algBw x factor (PERFORMANCE.md of NVIDIA/nccl-tests)."""
    if collective == "all_reduce":
        return algbw * 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return algbw * (n - 1) / n
    return algbw  # broadcast, reduce, send/recv


# kernels without args: the collective their name implies (docs/categories.md)
NAMED_TYPES = (("multimem_all_reduce|cross_device_reduce", "all_reduce"),
               ("deep_ep::.*(dispatch|combine)", "all_to_all"))


def oracle_collectives(raw: raw_trace.RawTrace, world_size: int) -> dict[int, dict]:
    """Per communication kernel (by position; docs/categories.md's rule): type, size, group from its own args,
    else the innermost enclosing record_param_comms (or nccl:* annotation) of its launch call on the call's
    thread, else the type its name implies."""
    by_correlation = {e.args.get("correlation"): e for e in raw.events if e.cat in raw_trace.LAUNCH_CATS}
    describers = [e for e in raw.events
                  if (e.name == "record_param_comms" and "Collective name" in e.args) or e.name.startswith("nccl:")]
    out = {}
    for k in raw.events:
        if k.cat not in ("kernel", "Kernel") or not communication_kernel(k.name):
            continue
        args = k.args if "Collective name" in k.args else None
        if args is None and (call := by_correlation.get(k.args.get("correlation"))) is not None:
            enclosing = [d for d in describers
                         if (d.pid, d.tid) == (call.pid, call.tid) and d.ts <= call.ts and call.end <= d.end]
            if enclosing:
                inner = max(enclosing, key=lambda d: (d.ts, -d.end))
                args = inner.args if "Collective name" in inner.args else {
                    "Collective name": inner.name, "In msg nelems": inner.args["Input Dims"][0][0],
                    "Out msg nelems": inner.args["Input Dims"][0][0], "dtype": inner.args["Input type"][0]}
        if args is None:
            named = next((t for pattern, t in NAMED_TYPES if re.search(pattern, k.name)), None)
            out[k.position] = {"collective": named, "bytes": None, "start_ns": k.ts, "dur": k.dur}
            continue
        n = args.get("Group size", world_size)
        size = max(args["In msg nelems"], args["Out msg nelems"]) * ELEMENT_BYTES[args["dtype"]]
        collective = TYPES[args["Collective name"]]
        algbw = size / k.dur  # bytes per ns = GB/s
        out[k.position] = {"collective": collective, "bytes": size, "group_size": n, "dtype": args["dtype"],
                           "process_group": args.get("Process Group Name", "unknown"), "start_ns": k.ts,
                           "dur": k.dur, "algbw": algbw, "busbw": nccl_tests_busbw(collective, algbw, n)}
    return out


@pytest.mark.parametrize("name, world, rows, with_args", [
    ("nvidia/a100_nccl_rank0of2.json.gz", 2, 21, 21),
    ("nvidia/b200_eager_rank0of8.json.gz", 8, 74, 1),  # args on the NCCL kernel itself; 73 multimem all-reduces
    ("amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz", 8, 17, 12),  # 5 RCCL kernels queued before the window
])
def test_collectives_match_json_args(name, world, rows, with_args):
    path = shared_trace(name)
    expected = oracle_collectives(raw_trace.read(path), world)
    got = analyses.run(tracekit.load(path), "collectives")
    assert got.height == len(expected) == rows
    assert got["bytes"].is_not_null().sum() == with_args
    for row in got.iter_rows(named=True):
        want = expected[row["event_id"]]
        assert row["collective"] == want["collective"]
        assert row["start_ns"] == want["start_ns"] and round(row["duration_us"] * 1e3) == want["dur"]
        if want["bytes"] is None:
            assert row["bytes"] is None and row["busbw_gbps"] is None
            continue
        assert (row["bytes"], row["group_size"], row["dtype"], row["process_group"]) == (
            want["bytes"], want["group_size"], want["dtype"], want["process_group"])
        assert row["algbw_gbps"] == pytest.approx(want["algbw"], rel=1e-12)
        assert row["busbw_gbps"] == pytest.approx(want["busbw"], rel=1e-12)


def test_dlrm_collectives_from_nccl_annotations_and_skew_across_ranks():
    """8 ranks, 8 NCCL kernels each: sizes from the enclosing nccl:* annotations (no collective args in this
    trace), matched across ranks by order, skew / slowest rank / waits from the raw kernel starts."""
    folder = shared_trace("multirank/dlrm_8ranks_v100")
    tables = tracekit.load(folder)
    got = analyses.run(tables, "collectives")
    starts: dict[int, list[int]] = {}
    for r in range(8):
        raw = raw_trace.read(folder / f"worker{r}.pt.trace.json.gz")
        expected = oracle_collectives(raw, 8)
        mine = got.filter(pl.col("rank") == raw.rank).sort("seq")
        assert mine.height == 8 and set(mine["args_source"]) == {"annotation"}
        for row in mine.iter_rows(named=True):
            want = expected[row["event_id"]]
            assert (row["collective"], row["bytes"], row["group_size"]) == (
                want["collective"], want["bytes"], 8)
            assert row["busbw_gbps"] == pytest.approx(want["busbw"], rel=1e-12)
        starts[raw.rank] = [w["start_ns"] for _, w in sorted(expected.items(), key=lambda kv: kv[1]["start_ns"])]
    check_skew_and_waits(tables, starts, process_group="unknown")


def check_skew_and_waits(tables, starts: dict[int, list[int]], process_group: str):
    skew = analyses.run(tables, "collective_skew").filter(pl.col("process_group") == process_group).sort("seq")
    waits = analyses.run(tables, "collective_waits").filter(pl.col("process_group") == process_group)
    count = len(next(iter(starts.values())))
    assert skew["seq"].to_list() == list(range(1, count + 1))
    for i, row in enumerate(skew.iter_rows(named=True)):
        arrivals = {rank: s[i] for rank, s in starts.items()}
        last = max(arrivals.values())
        assert row["ranks"] == len(arrivals)
        assert round(row["start_skew_us"] * 1e3) == last - min(arrivals.values())
        assert row["slowest_rank"] == min(r for r, t in arrivals.items() if t == last)
        for rank, t in arrivals.items():
            wait = waits.filter((pl.col("rank") == rank) & (pl.col("seq") == i + 1)).row(0, named=True)
            assert round(wait["wait_us"] * 1e3) == last - t
            assert wait["is_slowest"] == (rank == row["slowest_rank"])


def test_synth_collectives_and_skew_match_ground_truth(tmp_path):
    synth.generate(tmp_path, ranks=4, steps=2, seed=5)
    truth = synth.read_ground_truth(tmp_path)
    tables = tracekit.load(sorted(tmp_path.glob("rank*.json")))
    got = analyses.run(tables, "collectives")
    starts = {}
    for rank_truth in truth["ranks"]:
        mine = got.filter(pl.col("rank") == rank_truth["rank"]).sort("seq")
        want = rank_truth["collectives"]
        assert mine["kernel_name"].to_list() == [c["kernel"] for c in want]
        assert mine["start_ns"].to_list() == [c["start"] for c in want]
        assert [round(d * 1e3) for d in mine["duration_us"]] == [c["dur"] for c in want]
        assert mine["in_nelems"].to_list() == [c["in_nelems"] for c in want]
        assert mine["out_nelems"].to_list() == [c["out_nelems"] for c in want]
        assert mine["bytes"].to_list() == [max(c["in_nelems"], c["out_nelems"]) * 4 for c in want]
        assert mine["collective"].to_list() == [TYPES[c["collective_name"]] for c in want]
        for row, c in zip(mine.iter_rows(named=True), want):
            algbw = max(c["in_nelems"], c["out_nelems"]) * 4 / c["dur"]
            assert row["busbw_gbps"] == pytest.approx(nccl_tests_busbw(row["collective"], algbw, 4), rel=1e-12)
        starts[rank_truth["rank"]] = [c["start"] for c in want]
    check_skew_and_waits(tables, starts, process_group="0")


@pytest.mark.parametrize("name, world", [("nvidia/a100_nccl_rank0of2.json.gz", 2),
                                         ("amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz", 8)])
def test_collective_summary_groups_the_raw_kernels_by_what_they_move(name, world):
    """The Collectives sheet's rows: the oracle's kernels grouped by (group, collective, dtype, size) in Python."""
    path = shared_trace(name)
    groups: dict[tuple, list[int]] = {}
    for k in oracle_collectives(raw_trace.read(path), world).values():
        key = (k.get("process_group", "unknown"), k["collective"], k.get("dtype"), k["bytes"])
        groups.setdefault(key, []).append(k["dur"])
    got = analyses.run(tracekit.load(path), "collective_summary")
    assert got.height == len(groups)
    for row in got.iter_rows(named=True):
        durations = sorted(groups[(row["process_group"], row["collective"], row["dtype"], row["bytes"])])
        assert row["calls"] == len(durations)
        assert round(row["total_ms"] * 1e6) == sum(durations)
        assert (round(row["min_us"] * 1e3), round(row["max_us"] * 1e3)) == (durations[0], durations[-1])
