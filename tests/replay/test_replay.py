"""Replay against times worked out by hand and against measured captures (synth ground truth, real traces)."""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner, Result

from tests.conftest import shared_trace
from tracekit.cli import main
from tracekit.errors import InputError
from tracekit.pipeline import load
from tracekit.replay import Selector, parse_scale, replay

HOST, GPU = {"pid": 1, "tid": 1}, {"pid": 0, "tid": 7}


def x(cat, name, ts, dur, where, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **where, "args": args}


# One step (µs): aten::mm launches gemm (lag 5 after its launch call: the GPU waited for the launch), aten::add
# launches add_kernel (launched at 40, but the stream is busy until 65: it starts 1 µs after gemm), then
# cudaDeviceSynchronize from 50 waits for the GPU (done at 76) and returns 4 µs later; the step ends 20 µs after.
STEP_TRACE = {"traceEvents": [
    x("user_annotation", "ProfilerStep#1", 0, 100, HOST),
    x("cpu_op", "aten::mm", 10, 20, HOST),
    x("cuda_runtime", "cudaLaunchKernel", 15, 5, HOST, correlation=1),
    x("cpu_op", "aten::add", 35, 10, HOST),
    x("cuda_runtime", "cudaLaunchKernel", 37, 3, HOST, correlation=2),
    x("cuda_runtime", "cudaDeviceSynchronize", 50, 30, HOST, correlation=3),
    x("kernel", "gemm_kernel", 25, 40, GPU, correlation=1, stream=7, device=0),
    x("kernel", "add_kernel", 66, 10, GPU, correlation=2, stream=7, device=0),
    x("cuda_sync", "Context Sync", 51, 28, {"pid": 0, "tid": -1}, correlation=3, device=0, stream=-1,
      cuda_sync_kind="Context Sync"),
]}


@pytest.fixture(scope="module")
def step_tables(tmp_path_factory):
    path = tmp_path_factory.mktemp("replay") / "step.json"
    path.write_text(json.dumps(STEP_TRACE))
    return load(path)


def step_ms(tables, **what_if) -> float:
    rows = replay(tables, **what_if)
    assert rows.height == 1
    return rows["predicted_ms"][0]


def test_unchanged_graph_replays_to_the_measured_step(step_tables):
    rows = replay(step_tables)
    assert rows.select("rank", "step", "measured_ms", "predicted_ms").row(0) == (0, 1, 0.1, 0.1)
    assert rows["error_percent"][0] == 0
    # busy: gemm 25-65 and add 66-76 inside the step window
    assert rows["busy_ms"][0] == pytest.approx(0.05)


@pytest.mark.parametrize(("what_if", "expected_us"), [
    # gemm 25-105; add waits for the stream: 106-116; the sync returns 4 µs after it: 120; step end 140
    ({"scale": {"kernel:gemm": 2}}, 140),
    # gemm 25-45; add: stream free at 46, launch at 40 + 5 (the rank's launch latency): 46-56; sync 60; end 80
    ({"scale": {"kernel:GEMM": 0.5}}, 80),
    # aten::add takes no CPU time and its kernel no GPU time: the sync starts at 40 and waits for the GPU
    # (gemm ends 65, add 66-66): returns at 70, step end 90
    ({"remove": ["op:aten::add"]}, 90),
    # its CPU time alone: the GPU is still busy until 76, the step still ends at 100
    ({"remove": ["cpu:aten::add"]}, 100),
    # the CPU time of mm (10-30) gone, its launch call with it (ends at 10): gemm 15-55 (lag 5 kept, it waited
    # for its launch); add at 15-25, launched 17-20: add_kernel 56-66; the sync starts 30, returns 70; end 90
    ({"remove": ["cpu:aten::mm"]}, 90),
    # category computation: both kernels x2: gemm 25-105, add 106-126, sync 130, end 150
    ({"scale": {"category:computation": 2}}, 150),
])
def test_what_ifs_match_the_times_worked_out_by_hand(step_tables, what_if, expected_us):
    assert step_ms(step_tables, **what_if) == pytest.approx(expected_us / 1000)


def test_removing_a_critical_op_shortens_the_step_by_no_more_than_its_time(step_tables):
    measured = replay(step_tables)["measured_ms"][0]
    for op, cpu_us, gpu_us in (("aten::add", 10, 10), ("aten::mm", 20, 40)):
        after = step_ms(step_tables, remove=[f"op:{op}"])
        assert measured - (cpu_us + gpu_us) / 1000 <= after < measured


def test_scaling_every_duration_and_gap_by_two_doubles_a_step_without_idle_time(tmp_path):
    # back-to-back work: a step whose time is all inside events (no gaps, no launch or sync latency)
    trace = {"traceEvents": [
        x("user_annotation", "ProfilerStep#3", 0, 60, HOST),
        x("cpu_op", "aten::relu", 0, 20, HOST),
        x("cpu_op", "aten::mul", 20, 40, HOST),
    ]}
    path = tmp_path / "flat.json"
    path.write_text(json.dumps(trace))
    assert step_ms(load(path), scale={"cpu:": 2}) == pytest.approx(0.120)


# Two ranks, one all-reduce (µs). Rank 0: aten::mm 10-30 (gemm 25-45 on stream 7), record_param_comms 32-40
# launches the NCCL kernel at 34-37, which starts at 40 (lag 3) and waits there for rank 1. Rank 1: aten::conv
# 10-50 (CPU only), record_param_comms 52-60, launch 54-57, kernel at 60: the last to arrive. Both kernels end at
# 70 (transfer 10); each rank's cudaDeviceSynchronize returns 5 µs after, at 75; both steps end at 100.
COMM_STREAM = {"pid": 0, "tid": 20}
PG = {"Collective name": "allreduce", "Process Group Name": "0", "Group size": 2, "dtype": "Float",
      "In msg nelems": 1024, "Out msg nelems": 1024}


def collective_rank(compute, arrive, sync_at):
    return [x("user_annotation", "ProfilerStep#1", 0, 100, HOST), *compute,
            x("cpu_op", "record_param_comms", arrive - 8, 8, HOST, **PG),
            x("cuda_runtime", "cudaLaunchKernel", arrive - 6, 3, HOST, correlation=2),
            x("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", arrive, 70 - arrive, COMM_STREAM, correlation=2,
              stream=20, device=0),
            x("cuda_runtime", "cudaDeviceSynchronize", sync_at, 75 - sync_at, HOST, correlation=3),
            x("cuda_sync", "Context Sync", sync_at + 1, 73 - sync_at, {"pid": 0, "tid": -1}, correlation=3,
              device=0, stream=-1, cuda_sync_kind="Context Sync")]


COLLECTIVE_RANKS = [
    collective_rank([x("cpu_op", "aten::mm", 10, 20, HOST),
                     x("cuda_runtime", "cudaLaunchKernel", 15, 5, HOST, correlation=1),
                     x("kernel", "gemm_kernel", 25, 20, GPU, correlation=1, stream=7, device=0)], 40, 45),
    collective_rank([x("cpu_op", "aten::conv", 10, 40, HOST)], 60, 62),
]


@pytest.fixture(scope="module")
def collective_tables(tmp_path_factory):
    folder = tmp_path_factory.mktemp("collective")
    for rank, events in enumerate(COLLECTIVE_RANKS):
        (folder / f"rank{rank}.json").write_text(json.dumps(
            {"distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": events}))
    return load(folder)


@pytest.mark.parametrize(("what_if", "expected_us"), [
    ({}, (100, 100)),
    # transfer 10 -> 5: both kernels end at rank 1's arrival + 5 = 65 (rank 0's too: it cannot finish before
    # rank 1 arrives); syncs return at 70, steps end at 95
    ({"scale": {"kernel:nccl": 0.5}}, (95, 95)),
    # rank 0's pre-collective op twice as fast (mm 10-20, gemm 22.5-32.5): it arrives at 30, but the all-reduce
    # still ends at 60 + 10 = 70 on both ranks, so rank 0's step does not move
    ({"scale": {"op:aten::mm": 0.5}}, (100, 100)),
    # the late rank twice as fast (conv 10-30): it arrives at 40 with rank 0; both kernels end at 50, syncs return
    # at 55, steps end at 80 on both ranks
    ({"scale": {"op:aten::conv": 0.5}}, (80, 80)),
    # the kernel scaled once although the selector picks it twice (its GPU category, and its record_param_comms of
    # op category communication); record_param_comms' own time halves too, so its launch ends 1 + 1.5 µs after
    # the op starts: rank 0 arrives at 37.5, rank 1 at 57.5; both end at 57.5 + 5, syncs return at 67.5, steps
    # end at 92.5
    ({"scale": {"category:communication": 0.5}}, (92.5, 92.5)),
])
def test_collectives_end_at_the_last_arrival_plus_the_transfer(collective_tables, what_if, expected_us):
    rows = replay(collective_tables, **what_if).sort("rank")
    assert rows["measured_ms"].to_list() == pytest.approx([0.1, 0.1])
    assert rows["predicted_ms"].to_list() == pytest.approx([t / 1000 for t in expected_us])


def test_bad_selectors_are_user_errors():
    with pytest.raises(InputError):
        Selector.parse("kernels:gemm")
    with pytest.raises(InputError):
        parse_scale("kernel:gemm=-1")
    assert parse_scale("op:a=b=1.5") == (Selector("op", "a=b"), 1.5)


def run_cli(*args: str) -> Result:
    """The command in this process (what is checked is the command's output, not the process)."""
    return CliRunner().invoke(main, list(args))


def synth(out, *args):
    done = run_cli("synth", "-o", str(out), "--steps", "3", *args)
    assert done.exit_code == 0, done.output
    return out


@pytest.mark.parametrize(("ranks", "slow", "scale"), [
    (1, "gemm=1.5", {"kernel:gemm": 1.5}),
    (2, "nccl=0.5", {"category:communication": 0.5}),
])
def test_a_scaled_replay_predicts_the_synth_capture_of_the_change(tmp_path, ranks, slow, scale):
    base = synth(tmp_path / "base", "--ranks", str(ranks), "--noise", "0.05")
    truth = synth(tmp_path / "slow", "--ranks", str(ranks), "--noise", "0.05", "--slow-kernel", slow)
    predicted = replay(load(base), scale=scale)
    measured = replay(load(truth)).select("rank", "step", pl.col("measured_ms").alias("truth_ms"))
    joined = predicted.join(measured, on=["rank", "step"])
    assert joined.height == 3 * ranks
    assert ((joined["predicted_ms"] / joined["truth_ms"] - 1).abs() <= 0.03).all(), joined


def test_halved_communication_with_deep_ep_and_custom_all_reduce(tmp_path):
    """category:communication covers DeepEP and custom all-reduce kernels (coupled across ranks like NCCL's):
    halving it predicts the capture whose every collective, of any library, is twice as fast."""
    expert = ("--ranks", "2", "--noise", "0.05", "--expert-parallel")
    base = synth(tmp_path / "base", *expert)
    faster = [a for lib in ("nccl", "deep_ep::", "cross_device_reduce") for a in ("--slow-kernel", f"{lib}=0.5")]
    truth = synth(tmp_path / "fast", *expert, *faster)
    predicted = replay(load(base), scale={"category:communication": 0.5})
    measured = replay(load(truth)).select("rank", "step", pl.col("measured_ms").alias("truth_ms"))
    joined = predicted.join(measured, on=["rank", "step"])
    assert joined.height == 3 * 2
    assert ((joined["predicted_ms"] / joined["truth_ms"] - 1).abs() <= 0.03).all(), joined


def test_cli_prints_one_row_per_step(tmp_path):
    path = tmp_path / "step.json"
    path.write_text(json.dumps(STEP_TRACE))
    done = run_cli("replay", str(path), "--scale", "kernel:gemm=2", "--format", "csv")
    assert done.exit_code == 0, done.output
    out = done.stdout
    header, row = out.strip().splitlines()
    assert header.startswith("rank,step,measured_ms,predicted_ms,error_percent")
    assert row.startswith("0,1,0.1,0.14,")
    bad = run_cli("replay", str(path), "--remove", "gemm")
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1


@pytest.mark.parametrize(("option", "closest"), [
    (("--scale", "kernel:nosuch=2"), "none"),
    (("--scale", "kernel:gemmm=2"), "gemm"),  # gemm_kernel: a word of the name
    (("--remove", "op:aten::ad"), None),  # a part of a name matches: aten::add
    (("--scale", "category:computaton=0.5"), "computation"),
    (("--remove", "cpu:cudaDeviceSync"), None),
    (("--remove", "cpu:cudaDeviceSink"), "cudaDeviceSynchronize"),
])
def test_a_selector_that_matches_nothing_is_one_line_and_exit_2(tmp_path, option, closest):
    path = tmp_path / "step.json"
    path.write_text(json.dumps(STEP_TRACE))
    run = run_cli("replay", str(path), *option, "--format", "csv")
    if closest is None:
        assert run.exit_code == 0, run.stderr
        return
    selector = option[1].rpartition("=")[0] if option[0] == "--scale" else option[1]
    assert run.exit_code == 2 and run.stdout == "" and run.stderr.count("\n") == 1, run
    assert f"selector {selector} matches nothing" in run.stderr
    assert run.stderr.strip().endswith(f"closest names: {closest}") if closest == "none" else closest in run.stderr


@pytest.mark.xfail(strict=True, reason="workers4's steps without their DataLoader time are 31% slower than "
                                        "workers0's (4 worker processes running beside the main thread): a replay "
                                        "of workers0 cannot know that; predicted -24.5% (docs/replay.md)")
def test_removing_the_dataloader_predicts_the_worker_processes_run():
    pair = shared_trace("diff_pairs/resnet50_v100_workers0_vs_workers4")
    predicted = replay(load(pair / "workers0.pt.trace.json.gz"), remove=["op:enumerate(DataLoader)"])
    measured = replay(load(pair / "workers4.pt.trace.json.gz"))
    before, after, truth = (predicted["measured_ms"].mean(), predicted["predicted_ms"].mean(),
                            measured["measured_ms"].mean())
    # The what-if moves the prediction most of the way from workers0 to workers4 (see docs/replay.md for the error).
    assert abs(after - truth) < 0.5 * abs(before - truth)


def test_the_replayed_timeline_reingests_with_the_replayed_times(step_tables, tmp_path):
    """`-o`: the what-if's timeline reads back with the same events, at the times the replay gave them."""
    from tracekit.replay import retimed_tables

    out = tmp_path / "after.json.gz"
    replay(step_tables, scale={"kernel:gemm": 2}, timeline=out)
    expected = retimed_tables(step_tables, scale={"kernel:gemm": 2}).polars("events")
    back = load(out).polars("events")
    keys = ["kind", "name"]
    for frame in (expected, back):
        assert frame.height
    got = back.filter(pl.col("kind").is_in(["kernel", "cpu_op", "runtime"])).select(*keys, "ts", "dur").sort(*keys, "ts")
    want = expected.filter(pl.col("kind").is_in(["kernel", "cpu_op", "runtime"])).select(*keys, "ts", "dur").sort(*keys, "ts")
    # the timeline is written in µs relative to its base; compare shapes of time, not the absolute origin
    shift = want["ts"].min() - got["ts"].min()
    assert got.with_columns(pl.col("ts") + shift).equals(want)
    gemm = back.filter(pl.col("name") == "gemm")
    assert gemm["dur"].to_list() == [2 * d for d in step_tables.polars("events").filter(pl.col("name") == "gemm")["dur"]]
