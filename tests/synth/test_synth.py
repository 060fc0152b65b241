"""tracekit synth: the files ingest losslessly and agree exactly with the ground truth written beside them.

The ground truth is counted by the generator as it makes the events; these tests check it against the files,
recomputing each number from the ingested tables (or from the JSON text) by an independent route.
"""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal

import polars as pl
import pytest

import tracekit
from tests.conftest import REPO
from tests.support.invariants import accounted_entries, trace_entries
from tracekit import synth

SMALL = dict(ranks=2, steps=2, seed=3)


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    """A small noisy capture with work queued before the window and a merged copy; its tables and truth."""
    out = tmp_path_factory.mktemp("synth")
    paths = synth.generate(out, **SMALL, noise=0.2, noise_seed=5, queued_kernels=3, merged=True)
    tables = tracekit.load([p for p in paths if p.parent == out])
    return out, paths, tables, synth.read_ground_truth(out)


def test_files_written(capture):
    out, paths, _, truth = capture
    assert [p.relative_to(out).as_posix() for p in paths] == ["rank0.json", "rank1.json", "merged/merged.json"]
    assert truth["files"] == ["rank0.json", "rank1.json", "merged/merged.json"]
    doc = json.loads((out / "rank1.json").read_text())
    assert doc["distributedInfo"]["rank"] == 1 and doc["distributedInfo"]["world_size"] == 2
    assert doc["distributedInfo"]["pg_config"][0]["ranks"] == [0, 1]
    assert {"id", "name"} <= set(doc["deviceProperties"][0]) and isinstance(doc["baseTimeNanoseconds"], int)


def test_nothing_lost_and_counts_by_kind(capture):
    out, _, tables, truth = capture
    for r in truth["ranks"]:
        entries = trace_entries(out / f"rank{r['rank']}.json")
        assert r["trace_entries"] == len(entries)
    assert accounted_entries(tables) == sum(r["trace_entries"] for r in truth["ranks"])
    assert tables.polars("diagnostics").filter(pl.col("reason") != "no_launcher").height == 0
    by_kind = tables.sql("select rank, kind, count(*) n from events group by all")
    flows = tables.sql("select rank, cat || ' ' || phase as flow, count(*) n from flows group by all")
    for r in truth["ranks"]:
        got = {k: n for rank, k, n in by_kind.iter_rows() if rank == r["rank"]}
        assert got == r["events_by_kind"]
        assert {f: n for rank, f, n in flows.iter_rows() if rank == r["rank"]} == r["flows"]


def test_timestamps_are_exact_nanoseconds(capture):
    """Every ts/dur literal has at most 3 decimals, and the ingest turns it into exactly base + µs·1000."""
    out, _, tables, truth = capture
    doc = json.loads((out / "rank0.json").read_text(), parse_float=Decimal)
    base = doc["baseTimeNanoseconds"]
    expected = []
    for position, e in enumerate(doc["traceEvents"]):
        if e["ph"] == "X":
            ts, dur = e["ts"] * 1000, e["dur"] * 1000
            assert ts == int(ts) and dur == int(dur), e
            expected.append((position, base + int(ts), int(dur)))
    got = tables.sql("select id, ts, dur from events where rank = 0 order by id").rows()
    assert got == expected


def test_kernel_totals_per_name(capture):
    _, _, tables, truth = capture
    kernels = tables.sql("select rank, name, count(*) n, sum(dur) total from events where kind = 'kernel' group by all")
    for r in truth["ranks"]:
        got = {name: {"count": n, "total_ns": total} for rank, name, n, total in kernels.iter_rows() if rank == r["rank"]}
        assert got == r["kernels"]


def test_step_windows_from_profiler_steps(capture):
    _, _, tables, truth = capture
    steps = tables.sql("select rank, name, ts, ts + dur as end_ts, dur from events "
                       "where kind = 'user_annotation' and name like 'ProfilerStep#%' order by rank, ts")
    for r in truth["ranks"]:
        got = [dict(name=n, start_ns=s, end_ns=e, dur_ns=d) for rank, n, s, e, d in steps.iter_rows() if rank == r["rank"]]
        assert got == [{k: s[k] for k in ("name", "start_ns", "end_ns", "dur_ns")} for s in r["steps"]]
        assert [s["name"] for s in r["steps"]] == ["ProfilerStep#0", "ProfilerStep#1"]


LAUNCHED_GPU_OPS = """
select g.rank, g.id, g.kind, g.name, g.ts, g.dur, g.stream, g.correlation,
       r.pid, r.tid, r.ts as launch_ts, r.dur as launch_dur
from events g join events r on r.rank = g.rank and r.correlation = g.correlation and r.kind = 'runtime'
where g.kind in ('kernel', 'memcpy', 'memset')
"""


def test_direct_and_subtree_kernel_time_per_op(capture):
    """Recomputed with a containment join: the cpu_ops around each launch call, the innermost starting last."""
    _, _, tables, truth = capture
    containing = tables.sql(f"""
        with gpu as ({LAUNCHED_GPU_OPS})
        select g.rank, g.id, g.dur, o.name, o.ts,
               row_number() over (partition by g.rank, g.id order by o.ts desc, o.dur) as depth_from_inside
        from gpu g join events o on o.rank = g.rank and o.pid = g.pid and o.tid = g.tid and o.kind = 'cpu_op'
             and o.ts <= g.launch_ts and o.ts + o.dur >= g.launch_ts + g.launch_dur
    """)
    direct = containing.filter(pl.col("depth_from_inside") == 1).group_by("rank", "name").agg(pl.col("dur").sum())
    subtree = containing.group_by("rank", "name").agg(pl.col("dur").sum())
    counts = tables.sql("select rank, name, count(*) n from events where kind = 'cpu_op' group by all")
    for r in truth["ranks"]:
        def of(frame, rank=r["rank"]):
            return {name: v for rank_, name, v in frame.iter_rows() if rank_ == rank}

        assert {n: o["count"] for n, o in r["ops"].items()} == of(counts)
        assert {n: o["direct_kernel_ns"] for n, o in r["ops"].items() if o["direct_kernel_ns"]} == of(direct)
        assert {n: o["subtree_kernel_ns"] for n, o in r["ops"].items() if o["subtree_kernel_ns"]} == of(subtree)
        assert r["ops"]["aten::linear"]["subtree_kernel_ns"] > 0 == r["ops"]["aten::linear"]["direct_kernel_ns"]


def covered(intervals: list[tuple[int, int]]) -> int:
    """Length of a union of intervals by a sweep over start/end points (depth counting)."""
    points = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda p: (p[0], -p[1]))
    total, depth, opened = 0, 0, None
    for t, step in points:
        if depth == 0 and step == 1:
            opened = t
        depth += step
        if depth == 0:
            total += t - opened
    return total


def test_gpu_timeline_and_launch_pairs(capture):
    _, _, tables, truth = capture
    gpu = tables.sql(LAUNCHED_GPU_OPS)
    for r in truth["ranks"]:
        ops = gpu.filter(pl.col("rank") == r["rank"])
        assert ops.height == r["launch_pairs"]
        spans = {c: [] for c in ("comm", "memcpy", "comp")}
        for kind, name, ts, dur in ops.select("kind", "name", "ts", "dur").iter_rows():
            c = "comm" if kind == "kernel" and "nccl" in name.lower() else "memcpy" if kind == "memcpy" else "comp"
            spans[c].append((ts, ts + dur))
        every = spans["comm"] + spans["memcpy"] + spans["comp"]
        total = max(e for _, e in every) - min(s for s, _ in every)
        expected = {
            "computation_ns": covered(spans["comp"]), "communication_ns": covered(spans["comm"]),
            "memcpy_ns": covered(spans["memcpy"]),
            "exposed_comm_ns": covered(spans["comm"] + spans["comp"]) - covered(spans["comp"]),
            "exposed_memcpy_ns": covered(every) - covered(spans["comm"] + spans["comp"]),
            "busy_ns": covered(every), "total_ns": total, "idle_ns": total - covered(every),
        }
        assert r["gpu_timeline"] == expected
        assert 0 < expected["exposed_comm_ns"] < expected["communication_ns"]


def test_gpu_ops_start_after_launch_and_never_overlap_on_a_stream(capture):
    _, _, tables, _ = capture
    gpu = tables.sql(LAUNCHED_GPU_OPS)
    assert gpu.filter(pl.col("ts") <= pl.col("launch_ts")).height == 0
    ops = tables.sql("select rank, stream, ts, ts + dur as end_ts from events "
                     "where kind in ('kernel', 'memcpy', 'memset') order by rank, stream, ts")
    overlaps = ops.with_columns(prev_end=pl.col("end_ts").shift().over("rank", "stream")).filter(
        pl.col("ts") < pl.col("prev_end"))
    assert overlaps.height == 0
    streams = tables.sql("select distinct stream from events where kind = 'kernel'")["stream"].to_list()
    assert len(streams) >= 2


def test_collectives_same_order_on_every_rank_ending_together(capture):
    _, _, tables, truth = capture
    nccl = tables.sql("select rank, name, ts, dur from events where kind = 'kernel' and name like 'nccl%' order by rank, ts")
    per_rank = [r["collectives"] for r in truth["ranks"]]
    for r, expected in zip(truth["ranks"], per_rank):
        got = [(n, s, d) for rank, n, s, d in nccl.iter_rows() if rank == r["rank"]]
        assert got == [(c["kernel"], c["start"], c["dur"]) for c in expected]
    assert [c["collective_name"] for c in per_rank[0]] == [c["collective_name"] for c in per_rank[1]]
    assert {c["collective_name"] for c in per_rank[0]} == {"allreduce", "_allgather_base", "_reduce_scatter_base"}
    ends = [[c["start"] + c["dur"] for c in cs] for cs in per_rank]
    assert ends[0] == ends[1]
    assert [c["start"] for c in per_rank[0]] != [c["start"] for c in per_rank[1]]  # start skew
    ops = tables.sql("select rank, collective_name, in_msg_nelems, group_size, process_group_ranks from events "
                     "where kind = 'cpu_op' and name = 'record_param_comms' order by rank, ts")
    # `Process Group Ranks` is a JSON string in real traces ("[0, 1]"); the column keeps its JSON text.
    assert ops.filter(pl.col("rank") == 0).rows() == [(0, c["collective_name"], c["in_nelems"], 2, '"[0, 1]"')
                                                      for c in per_rank[0]]


def test_sync_dependencies(capture):
    _, _, tables, truth = capture
    syncs = tables.sql("select rank, correlation, sync_kind, stream, wait_on_stream, wait_on_event_correlation "
                       "from events where kind = 'sync' order by rank, correlation")
    runtimes = tables.sql("select rank, correlation, name from events where kind = 'runtime'")
    names = {(r, c): n for r, c, n in runtimes.iter_rows()}
    for r in truth["ranks"]:
        expected = [(r["rank"], s["correlation"], s["kind"], s["stream"],
                     s["wait_on_stream"] if s["kind"] in ("Stream Wait Event", "Event Sync") else None,
                     s["wait_on_event_record_correlation"]) for s in r["syncs"]]
        assert syncs.filter(pl.col("rank") == r["rank"]).rows() == expected
        for s in r["syncs"]:
            assert names[(r["rank"], s["correlation"])] == s["runtime"]
            if s["wait_on_event_record_correlation"] is not None:
                assert names[(r["rank"], s["wait_on_event_record_correlation"])] == "cudaEventRecord"
        kinds = {s["kind"] for s in r["syncs"]}
        assert kinds == {"Stream Wait Event", "Stream Sync", "Event Sync", "Context Sync"}
        waits = [s for s in r["syncs"] if s["kind"] == "Stream Wait Event"]
        assert all(s["released_correlation"] is not None for s in waits)


def test_queued_before_window(capture):
    _, _, tables, truth = capture
    unlaunched = tables.sql("""
        select g.rank, g.correlation, g.ts, g.dur from events g
        anti join events r on r.rank = g.rank and r.correlation = g.correlation and r.kind = 'runtime'
        where g.kind in ('kernel', 'memcpy', 'memset') order by g.rank, g.ts""")
    for r in truth["ranks"]:
        assert len(r["queued_before_window"]) == 3
        assert unlaunched.filter(pl.col("rank") == r["rank"]).select("correlation", "ts", "dur").rows() == [
            (q["correlation"], q["start"], q["dur"]) for q in r["queued_before_window"]]


def test_merged_file_splits_into_the_same_ranks(capture):
    out, _, tables, _ = capture
    merged = tracekit.load(out / "merged" / "merged.json", edges=False)
    assert merged.rank_list == [0, 1]
    assert accounted_entries(merged) == sum(len(trace_entries(out / f"rank{r}.json")) for r in (0, 1))
    columns = [c for c in tables.events.column_names if c not in ("id", "pid", "args")]

    def rows(t):
        return (pl.from_arrow(t.events).with_columns(
            args=pl.col("args").map_elements(lambda a: json.dumps({k: v for k, v in json.loads(a).items() if k != "rank"}),
                                             return_dtype=pl.String))
                .select(*columns, "args").sort("rank", "ts", "name", "tid", "dur", "correlation"))

    assert rows(merged).equals(rows(tables))
    correlations = merged.sql("select correlation from events where kind = 'runtime' group by 1 having count(distinct rank) = 2")
    assert correlations.height > 0  # ids collide across ranks; only rank tells them apart
    assert merged.sql("select count(distinct pid) n from events")["n"][0] == tables.sql(
        "select count(distinct rank || ':' || pid) n from events")["n"][0]


def test_same_seeds_give_identical_files_and_noise_seed_changes_durations(tmp_path):
    a = synth.generate(tmp_path / "a", **SMALL, noise=0.1, noise_seed=1)
    b = synth.generate(tmp_path / "b", **SMALL, noise=0.1, noise_seed=1)
    c = synth.generate(tmp_path / "c", **SMALL, noise=0.1, noise_seed=2)
    assert all(x.read_bytes() == y.read_bytes() for x, y in zip(a, b))

    def kernels(path):
        return [(e["name"], e["dur"]) for e in trace_entries(path) if e.get("cat") == "kernel"]

    ka, kc = kernels(a[0]), kernels(c[0])
    assert [n for n, _ in ka] == [n for n, _ in kc]  # the same job...
    assert sum(d1 != d2 for (_, d1), (_, d2) in zip(ka, kc)) > 0.9 * len(ka)  # ...captured twice
    ta, tc = synth.read_ground_truth(tmp_path / "a"), synth.read_ground_truth(tmp_path / "c")
    assert [r["events_by_kind"] for r in ta["ranks"]] == [r["events_by_kind"] for r in tc["ranks"]]


def test_slow_kernel_factor(tmp_path):
    base = synth.generate(tmp_path / "base", **SMALL)
    name = synth.K_LAYER_NORM
    slow = synth.generate(tmp_path / "slow", **SMALL, slow_kernels={"vectorized_layer_norm_kernel": 1.5})

    def durations(path):
        return [(e["name"], round(e["dur"] * 1000)) for e in trace_entries(path) if e.get("cat") == "kernel"]

    before, after = durations(base[0]), durations(slow[0])
    assert [n for n, _ in before] == [n for n, _ in after]
    hit = [(d1, d2) for (n, d1), (_, d2) in zip(before, after) if n == name]
    assert hit and all(d2 == round(d1 * 1.5) for d1, d2 in hit)
    assert all(d1 == d2 for (n, d1), (_, d2) in zip(before, after) if n != name and "nccl" not in n)
    tb, ts = synth.read_ground_truth(tmp_path / "base"), synth.read_ground_truth(tmp_path / "slow")
    assert ts["ranks"][0]["kernels"][name]["total_ns"] == sum(d2 for _, d2 in hit)
    assert ts["ranks"][0]["kernels"][name]["total_ns"] > tb["ranks"][0]["kernels"][name]["total_ns"]


def test_slow_kernel_names_match_case_insensitively_and_must_match(tmp_path):
    """--slow-kernel softmax slows cunn_SoftMaxForward (replay's kernel:softmax picks it too); a name no kernel has
    is a user error naming the closest kernel names, not a capture without the slow-down."""
    name = "void (anonymous namespace)::cunn_SoftMaxForward"
    base = synth.read_ground_truth(synth.generate(tmp_path / "base", **SMALL)[0].parent)
    slow = synth.read_ground_truth(synth.generate(tmp_path / "slow", **SMALL, slow_kernels={"softmaxforward": 2})[0].parent)

    def softmax_ns(truth):
        return sum(k["total_ns"] for n, k in truth["ranks"][0]["kernels"].items() if n.startswith(name))

    assert softmax_ns(base) > 0 and softmax_ns(slow) == pytest.approx(2 * softmax_ns(base), abs=5)
    with pytest.raises(tracekit.InputError, match=r"--slow-kernel sofmaxforward=2: .*closest names: .*SoftMaxForward"):
        synth.generate(tmp_path / "typo", **SMALL, slow_kernels={"sofmaxforward": 2})
    assert not (tmp_path / "typo").exists()


def test_drift_scales_every_duration_of_a_capture_by_one_factor(tmp_path):
    base = synth.generate(tmp_path / "base", **SMALL)
    drifted = synth.generate(tmp_path / "drift", **SMALL, drift=0.05, noise_seed=3)
    factor = synth.SynthConfig(**SMALL, drift=0.05, noise_seed=3).drift_factor
    assert factor != 1.0 and factor == synth.SynthConfig(**SMALL, drift=0.05, noise_seed=3).drift_factor
    assert synth.SynthConfig(**SMALL, drift=0.05, noise_seed=4).drift_factor != factor  # another capture
    with pytest.raises(tracekit.InputError, match="--drift -0.1: must be zero or positive"):
        synth.SynthConfig(**SMALL, drift=-0.1).check()

    def kernels(path):
        return [(e["name"], round(e["dur"] * 1000)) for e in trace_entries(path) if e.get("cat") == "kernel"]

    for before_path, after_path in zip(base, drifted):  # every rank: the same factor
        before, after = kernels(before_path), kernels(after_path)
        assert [n for n, _ in before] == [n for n, _ in after]
        # collectives end when the last rank arrives plus a transfer: only their transfer part scales
        timed = [(d1, d2) for (n, d1), (_, d2) in zip(before, after) if "nccl" not in n]
        assert timed and all(abs(d2 - d1 * factor) <= 1 for d1, d2 in timed)


def test_scale_multiplies_ops():
    small = synth.synthesize(synth.SynthConfig(ranks=1, steps=1, scale=1))
    large = synth.synthesize(synth.SynthConfig(ranks=1, steps=1, scale=3))
    n_small = small.ground_truth["ranks"][0]["events_by_kind"]["kernel"]
    n_large = large.ground_truth["ranks"][0]["events_by_kind"]["kernel"]
    assert 2.5 * n_small < n_large < 3.5 * n_small


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "tracekit.cli", *args], capture_output=True, text=True, cwd=REPO)


def test_cli_quick_start_gzip_and_rerun(tmp_path):
    """README: `tracekit synth --ranks 2 --steps 4 -o example/` then `tracekit ingest example/`."""
    out = tmp_path / "example"
    for extra in ((), ("--gzip", "--ranks", "3", "--steps", "1")):  # a second run replaces the first one's files
        result = run_cli("synth", "--ranks", "2", "--steps", "4", "-o", str(out), *extra)
        assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["ground_truth.json", "rank0.json.gz", "rank1.json.gz", "rank2.json.gz"]
    result = run_cli("ingest", str(out), "-o", str(tmp_path / "tables"))
    assert result.returncode == 0, result.stderr
    assert "ranks [0, 1, 2]" in result.stdout


@pytest.mark.parametrize("args,needle", [
    (("--slow-kernel", "gemm"), "expected NAME=FACTOR"),
    (("--slow-kernel", "gemm=-2"), "expected NAME=FACTOR"),
    (("--slow-kernel", "nosuch=2"), "no kernel of the job has 'nosuch' in its name"),
])
def test_cli_bad_options_are_one_line(tmp_path, args, needle):
    result = run_cli("synth", "-o", str(tmp_path / "x"), *args)
    assert result.returncode == 2 and needle in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_refuses_to_write_into_a_foreign_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(tracekit.InputError, match="not a tracekit synth output"):
        synth.generate(tmp_path, **SMALL)
