"""Several captures a side (captures as blocks), the verdict words against synthetic truth, the JSON output, the
mismatches between runs, and files refused as ranks of one run."""

from __future__ import annotations

import json
import statistics

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

import tracekit
from tracekit import diff, synth
from tracekit.cli import main
from tracekit.diff import blocks
from tracekit.diff.mismatch import mismatches
from tracekit.diff.side import RUN_INFO_SCHEMA
from tracekit.synth.job import SynthConfig

JOB = dict(ranks=1, steps=6, seed=3, scale=0.4)
GEMM = "gemm"  # a substring of the synth job's GEMM kernels: most of a step's GPU time
# What a test that asserts the headline (step time) only compares: the other sections cannot change it.
STEP_TIME = {"step_time": diff.SECTIONS["step_time"]}
ASSERTED = {**STEP_TIME, "kernels": diff.SECTIONS["kernels"]}  # what the tests of the summarised captures assert


# ---------------------------------------------------------------------------------------------------------------
# The t distribution and the block test, against published values and an independent computation


def test_t_quantiles_match_the_published_table():
    # Two-sided 5% critical values of Student's t (any statistics table), and the normal limit.
    published = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 10: 2.228, 30: 2.042, 1e6: 1.960}
    got = blocks.t_quantile(0.975, np.array(list(published), dtype=float))
    assert got == pytest.approx(list(published.values()), abs=1e-3)
    assert blocks.t_quantile(0.995, np.array([5.0]))[0] == pytest.approx(4.032, abs=1e-3)
    assert blocks.t_two_sided_p(np.array([2.571, 4.032]), np.array([5.0, 5.0])) == pytest.approx([0.05, 0.01], abs=2e-4)


def test_capture_test_is_welchs_t_on_the_block_values():
    # Equal variances and sizes: Welch's df is exactly 2(k - 1) = 4, whose 97.5% quantile is 2.776 (table).
    row = blocks.capture_tests([[1.0, 2, 3]], [[4.0, 5, 6]], 0.05).row(0, named=True)
    se = (2 / 3) ** 0.5
    assert row["effect"] == 3.0 and (row["n_base"], row["n_cand"]) == (3, 3)
    assert row["ci_low"] == pytest.approx(3 - 2.776 * se, abs=2e-3) and row["ci_high"] == pytest.approx(3 + 2.776 * se,
                                                                                                          abs=2e-3)
    assert row["p_value"] == pytest.approx(0.0213, abs=5e-4)  # P(|T_4| ≥ 3.674)
    assert row["level"] == row["coverage"] == 0.95
    # One capture against three: its variance is taken to be the other side's (df 2, table 4.303).
    one = blocks.capture_tests([[2.0]], [[4.0, 5, 6]], 0.05).row(0, named=True)
    assert one["ci_high"] - one["effect"] == pytest.approx(4.303 * (1 + 1 / 3) ** 0.5, abs=2e-3)
    # One capture a side: no variance to measure, no interval.
    assert blocks.capture_tests([[2.0]], [[4.0]], 0.05).row(0, named=True)["ci_low"] is None


# ---------------------------------------------------------------------------------------------------------------
# Synthetic captures with known truth


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    """Directories of captures (3 each): `base`, `same` (the same job, other captures) with run-level drift;
    `slow` (the `same` captures with the GEMM kernels 1.3× slower); `steady_a`, `steady_b` without drift."""
    root = tmp_path_factory.mktemp("captures")
    plan = {"base": ((1, 2, 3), dict(noise=0.02, drift=0.03)), "same": ((4, 5, 6), dict(noise=0.02, drift=0.03)),
            "slow": ((4, 5, 6), dict(noise=0.02, drift=0.03, slow_kernels={GEMM: 1.3})),
            "steady_a": ((1, 2, 3), dict(noise=0.01)), "steady_b": ((4, 5, 6), dict(noise=0.01))}
    sides = {}
    for name, (seeds, options) in plan.items():
        for seed in seeds:
            synth.generate(root / name / f"c{seed}", noise_seed=seed, **JOB, **options)
        sides[name] = [diff.summarize(tracekit.load(root / name / f"c{s}"), f"{name}/c{s}", ASSERTED) for s in seeds]
    return root, sides


def capture_medians(root, name: str) -> list[float]:
    """Per capture, the median step duration in ms from the ground truth (one rank: the slowest rank is it)."""
    return [statistics.median(s["dur_ns"] / 1e6 for s in synth.read_ground_truth(d)["ranks"][0]["steps"])
            for d in sorted((root / name).iterdir())]


def welch(base: list[float], cand: list[float]) -> dict:
    vb, vc = np.var(base, ddof=1) / len(base), np.var(cand, ddof=1) / len(cand)
    df = (vb + vc) ** 2 / (vb ** 2 / (len(base) - 1) + vc ** 2 / (len(cand) - 1))
    half = blocks.t_quantile(0.975, np.array([df]))[0] * (vb + vc) ** 0.5
    effect = float(np.mean(cand) - np.mean(base))
    return {"effect": effect, "ci_low": effect - half, "ci_high": effect + half}


def test_drift_makes_single_capture_verdicts_but_not_block_verdicts(captures):
    root, sides = captures
    factors = [SynthConfig(**JOB, noise_seed=s, drift=0.03).drift_factor for s in (1, 2, 3, 4, 5, 6)]
    assert max(factors) / min(factors) > 1.05  # the captures differ by several percent as whole runs
    # One capture a side: steps of two captures only; drift alone gets called for most pairs, and the headline
    # says that run-to-run variance is unmeasured.
    drifted = [(b, c, factors[c] / factors[b]) for b in range(3) for c in range(3, 6)
               if abs(factors[c] / factors[b] - 1) > 0.03]
    assert len(drifted) >= 2
    for b, c, ratio in drifted:
        single = diff.compare(sides["base"][b], sides["same"][c - 3], sections=STEP_TIME)
        assert single.headline()["verdict"] == ("slower" if ratio > 1 else "faster")
        assert single.settings.method == diff.STEPS and "unmeasured" in single.variance_note
    # Captures as blocks: the same job is not called slower or faster, and the interval is Welch's on the
    # per-capture medians of the ground truth.
    result = diff.compare(sides["base"], sides["same"], sections=STEP_TIME)
    head = result.headline()
    expected = welch(capture_medians(root, "base"), capture_medians(root, "same"))
    for column in ("effect", "ci_low", "ci_high"):
        assert head[column] == pytest.approx(expected[column], rel=1e-6), column
    assert head["ci_low"] < 0 < head["ci_high"] and head["verdict"] == "inconclusive"
    assert (head["n_base"], head["n_cand"]) == (3, 3) and result.variance_note is None
    assert head["base"] == pytest.approx(np.mean(capture_medians(root, "base")), rel=1e-6)


def test_a_true_slowdown_is_slower_through_the_drift(captures):
    root, sides = captures
    result = diff.compare(sides["base"], sides["slow"], sections=ASSERTED)
    head = result.headline()
    expected = welch(capture_medians(root, "base"), capture_medians(root, "slow"))
    assert head["ci_low"] == pytest.approx(expected["ci_low"], rel=1e-6) and expected["ci_low"] > 0
    assert head["verdict"] == "slower"
    kernels = result.sections["kernels"].filter(pl.col("kernel_name").str.contains(GEMM))
    assert kernels.height and set(kernels["verdict"]) == {"slower"}


def test_a_true_no_change_is_no_change(captures):
    root, sides = captures
    head = diff.compare(sides["steady_a"], sides["steady_b"], sections=STEP_TIME).headline()
    expected = welch(capture_medians(root, "steady_a"), capture_medians(root, "steady_b"))
    floor = 0.01 * max(np.median(capture_medians(root, n)) for n in ("steady_a", "steady_b"))
    assert -floor <= expected["ci_low"] and expected["ci_high"] <= floor  # the truth: within the practical floor
    assert head["ci_low"] == pytest.approx(expected["ci_low"], rel=1e-6) and head["verdict"] == "no change"


def test_cli_json_from_directories_of_captures(captures):
    root, _ = captures
    out = CliRunner().invoke(main, ["diff", str(root / "base"), str(root / "slow"), "--format", "json",
                                    "--fail-on-regression", "5"])
    assert out.exit_code == 1, out.output
    document = json.loads(out.stdout)
    assert document["schema"] == "tracekit.diff/1"
    assert document["baseline"]["captures"] == document["candidate"]["captures"] == 3
    assert document["baseline"]["label"].startswith("base/c1") and "(3 captures)" in document["baseline"]["label"]
    settings = document["settings"]
    assert settings["method"] == "captures" and settings["alpha"] == 0.05 and settings["confidence_level"] == 0.95
    assert "Welch" in settings["test"] and settings["multiple_comparison_correction"].startswith("none")
    assert document["run_to_run_variance"].startswith("measured")
    head = document["headline"]
    assert head["verdict"] == "slower" and head["n_base"] == head["n_cand"] == 3 and head["unit"] == "ms"
    assert head["base"] == pytest.approx(np.mean(capture_medians(root, "base")), rel=1e-6)
    assert document["gate"] == {"metric": "step_time", "threshold_percent": 5.0, "verdict": "slower",
                                "regressed": True}
    assert document["changes"] and all(c["verdict"] in ("slower", "faster", "added", "removed")
                                       for c in document["changes"])
    fields = {"section", "item", "metric", "delta_ms", "ci_low_ms", "ci_high_ms", "p_value"}
    assert fields <= document["changes"][0].keys()
    assert document["mismatches"] == [] and isinstance(document["notes"], list)


def test_cli_sides_split_by_double_dash_and_the_single_capture_note(captures):
    root, _ = captures
    base, same = sorted((root / "base").iterdir()), sorted((root / "same").iterdir())
    out = CliRunner().invoke(main, ["diff", *map(str, base[:2]), "--", *map(str, same[:2]), "--format", "json",
                                    "--top", "3"])
    assert out.exit_code == 0, out.output
    document = json.loads(out.stdout)
    assert document["baseline"]["captures"] == 2 and document["settings"]["method"] == "captures"
    assert len(document["changes"]) <= 3
    # One capture a side (the same job): whatever the verdict, the line after the headline says what it cannot see.
    single = CliRunner().invoke(main, ["diff", str(base[0]), str(same[0])], env={"COLUMNS": "200"})
    lines = single.output.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("step time"))
    assert "95% CI (alpha 0.05 per measure, no multiple-comparison correction)" in lines[at]
    assert "run-to-run variance is unmeasured" in lines[at + 1] and "A1 A2 ... -- B1 B2 ..." in lines[at + 1]
    as_json = diff.compare(captures[1]["base"][0], captures[1]["same"][0], sections=STEP_TIME).as_dict()
    assert as_json["run_to_run_variance"] == "unmeasured" and "unmeasured" in as_json["headline"]["note"]


@pytest.mark.parametrize("args, says", [
    (["a"], "1 inputs: give BASELINE CANDIDATE"),
    (["a", "b", "c"], "3 inputs: give BASELINE CANDIDATE"),
    (["a", "--"], "one -- with captures on both sides"),
    (["a", "--", "b", "--", "c"], "one -- with captures on both sides"),
])
def test_cli_refuses_sides_it_cannot_split(args, says):
    out = CliRunner().invoke(main, ["diff", *args])
    assert out.exit_code == 2 and says in out.output and len(out.output.strip().splitlines()) == 1


def test_a_directory_of_captures_with_a_subdirectory_that_is_no_capture_is_refused(captures, tmp_path):
    root, _ = captures
    (tmp_path / "side" / "c1").mkdir(parents=True)
    (tmp_path / "side" / "c1" / "rank0.json").write_bytes((root / "base" / "c1" / "rank0.json").read_bytes())
    (tmp_path / "side" / "notes").mkdir()
    (tmp_path / "side" / "notes" / "README.txt").write_text("not a capture")
    out = CliRunner().invoke(main, ["diff", str(tmp_path / "side"), str(root / "same")])
    assert out.exit_code == 2 and "notes: holds no trace files" in out.output


def test_an_unknown_metric_item_fails_before_the_diff_is_printed(captures):
    root, _ = captures
    out = CliRunner().invoke(main, ["diff", str(root / "base" / "c1"), str(root / "same" / "c4"),
                                    "--metric", "op:aten::mmm", "--fail-on-regression", "5"])
    assert out.exit_code == 2 and out.stdout == ""
    assert out.output.strip() == out.output.strip().splitlines()[0]  # one line
    assert "op:aten::mmm: no such measure in this diff (closest: aten::mm" in out.output


# ---------------------------------------------------------------------------------------------------------------
# Runs that differ: named in the headline; collectives compared by type and role


def test_mismatches_name_device_world_size_ranks_and_pytorch_version():
    def side(label, ranks, device, world, version):
        info = pl.DataFrame({"rank": ranks, "device_name": [device] * len(ranks), "world_size": [world] * len(ranks),
                             "pytorch_version": [version] * len(ranks)}, schema=RUN_INFO_SCHEMA)
        return diff.Side(label, {}, run_info=info)

    lines = mismatches([side("a", [3], "NVIDIA A100", 8, "2.4.0")], [side("b", [1], "Tesla V100", 2, "2.1.0")],
                       ("a", "b"))
    assert lines[:4] == ("device differs: a NVIDIA A100, b Tesla V100", "world size differs: a 8, b 2",
                         "PyTorch version differs: a 2.4.0, b 2.1.0",
                         "rank set differs: a 3, b 1 (per-rank rows of ranks on one side only are added/removed; "
                         "compare the all-ranks rows)")
    assert "collective_roles" in lines[4]
    # What a side does not record is not a difference; equal runs have none.
    assert mismatches([side("a", [0], None, None, None)], [side("b", [0], "H100", 2, "2.4")], ("a", "b")) == ()
    same = side("a", [0, 1], "H100", 2, "2.4")
    assert mismatches([same], [same], ("a", "b")) == ()


def test_runs_of_different_world_sizes_are_named_and_collectives_compared_by_role(tmp_path):
    for name, ranks in (("two", 2), ("four", 4)):
        synth.generate(tmp_path / name, ranks=ranks, steps=3, seed=3, scale=0.3)
    out = CliRunner().invoke(main, ["diff", str(tmp_path / "two"), str(tmp_path / "four"), "--format", "json"])
    assert out.exit_code == 0, out.output
    document = json.loads(out.stdout)
    assert "world size differs: two 2, four 4" in document["mismatches"]
    assert any(m.startswith("rank set differs: two 0,1, four 0-3") for m in document["mismatches"])
    result = diff.compare(tracekit.load(tmp_path / "two"), tracekit.load(tmp_path / "four"), labels=("two", "four"),
                          sections={name: diff.SECTIONS[name] for name in ("collectives", "collective_roles")})
    roles = result.sections["collective_roles"].filter(pl.col("rank").is_null())
    assert roles.height and set(roles["role"]) == {"default_pg"}
    assert not set(roles["verdict"]) & {"added", "removed"}  # exact-size rows are; roles still match
    exact = result.sections["collectives"].filter(pl.col("rank").is_null())
    assert set(exact["verdict"]) <= {"added", "removed"}  # group sizes 2 and 4 never match exactly
    for name, column in (("two", "base_time_us"), ("four", "cand_time_us")):
        truth = synth.read_ground_truth(tmp_path / name)["ranks"]
        for row in roles.iter_rows(named=True):
            # ncclDevKernel_AllGather_RING_LL(...) is an all_gather, and so on
            calls = [c for r in truth for c in r["collectives"]
                     if c["kernel"].split("_")[1].lower() == row["collective"].replace("_", "")]
            assert calls and row[column] == pytest.approx(sum(c["dur"] for c in calls) / 1e3 / len(truth), rel=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# Files that are not ranks of one run


def test_report_refuses_files_of_different_runs_unless_as_ranks(tmp_path):
    for name, ranks in (("two", 2), ("four", 4)):
        synth.generate(tmp_path / name, ranks=ranks, steps=2, seed=1, scale=0.2)
    files = [str(tmp_path / "two" / "rank0.json"), str(tmp_path / "four" / "rank1.json")]
    refused = CliRunner().invoke(main, ["report", *files, "-o", str(tmp_path / "out")])
    assert refused.exit_code == 2
    line = refused.output.strip()
    assert len(line.splitlines()) == 1 and all(f in line for f in files)
    assert "not ranks of one run: world size 2 in rank0.json, 4 in rank1.json" in line and "--as-ranks" in line
    accepted = CliRunner().invoke(main, ["report", *files, "-o", str(tmp_path / "out"), "--as-ranks"])
    assert accepted.exit_code == 0, accepted.output
    assert (tmp_path / "out" / "rank0.xlsx").is_file() and (tmp_path / "out" / "rank1.xlsx").is_file()
    # The ranks of one run are read as before.
    assert tracekit.load(tmp_path / "four", edges=False).ranks.num_rows == 4


def test_files_whose_time_spans_do_not_overlap_are_not_ranks_of_one_run():
    from tests.conftest import shared_trace

    pair = shared_trace("diff_pairs/resnet50_v100_workers0_vs_workers4")
    files = [pair / "workers0.pt.trace.json.gz", pair / "workers4.pt.trace.json.gz"]
    with pytest.raises(tracekit.InputError, match="not ranks of one run: their time spans do not overlap"):
        tracekit.load(files, edges=False)
    assert tracekit.load(files, edges=False, as_ranks=True).ranks.num_rows == 2


def test_the_diff_compares_the_steps_the_report_counts():
    """The A100 trainer trace's first step holds GPU work queued before the profiling window: the report's Overview
    (step_stats) leaves it out, and so does the diff, whose step time is then the Overview's median."""
    from tests.conftest import shared_trace

    tables = tracekit.load(shared_trace("nvidia/a100_trainer_rank0of16_cudagraph.json.gz"))
    with tracekit.open(shared_trace("nvidia/a100_trainer_rank0of16_cudagraph.json.gz")) as db:
        stats = db.sql("select steps, median, steps_left_out from step_stats where metric = 'duration_ms'").row(
            0, named=True)
        steps = db.sql("select step, steady from steps order by step")
    assert stats["steps_left_out"] >= 1  # the premise: a step the report does not count
    side = diff.summarize(tables, "a100", STEP_TIME)
    result = diff.compare(side, side, sections=STEP_TIME)
    head = result.headline()
    assert head["n_base"] == stats["steps"] and head["base"] == pytest.approx(stats["median"], rel=1e-9)
    left_out = result.warmup[0][1]
    assert list(left_out) == steps.filter(~pl.col("steady"))["step"].to_list()
