"""tracekit diff: the noise rule on hand-built analysis results, then real and synthetic traces."""

from __future__ import annotations

import statistics

import numpy as np
import openpyxl
import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal
from rich.console import Console

import tracekit
from tests.conftest import shared_trace
from tests.support.rank_test import exact_rank_test
from tracekit import diff, synth
from tracekit.cli import main
from tracekit.diff.matching import summarize_ranks
from tracekit.engine import catalog
from tracekit.executors import ProcessPool
from tracekit.inputs import resolve_inputs
from tracekit.query import analyses

# ---------------------------------------------------------------------------------------------------------------
# Hand-built sides: per-step op results, from which totals and steps are made as the analyses would.

OPS = {"aten::mm": ("GEMM", 10.0), "aten::add": ("elementwise", 2.0), "aten::relu": ("elementwise", 1.0)}


def side_from_steps(label: str, per_step_ops: pl.DataFrame) -> diff.Side:
    """A Side whose op_summary, steps and gpu_timeline agree with `per_step_ops` (rank, step, name, times...)."""
    per_step = per_step_ops.with_columns(
        category=pl.col("name").replace_strict({k: v[0] for k, v in OPS.items()}, default="other"),
        subtree_kernel_ms=pl.col("direct_kernel_ms"), self_cpu_ms=pl.col("total_cpu_ms"))
    totals = per_step.group_by("rank", "name", "category", maintain_order=True).agg(pl.exclude("step").sum())
    steps = (per_step.group_by("rank", "step", maintain_order=True)
             .agg(busy_ms=pl.col("direct_kernel_ms").sum())
             .with_columns(idle_ms=pl.lit(5.0), duration_ms=pl.col("busy_ms") + 5.0, computation_ms=pl.col("busy_ms"),
                           communication_ms=pl.lit(0.0), exposed_communication_ms=pl.lit(0.0),
                           memcpy_ms=pl.lit(0.0), exposed_memcpy_ms=pl.lit(0.0)))
    timeline = (steps.group_by("rank").agg(pl.col("busy_ms", "idle_ms", "duration_ms").sum())
                .unpivot(index="rank", variable_name="category", value_name="time_ms")
                .with_columns(pl.col("category").replace({"busy_ms": "busy", "idle_ms": "idle",
                                                          "duration_ms": "total"})))
    results = {"op_summary": totals, "steps": steps, "gpu_timeline": timeline}
    return diff.Side(label, results, {"op_summary": per_step},
                     per_step.select("rank", "step").unique().sort("rank", "step"))


def noisy_ops(seed: int, steps: int = 6, slow: dict[str, float] | None = None, sd: float = 0.02,
              ranks: int = 1) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    rows = [dict(rank=r, step=s, name=name, count=4,
                 direct_kernel_ms=ms * (slow or {}).get(name, 1.0) * (1 + sd * rng.standard_normal()),
                 total_cpu_ms=0.5 * (1 + sd * rng.standard_normal()))
            for r in range(ranks) for s in range(steps) for name, (_, ms) in OPS.items()]
    return pl.DataFrame(rows, schema_overrides={"rank": pl.Int32})


# The sections a hand-built side has measures in (the others compare nothing): what its many-pair tests compare.
HAND_BUILT = {name: diff.SECTIONS[name] for name in ("step_time", "gpu_timeline", "ops")}
STEP_TIME = {"step_time": diff.SECTIONS["step_time"]}


def op_row(result: diff.DiffResult, name: str) -> dict:
    return result.sections["ops"].filter(pl.col("name") == name).row(0, named=True)


def steady_values(steps: pl.DataFrame, name: str, metric: str = "direct_kernel_ms", warmup: int = 0) -> list[float]:
    """An op's per-step values in the steps the diff compares: every step of these hand-built sides is steady (their
    `steps` say nothing of queued GPU work), less the first `warmup` (--warmup-steps, default 0)."""
    first = sorted(steps["step"].unique().to_list())[:warmup]
    rows = steps.filter((pl.col("name") == name) & ~pl.col("step").is_in(first)).sort("step")
    return rows[metric].to_list()


def test_verdict_is_the_rank_test_and_shift_interval_of_the_steady_steps():
    base_steps, cand_steps = noisy_ops(1), noisy_ops(2, slow={"aten::mm": 1.5})
    result = diff.compare(side_from_steps("a", base_steps), side_from_steps("b", cand_steps))
    expected = exact_rank_test(steady_values(base_steps, "aten::mm"), steady_values(cand_steps, "aten::mm"))
    row = op_row(result, "aten::mm")
    base_total = base_steps.filter(pl.col("name") == "aten::mm")["direct_kernel_ms"].sum()
    assert row["base_direct_kernel_ms"] == pytest.approx(base_total)  # values: the whole capture, warm-up included
    for column in ("effect", "ci_low", "ci_high", "p_value"):
        assert row[f"{column}_direct_kernel_ms"] == pytest.approx(expected[column]), column
    assert expected["ci_low"] > 0 and row["verdict"] == "slower" and row["verdict_on"] == "direct_kernel_ms"
    assert result.sections["ops"]["name"][0] == "aten::mm"
    assert result.headline()["verdict"] == "slower"
    assert result.warmup == (("a", ()), ("b", ()))
    one = diff.compare(side_from_steps("a", base_steps), side_from_steps("b", cand_steps), warmup_steps=1)
    expected = exact_rank_test(steady_values(base_steps, "aten::mm", warmup=1),
                               steady_values(cand_steps, "aten::mm", warmup=1))
    assert op_row(one, "aten::mm")["effect_direct_kernel_ms"] == pytest.approx(expected["effect"])
    assert one.warmup == (("a", (0,)), ("b", (0,)))


def test_step_time_verdict_is_robust_to_the_warm_up_step():
    # The workers pair's steps: the candidate's first step is slower than every baseline step, the rest ~28% faster.
    base_ms = [176.1, 174.0, 176.9, 181.3, 176.5, 164.3]
    cand_ms = [181.6, 123.9, 126.8, 126.3, 163.5, 116.1]

    def side(label, durations):
        steps = pl.DataFrame({"rank": [0] * 6, "step": list(range(6)), "duration_ms": durations},
                             schema_overrides={"rank": pl.Int32})
        return diff.Side(label, {"steps": steps})

    result = diff.compare(side("a", base_ms), side("b", cand_ms), warmup_steps=1)
    head = result.headline()
    # The values are the medians of the steps compared (the steady ones), as the report's Overview.
    assert head["base"] == pytest.approx(np.median(base_ms[1:]))
    assert head["cand"] == pytest.approx(np.median(cand_ms[1:]))
    expected = exact_rank_test(base_ms[1:], cand_ms[1:])
    assert head["effect"] == pytest.approx(expected["effect"]) and head["p_value"] == pytest.approx(2 / 252)
    assert head["verdict"] == "faster" and (head["n_base"], head["n_cand"]) == (5, 5)
    assert result.warmup_text() == "a: ProfilerStep#0; b: ProfilerStep#0"
    kept = diff.compare(side("a", base_ms), side("b", cand_ms))  # the default: every steady step
    assert kept.warmup_text() == "" and kept.headline()["n_cand"] == 6
    assert kept.headline()["base"] == pytest.approx(np.median(base_ms))
    # p = 0.065 with the slow first step: the interval reaches zero and beyond the floor
    assert kept.headline()["verdict"] == exact_verdict(base_ms, cand_ms) == "inconclusive"


def exact_verdict(base: list[float], cand: list[float], floor_percent: float = 1.0) -> str:
    expected = exact_rank_test(base, cand)
    floor = floor_percent / 100 * max(abs(statistics.median(base)), abs(statistics.median(cand)))
    if expected["ci_low"] is None:
        return "not enough steps to say"
    if (expected["ci_low"] > 0 or expected["ci_high"] < 0) and abs(expected["effect"]) > floor:
        return "slower" if expected["effect"] > 0 else "faster"
    return "no change" if -floor <= expected["ci_low"] and expected["ci_high"] <= floor else "inconclusive"


def test_same_configuration_gives_verdicts_at_most_at_the_level():
    judged = called = 0
    for seed in range(20):
        result = diff.compare(side_from_steps("a", noisy_ops(seed)), side_from_steps("b", noisy_ops(seed + 100)),
                              sections=HAND_BUILT)
        verdict = result.measures.filter(pl.col("verdict").is_not_null())["verdict"]
        judged += verdict.len()
        called += verdict.is_in(["slower", "faster"]).sum()
    # 20 pairs × (3 ops × 4 timed metrics + GPU timeline + step time); exact 6-vs-6 test at 5%: at most 4.1% each.
    assert judged > 300 and called <= 0.05 * judged, (called, judged)


def test_identical_captures_are_no_change_when_steady_and_inconclusive_when_noisy():
    steady = noisy_ops(30, sd=0.002)
    result = diff.compare(side_from_steps("a", steady), side_from_steps("b", steady))
    # Identical steps 0.2% apart: every interval lies within the 1% floor, so each measure is "no change".
    assert set(result.measures["verdict"].drop_nulls()) == {"no change"}
    assert result.measures.filter(pl.col("n_base") == 6).height == result.measures.height
    # The same with 2% noise: the interval (identical samples: symmetric about 0) reaches beyond the floor.
    noisy = noisy_ops(30)
    result = diff.compare(side_from_steps("a", noisy), side_from_steps("b", noisy))
    for name in OPS:
        values = steady_values(noisy, name)
        assert op_row(result, name)["verdict_direct_kernel_ms"] == exact_verdict(values, values), name
    assert not set(result.measures["verdict"].drop_nulls()) & {"slower", "faster"}


def test_an_op_missing_from_some_steps_counts_as_zero_there():
    base = noisy_ops(3)
    cand = noisy_ops(4).filter(~((pl.col("name") == "aten::relu") & (pl.col("step") >= 3)))
    result = diff.compare(side_from_steps("a", base), side_from_steps("b", cand))
    relu = steady_values(cand, "aten::relu") + [0.0] * 3
    expected = exact_rank_test(steady_values(base, "aten::relu"), relu)
    row = op_row(result, "aten::relu")
    assert row["effect_direct_kernel_ms"] == pytest.approx(expected["effect"])
    assert row["verdict"] == exact_verdict(steady_values(base, "aten::relu"), relu)
    counted = result.measures.filter((pl.col("item") == "aten::relu") & (pl.col("metric") == "direct_kernel_ms"))
    assert counted["n_cand"].to_list() == [6]  # the 3 steps without relu are values of 0, not missing


def test_one_step_each_is_not_enough_to_say():
    base = noisy_ops(4, steps=1, sd=0)
    cand = noisy_ops(5, steps=1, sd=0, slow={"aten::mm": 1.04, "aten::add": 1.5, "aten::relu": 0.5})
    result = diff.compare(side_from_steps("a", base), side_from_steps("b", cand))
    assert set(result.sections["ops"]["verdict"]) == {"not enough steps to say"}
    assert result.headline()["verdict"] == "not enough steps to say"
    assert result.headline()["ci_low"] is None and not result.regressed(1)
    # Keeping the only step does not help: one value a side gives no interval either.
    kept = diff.compare(side_from_steps("a", base), side_from_steps("b", cand), warmup_steps=0)
    assert set(kept.sections["ops"]["verdict"]) == {"not enough steps to say"}


def test_ops_on_one_side_only_are_added_or_removed():
    base = noisy_ops(6)
    cand = pl.concat([noisy_ops(7).filter(pl.col("name") != "aten::relu"),
                      noisy_ops(7).filter(pl.col("name") == "aten::mm").with_columns(name=pl.lit("aten::bmm"))])
    result = diff.compare(side_from_steps("a", base), side_from_steps("b", cand))
    verdicts = dict(result.sections["ops"].select("name", "verdict").iter_rows())
    assert verdicts["aten::relu"] == "removed" and verdicts["aten::bmm"] == "added"
    bmm = op_row(result, "aten::bmm")
    assert bmm["base_direct_kernel_ms"] is None
    assert bmm["delta_direct_kernel_ms"] == pytest.approx(bmm["cand_direct_kernel_ms"])
    # Sorted by |delta|: the added bmm (≈60 ms) before the removed relu (≈6 ms).
    names = result.sections["ops"]["name"].to_list()
    assert names.index("aten::bmm") < names.index("aten::relu")


def test_candidate_with_fewer_steps_is_scaled_to_the_baseline_step_count():
    base, cand = noisy_ops(8, steps=6, sd=0.001), noisy_ops(9, steps=5, sd=0.001)
    result = diff.compare(side_from_steps("a", base), side_from_steps("b", cand))
    row = op_row(result, "aten::mm")
    mm = cand.filter(pl.col("name") == "aten::mm")["direct_kernel_ms"].sum()
    assert row["cand_direct_kernel_ms"] == pytest.approx(mm * 6 / 5)
    assert row["cand_count"] == pytest.approx(24)
    # The verdict compares steps, which need no scaling: 6 steady steps against 5.
    assert row["verdict"] == exact_verdict(steady_values(base, "aten::mm"), steady_values(cand, "aten::mm"))


def test_per_rank_and_all_ranks_rows():
    base, cand = noisy_ops(10, ranks=2), noisy_ops(11, ranks=2, slow={"aten::mm": 1.3})
    result = diff.compare(side_from_steps("a", base), side_from_steps("b", cand))
    timeline = result.sections["gpu_timeline"].filter(pl.col("category") == "busy")
    assert sorted(timeline["rank"].to_list(), key=lambda r: -1 if r is None else r) == [None, 0, 1]
    overall = timeline.filter(pl.col("rank").is_null()).row(0, named=True)
    assert overall["base_time_ms"] == pytest.approx(base["direct_kernel_ms"].sum())
    assert set(timeline["verdict"]) == {"slower"}
    assert op_row(result, "aten::mm")["base_count"] == 2 * 6 * 4


def test_regression_gate_needs_both_the_percentage_and_noise():
    result = diff.compare(side_from_steps("a", noisy_ops(12)),
                          side_from_steps("b", noisy_ops(13, slow={"aten::mm": 1.5})))
    percent = result.headline()["percent_delta"]
    assert 20 < percent < 40  # mm is 10 of 18 ms per step
    assert result.regressed(percent - 5) and not result.regressed(percent + 5)
    assert result.regressed(10, "op:aten::mm") and not result.regressed(10, "op:aten::add")
    assert result.regressed(10, "busy") and not result.regressed(1, "idle")
    with pytest.raises(LookupError):
        result.regressed(10, "op:aten::nothing")


def test_kernel_names_that_do_not_match_are_noted():
    def with_kernels(side: diff.Side, prefix: str) -> diff.Side:
        ops = side.results["op_summary"]
        kernels = ops.select("rank", kernel_name=prefix + pl.col("name"), category="category",
                             count="count", total_us=pl.col("direct_kernel_ms") * 1000)
        return diff.Side(side.label, {**side.results, "kernel_summary": kernels}, side.per_step, side.steps)

    a, b = side_from_steps("a", noisy_ops(14)), side_from_steps("b", noisy_ops(15))
    result = diff.compare(with_kernels(a, "sm90_"), with_kernels(b, "Cijk_"))
    assert any("kernel names mostly differ" in n for n in result.notes)
    assert set(result.sections["kernels"]["verdict"]) == {"added", "removed"}
    assert not set(result.sections["ops"]["verdict"]) & {"slower", "faster", "added", "removed"}
    same = diff.compare(with_kernels(a, "sm90_"), with_kernels(b, "sm90_"))
    assert not same.notes


def test_runs_without_any_result_still_compare():
    result = diff.compare(diff.Side("a", {}), diff.Side("b", {}))
    assert all(frame.height == 0 for frame in result.sections.values())
    with pytest.raises(LookupError):
        result.headline()
    assert result.workbook_frames()["summary"]["verdict"].to_list() == [None]
    console = Console(record=True, width=120)
    diff.print_summary(result, console)
    assert "step time: not in both runs" in console.export_text()


def test_cli_rejects_an_unknown_metric_with_exit_code_2(tmp_path):
    out = CliRunner().invoke(main, ["diff", str(tmp_path), str(tmp_path), "--fail-on-regression", "5",
                                    "--metric", "bogus"])
    assert out.exit_code == 2 and "bogus" in out.output


def test_no_critical_path_skips_the_walk_and_leaves_out_only_its_section(tmp_path, monkeypatch):
    """`--no-critical-path`: neither side computes the critical path's shared tables (its costliest analyses), and
    the diff workbook is the default one less its Critical path sheet, cell for cell; the option reaches the
    processes of `--jobs`."""
    runs = [tmp_path / name for name in ("a", "b")]
    for noise_seed, run in enumerate(runs, 1):
        synth.generate(run, ranks=2, steps=5, seed=2, noise=0.02, noise_seed=noise_seed)
    lean_sections = diff.without_critical_path(diff.SECTIONS)
    assert set(diff.SECTIONS) - set(lean_sections) == {"critical_path"}
    made: list[str] = []
    materialize = catalog.materialize_macro
    monkeypatch.setattr(catalog, "materialize_macro", lambda con, name: (made.append(name), materialize(con, name))[1])
    side = diff.summarize(tracekit.load(runs[0]), "a", lean_sections)
    assert "critical_path_summary" not in side.results and "op_summary" in side.results
    with ProcessPool(2) as pool:  # each rank's file summarised in a worker process, as --jobs 2
        side = diff.summarize_inputs(resolve_inputs(runs[0]), "a", pool, sections=lean_sections)
    assert "critical_path_summary" not in side.results and "op_summary" in side.results
    for name, extra in (("full", []), ("lean", ["--no-critical-path"]), ("jobs", ["--no-critical-path", "--jobs", "2"])):
        made.clear()
        out = CliRunner().invoke(main, ["diff", *map(str, runs), "-o", str(tmp_path / f"{name}.xlsx"), *extra])
        assert out.exit_code == 0, out.output
        if name != "jobs":  # (--jobs walks in its processes, not seen here: its workbook is compared below)
            walked = [macro for macro in made if "critical_path" in macro]
            assert walked if name == "full" else not walked, name
    (full, _), (lean, _) = read_workbook(tmp_path / "full.xlsx"), read_workbook(tmp_path / "lean.xlsx")
    assert "Critical path" in full and list(lean) == [name for name in full if name != "Critical path"]
    for name, rows in lean.items():
        assert rows == full[name], name
    assert (tmp_path / "jobs.xlsx").read_bytes() == (tmp_path / "lean.xlsx").read_bytes()


# ---------------------------------------------------------------------------------------------------------------
# Real traces

ORACLE = "oracles/tracelens_compare_h100_vs_mi300_qwen"
WORKERS = "diff_pairs/resnet50_v100_workers0_vs_workers4"


@pytest.fixture(scope="module")
def cross_vendor():
    h100 = tracekit.load(shared_trace("nvidia/h100_qwen1.5-0.5b.json.gz"))
    mi300 = tracekit.load(shared_trace("amd/mi300x_qwen1.5-0.5b.json.gz"))
    return diff.compare(h100, mi300, labels=("h100", "mi300"))


def test_cross_vendor_op_kernel_times_agree_with_tracelens_compare(cross_vendor):
    oracle = pl.read_csv(shared_trace(ORACLE) / "ops_summary.csv")
    ops = cross_vendor.sections["ops"]
    joined = oracle.join(ops, on="name", how="left")
    assert joined.height == oracle.height >= 20
    for ours, theirs in (("base_direct_kernel_ms", "h100::total_direct_kernel_time_ms"),
                         ("cand_direct_kernel_ms", "mi300::total_direct_kernel_time_ms")):
        # TraceLens leaves an op out of a side where it launched nothing: ours is then 0 or absent.
        pairs = joined.select(ours=pl.col(ours).fill_null(0), theirs=pl.col(theirs).fill_null(0))
        assert pairs["ours"].to_numpy() == pytest.approx(pairs["theirs"].to_numpy(), rel=1e-3, abs=1e-5), ours
    both = joined.filter(pl.col("h100::total_direct_kernel_time_ms").is_not_null())
    assert both["delta_direct_kernel_ms"].to_numpy() == pytest.approx(
        both["total_direct_kernel_time_ms__mi300_diff"].to_numpy(), rel=1e-3, abs=1e-5)


def test_cross_vendor_gpu_timeline_agrees_with_tracelens_compare(cross_vendor):
    oracle = pl.read_csv(shared_trace(ORACLE) / "gpu_timeline.csv")
    timeline = cross_vendor.sections["gpu_timeline"].filter(pl.col("rank").is_null())
    for category, kind in (("busy", "busy_time"), ("idle", "idle_time"), ("computation", "computation_time"),
                           ("total", "total_time")):
        ours = timeline.filter(pl.col("category") == category).row(0, named=True)
        theirs = oracle.filter(pl.col("type") == kind).row(0, named=True)
        assert ours["base_time_ms"] == pytest.approx(theirs["h100::time ms"], rel=1e-3)
        assert ours["cand_time_ms"] == pytest.approx(theirs["mi300::time ms"], rel=1e-3)


def test_cross_vendor_compares_at_op_and_category_level(cross_vendor):
    assert any("kernel names mostly differ" in n for n in cross_vendor.notes)
    categories = dict(cross_vendor.sections["categories"].select("category", "verdict").iter_rows())
    # Same model, same ops: every category exists on both sides (no added/removed), so the comparison is usable.
    assert {"GEMM", "elementwise", "attention"} <= categories.keys()
    assert not {"added", "removed"} & {categories[c] for c in ("GEMM", "elementwise", "attention")}


@pytest.fixture(scope="module")
def workers_pair():
    pair = shared_trace(WORKERS)
    return pair / "workers0.pt.trace.json.gz", pair / "workers4.pt.trace.json.gz"


@pytest.fixture(scope="module")
def workers_sides(workers_pair):
    return [diff.summarize(tracekit.load(p), label) for p, label in zip(workers_pair, ("workers0", "workers4"))]


@pytest.fixture(scope="module")
def workers_diff(workers_sides):
    # --warmup-steps 1: workers4's first step (182 ms, then 116-164 ms) is a warm-up the report's rule keeps
    return diff.compare(*workers_sides, warmup_steps=1)


def test_workers_pair_with_every_steady_step_is_inconclusive_and_says_variance_is_unmeasured(workers_sides):
    # The report's steady steps (all 6 a side): the candidate's slow first step leaves p = 0.065 (exact: 60/924);
    # the interval reaches zero but not within the floor. One capture a side: the headline says what it cannot see.
    result = diff.compare(*workers_sides)
    head = result.headline()
    base_ms = [176.078, 173.992, 176.918, 181.259, 176.468, 164.261]  # the Steps sheet of each trace
    cand_ms = [181.565, 123.884, 126.824, 126.272, 163.461, 116.146]
    assert (head["n_base"], head["n_cand"]) == (6, 6) and head["base"] == pytest.approx(np.median(base_ms))
    assert head["p_value"] == pytest.approx(exact_rank_test(base_ms, cand_ms)["p_value"], rel=1e-6)
    assert head["verdict"] == "inconclusive" and result.variance_note and "unmeasured" in result.variance_note


def test_dataloader_workers_show_as_the_top_change(workers_diff):
    top = workers_diff.top_changes(5)
    # With 4 workers the main process no longer runs the single-process DataLoader iterator.
    assert top["item"][0] == "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    assert top["verdict"][0] == "removed"
    ops = dict(workers_diff.sections["ops"].select("name", "verdict").iter_rows())
    assert ops["enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"] == "added"
    assert workers_diff.headline()["verdict"] == "faster"
    idle = workers_diff.sections["gpu_timeline"].filter(pl.col("rank").is_null() & (pl.col("category") == "idle"))
    assert idle["verdict"][0] == "faster"


def test_fail_on_regression_exits_1_on_the_slower_run(workers_pair):
    workers0, workers4 = map(str, workers_pair)
    slower = CliRunner().invoke(main, ["diff", workers4, workers0, "--fail-on-regression", "5", "--warmup-steps", "1"])
    assert slower.exit_code == 1, slower.output
    assert "regression: step_time" in slower.output


# ---------------------------------------------------------------------------------------------------------------
# Synthetic runs: two captures of one job, and the same job with one kernel slowed down

SLOWED_KERNEL = "cunn_SoftMaxForward"
SYNTH_JOB = dict(ranks=2, steps=6, seed=3)


@pytest.fixture(scope="module")
def synth_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth_runs")
    for name, noise_seed, slow in (("base", 1, None), ("same", 2, None), ("slow", 2, {SLOWED_KERNEL: 1.5})):
        synth.generate(root / name, noise=0.05, noise_seed=noise_seed, slow_kernels=slow, **SYNTH_JOB)
    # Without noise, the ops whose direct kernel time the slow-down changes are exactly the kernel's launchers.
    for name, slow in (("exact_base", None), ("exact_slow", {SLOWED_KERNEL: 1.5})):
        synth.generate(root / name, slow_kernels=slow, **SYNTH_JOB)
    return root


def launchers_of_slowed_kernel(root) -> set[str]:
    before, after = (synth.read_ground_truth(root / name)["ranks"][0]["ops"] for name in ("exact_base", "exact_slow"))
    return {op for op, truth in before.items() if truth["direct_kernel_ns"] != after[op]["direct_kernel_ns"]}


@pytest.fixture(scope="module")
def synth_sides(synth_runs):
    """The runs summarised once, labelled as `compare` labels tables (base, cand)."""
    return {name: diff.summarize(tracekit.load(synth_runs / name), label)
            for name, label in (("base", "base"), ("same", "cand"), ("slow", "cand"))}


@pytest.fixture(scope="module")
def slowed_diff(synth_sides):
    return diff.compare(synth_sides["base"], synth_sides["slow"])


def test_two_captures_of_one_job_give_almost_no_verdicts(synth_sides):
    result = diff.compare(synth_sides["base"], synth_sides["same"])
    judged = result.measures.filter(pl.col("decides") & pl.col("verdict").is_not_null())
    called = judged.filter(pl.col("verdict").is_in(["slower", "faster"]))
    assert judged.height > 100
    # At most the test's level (5%) of unchanged measures may be called; in practice far fewer pass the 1% floor.
    assert called.height <= 0.05 * judged.height, called.select("section", "item", "metric", "effect", "ci_low")
    assert judged.filter(pl.col("verdict").is_in(["added", "removed"])).height == 0


def test_a_slowed_kernel_and_its_launching_op_top_the_regressions(synth_runs, slowed_diff):
    launchers = launchers_of_slowed_kernel(synth_runs)
    assert len(launchers) == 1
    kernel = slowed_diff.sections["kernels"].row(0, named=True)
    assert SLOWED_KERNEL in kernel["kernel_name"] and kernel["verdict"] == "slower"
    assert kernel["percent_delta_total_us"] == pytest.approx(50, abs=10)
    op = slowed_diff.sections["ops"].row(0, named=True)
    assert op["name"] in launchers and op["verdict"] == "slower"
    top = slowed_diff.top_changes(2)
    assert set(top["verdict"]) == {"slower"}
    assert {r["item"] if r["section"] == "ops" else SLOWED_KERNEL * (SLOWED_KERNEL in r["item"])
            for r in top.iter_rows(named=True)} == launchers | {SLOWED_KERNEL}


def test_regression_gate_on_the_synthetic_slowdown(synth_runs, slowed_diff):
    truth = [synth.read_ground_truth(synth_runs / name)["ranks"][0]["steps"] for name in ("base", "slow")]
    median_step = [float(np.median([s["dur_ns"] for s in steps])) for steps in truth]
    slowdown = 100 * (median_step[1] / median_step[0] - 1)  # about 5%: the softmax kernel is a small part of a step
    assert slowed_diff.headline()["percent_delta"] == pytest.approx(slowdown, abs=0.5)
    assert slowed_diff.regressed(slowdown - 2) and not slowed_diff.regressed(slowdown + 2)
    assert slowed_diff.regressed(40, "op:aten::_softmax") and not slowed_diff.regressed(60, "op:aten::_softmax")


@pytest.fixture(scope="module")
def gated_cli_run(synth_runs, tmp_path_factory):
    """`tracekit diff` of two captures of one job with a gate and a workbook: (the run, the workbook's path)."""
    path = tmp_path_factory.mktemp("gated") / "d.xlsx"
    return CliRunner().invoke(main, ["diff", str(synth_runs / "base"), str(synth_runs / "same"),
                                     "--fail-on-regression", "0", "-o", str(path)], env={"COLUMNS": "160"}), path


def test_cli_passes_the_gate_on_a_second_capture(gated_cli_run):
    out, _ = gated_cli_run
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("step time"))
    headline = lines[at]
    assert not headline.endswith(("slower", "faster")) and "6 vs 6 steps" in headline
    assert "95% CI (alpha 0.05 per measure, no multiple-comparison correction) [" in headline
    assert "run-to-run variance is unmeasured" in lines[at + 1] and "-- B1 B2" in lines[at + 1]


def test_an_ingested_dataset_diffs_like_its_traces(synth_runs, synth_sides, tmp_path):
    tracekit.write_dataset(tracekit.load(synth_runs / "base"), tmp_path / "base.tables")
    result = diff.compare(tracekit.load(tmp_path / "base.tables"), synth_sides["base"])
    assert result.measures.height > 500
    assert result.measures.filter(pl.col("delta") != 0).height == 0
    # No measure with per-step values is called (identical steps); GPU time with no launcher has none.
    stepped = result.measures.filter(pl.col("n_base") > 0)
    assert set(stepped["verdict"].drop_nulls()) <= {"no change", "inconclusive"} and stepped.height > 500
    assert stepped.filter(pl.col("ci_low") > 0).height == stepped.filter(pl.col("ci_high") < 0).height == 0
    assert set(result.measures.filter(pl.col("n_base") == 0)["item"]) <= {"no_launcher_excluded"}


def test_noisy_candidate_whose_steps_all_exceed_the_baseline_is_slower(tmp_path):
    # Issue 14's shape: a tight baseline and a noisy candidate whose every step is slower than every baseline step.
    # (The former t × standard-error rule, inflated by the candidate's spread, called this unchanged.)
    job = dict(ranks=1, steps=6, seed=3)
    synth.generate(tmp_path / "base", noise=0.01, noise_seed=1, **job)
    synth.generate(tmp_path / "cand", noise=0.5, noise_seed=2, **job)
    base_ms, cand_ms = ([s["dur_ns"] / 1e6 for s in synth.read_ground_truth(tmp_path / n)["ranks"][0]["steps"]]
                        for n in ("base", "cand"))
    assert max(base_ms) < min(cand_ms) and np.std(cand_ms) > 10 * np.std(base_ms)
    out = CliRunner().invoke(main, ["diff", str(tmp_path / "base"), str(tmp_path / "cand"),
                                    "--fail-on-regression", "5"], env={"COLUMNS": "200"})
    headline = next(line for line in out.output.splitlines() if line.startswith("step time"))
    assert headline.endswith("slower") and "p=0.0022, 6 vs 6 steps" in headline, out.output  # 2/924
    assert out.exit_code == 1 and "regression: step_time" in out.output
    head = diff.compare(tracekit.load(tmp_path / "base"), tracekit.load(tmp_path / "cand"),
                        sections=STEP_TIME).headline()
    expected = exact_rank_test(base_ms, cand_ms)
    assert head["effect"] == pytest.approx(expected["effect"], rel=1e-6)
    assert head["ci_low"] == pytest.approx(expected["ci_low"], rel=1e-6) and head["ci_low"] > 0


# ---------------------------------------------------------------------------------------------------------------
# The workbook (reports/diff.toml through the report framework's writer)

def read_workbook(path) -> dict[str, list[tuple]]:
    book = openpyxl.load_workbook(path)
    return {ws.title: [tuple(r) for r in ws.iter_rows(values_only=True)] for ws in book.worksheets}, book


def test_workbook_of_the_synthetic_slowdown(slowed_diff, tmp_path):
    path = tmp_path / "diff.xlsx"
    assert diff.write_workbook(slowed_diff, path) == []
    sheets, book = read_workbook(path)
    assert list(sheets)[:2] == ["Summary", "Step time"]
    assert {"Ops", "Ops by shape", "Kernels", "Categories", "Collectives", "Critical path"} <= set(sheets)
    assert "One side only" not in sheets  # both runs hold the same ops and kernels
    summary = {row[0]: row[1] for row in sheets["Summary"] if row and row[0]}
    head = slowed_diff.headline()
    assert float(summary["Step time, candidate (ms)"]) == pytest.approx(head["cand"], rel=1e-9)
    assert summary["Verdict"] == "slower"
    assert len(book["Summary"]._charts) == 2  # top changes, GPU time baseline vs candidate
    ops = sheets["Ops"]
    assert ops[0][:3] == ("Op", "Category", "Verdict") and ops[1][0] == "aten::_softmax" and ops[1][2] == "slower"
    with pytest.raises(tracekit.InputError):
        diff.write_workbook(slowed_diff, path)
    diff.write_workbook(slowed_diff, path, force=True)


def test_workbook_lists_what_exists_on_one_side_only(tmp_path):
    base = noisy_ops(6)
    cand = pl.concat([noisy_ops(7).filter(pl.col("name") != "aten::relu"),
                      noisy_ops(7).filter(pl.col("name") == "aten::mm").with_columns(name=pl.lit("aten::bmm"))])
    result = diff.compare(side_from_steps("before", base), side_from_steps("after", cand))
    diff.write_workbook(result, tmp_path / "diff.xlsx")
    sheets, _ = read_workbook(tmp_path / "diff.xlsx")
    rows = {(r[1], r[2]) for r in sheets["One side only"][1:]}
    assert rows == {("aten::bmm", "after"), ("aten::relu", "before")}


def test_cli_writes_the_workbook(synth_runs, gated_cli_run):
    out, path = gated_cli_run
    assert out.exit_code == 0, out.output
    assert path.is_file() and f"wrote {path}" in out.output
    again = CliRunner().invoke(main, ["diff", str(synth_runs / "base"), str(synth_runs / "slow"), "-o", str(path)])
    assert again.exit_code == 2 and "--force" in again.output


def test_the_workbook_definition_names_frames_and_columns_the_diff_has():
    from tracekit.output import workbooks as report

    frames = diff.compare(diff.Side("a", {}), diff.Side("b", {})).workbook_frames()
    formats = report.style().formats
    spec = report.workbook_spec("diff")
    assert [s.name for s in spec.sheets] == ["Summary", "Step time", "Iterations by phase", "Ops", "Ops by shape",
                                             "Op rates", "Kernels", "Categories", "Collectives", "Collective roles",
                                             "Critical path", "One side only"]
    for sheet in spec.sheets:
        for block in sheet.blocks:
            assert block.query in frames, (sheet.name, block.query)
            columns = frames[block.query].columns
            for column in block.columns:
                assert column.col in columns, (sheet.name, column.col)
                assert column.format is None or column.format in formats, (sheet.name, column.format)
            if block.chart:
                assert {block.chart.categories, *block.chart.values} <= set(columns), sheet.name


def test_op_rates_sees_the_slowed_softmax_lose_a_third_of_its_tflops(slowed_diff):
    """The softmax kernel runs 1.5× longer: its op's achieved TFLOP/s falls to 1/1.5 (−33%), FLOPs unchanged."""
    softmax = slowed_diff.sections["op_rates"].filter(pl.col("name") == "aten::softmax").row(0, named=True)
    assert softmax["verdict"] == "slower" and softmax["category"] == "Reduce"
    assert softmax["percent_delta_tflops_per_s"] == pytest.approx(100 * (1 / 1.5 - 1), abs=5)


@pytest.mark.parametrize("dtype", [pl.List(pl.Float64), pl.List(pl.Int64)])
def test_samples_drop_missing_steps_and_keep_rows(dtype):
    """A measure's samples: the steps that have a value, in order; a row with none (null) becomes []."""
    from tracekit.diff.matching import samples

    rows = [[1, None, 2], None, [], [None], [3], None]
    got = samples(pl.Series("base_samples", rows, dtype=dtype))
    assert got.name == "base_samples" and got.dtype == pl.List(pl.Float64)
    assert got.to_list() == [[float(x) for x in row or () if x is not None] for row in rows]


def test_samples_of_a_side_without_any():
    from tracekit.diff.matching import samples

    got = samples(pl.Series("cand_samples", [None, None], dtype=pl.List(pl.Null)))
    assert got.dtype == pl.List(pl.Float64) and got.to_list() == [[], []]


@pytest.mark.parametrize("trace", ["nvidia/h100_qwen1.5-0.5b.json.gz", "amd/mi300x_bert-small.json.gz"])
def test_a_run_of_one_step_a_rank_is_summarised_without_steps(trace):
    # One ProfilerStep (TraceLens's traces): a run has no per-step results then, so none are computed; the results
    # are each analysis over the trace alone. A part of a run (its other parts may hold ranks of several steps)
    # still computes its step.
    tables = tracekit.load(shared_trace(trace))
    side = diff.summarize(tables, "a")
    assert side.per_step == {} and side.steps.height == 0
    alone = analyses.run_all(tables, list(side.results))
    assert side.results.keys() == alone.keys() and side.results["steps"].height == 1
    for name, frame in side.results.items():
        assert_frame_equal(frame, alone[name], check_exact=True)
    part = summarize_ranks(tables)
    assert part.steps.height == 1 and part.per_step["op_summary"].height


def test_ranks_of_one_step_each_numbered_apart_are_summarised_without_steps():
    # Two ranks of one ProfilerStep each, numbered apart (H100 Qwen's #6, the A100 Triton trace's #1): two step
    # numbers in all, so the walk starts beside the step scoping, which then declines (no rank holds two); the other
    # analyses run after the walk, on its database. Each result must still be the analysis over the trace alone.
    tables = tracekit.load([shared_trace("nvidia/h100_qwen1.5-0.5b.json.gz"),
                            shared_trace("nvidia/a100_triton_cuLaunchKernel.json.gz")], as_ranks=True)
    side = diff.summarize(tables, "a")
    assert side.per_step == {} and side.steps.height == 0
    alone = analyses.run_all(tables, list(side.results))
    assert side.results.keys() == alone.keys() >= {"critical_path_summary", "op_summary", "steps"}
    assert side.results["steps"]["rank"].n_unique() == 2
    for name, frame in side.results.items():
        assert_frame_equal(frame, alone[name], check_exact=True)


@pytest.mark.parametrize("trace", [f"{WORKERS}/workers0.pt.trace.json.gz", "multirank/meta_trainer_128ranks_sampled",
                                   "nvidia/a100_trainer_rank0of16_cudagraph.json.gz"])
def test_a_sides_results_are_the_analyses_over_the_whole_trace(trace):
    # A side's analyses run over the whole trace and every step's pseudo-rank in one database (all but the
    # critical path's walk): the whole trace's rows must be what each analysis gives over the trace alone.
    tables = tracekit.load(shared_trace(trace))
    side = diff.summarize(tables, "a")
    assert side.per_step, "the trace holds steps: the per-step run is what this checks"
    alone = analyses.run_all(tables, list(side.results))
    assert side.results.keys() == alone.keys()
    assert side.results["op_summary"].height and side.results["steps"].height
    for name, frame in side.results.items():
        assert_frame_equal(frame, alone[name], check_exact=True)
