"""The diff's verdicts on real captures of one job (tests/data/gpu, recorded on an H200 by record.py there).

noise_a and noise_b are two profiler sessions of one unchanged training job in one process, noise_c the same job in
another process; changed_wide is that job with its feed-forward layers twice as wide (a known change: the up/down
GEMMs, their backward and their optimizer work grow; attention and layer norm do not). The job is host-bound (the
GPU is busy about a quarter of each step), so its host times move between processes, which steps of one capture
cannot show.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import tracekit
from tracekit import diff

GPU_DATA = Path(__file__).resolve().parents[1] / "data" / "gpu"
UNCHANGED_PAIRS = (("noise_a", "noise_b"), ("noise_a", "noise_c"), ("noise_b", "noise_c"))
CALLED = ("slower", "faster")


@pytest.fixture(scope="module")
def sides():
    return {name: diff.summarize(tracekit.load(GPU_DATA / f"{name}.json.gz"), name)
            for name in ("noise_a", "noise_b", "noise_c", "changed_wide")}


def called_rows(result: diff.DiffResult, section: str, metrics: tuple[str, ...]) -> pl.DataFrame:
    return result.measures.filter((pl.col("section") == section) & pl.col("metric").is_in(metrics)
                                  & pl.col("rank").is_null() & pl.col("verdict").is_in(CALLED))


@pytest.mark.parametrize("base, cand", UNCHANGED_PAIRS)
def test_an_unchanged_job_gets_no_host_time_verdicts(sides, base, cand):
    result = diff.compare(sides[base], sides[cand])
    for section in ("ops", "ops_by_shape"):
        assert called_rows(result, section, ("self_cpu_ms", "total_cpu_ms")).is_empty(), section
    assert result.headline()["verdict"] not in CALLED
    # GPU kernel times hold between captures: at most the level's share of them is called
    kernels = result.measures.filter((pl.col("section") == "kernels") & pl.col("rank").is_null()
                                     & pl.col("base").is_not_null() & pl.col("cand").is_not_null())
    assert called_rows(result, "kernels", ("total_us",)).height <= 0.05 * kernels.height


def test_without_the_host_floor_drift_between_processes_is_called(sides):
    """What the host floor is for: steps of one capture call the host's drift between processes."""
    result = diff.compare(sides["noise_b"], sides["noise_c"], host_floor_percent=0)
    host = called_rows(result, "ops", ("self_cpu_ms",))
    assert host.height >= 10 and set(host["verdict"]) >= {"faster"}
    assert result.headline()["verdict"] == "faster"


def test_the_known_change_is_found_and_the_unchanged_kernels_are_not(sides):
    result = diff.compare(sides["noise_a"], sides["changed_wide"])
    ops = result.measures.filter((pl.col("section") == "ops") & pl.col("rank").is_null()
                                 & (pl.col("metric") == "direct_kernel_ms"))
    verdicts = dict(zip(ops["item"], ops["verdict"]))
    # the linear layers' GEMMs (forward addmm, backward mm) carry the wider feed-forward layers
    assert verdicts["aten::addmm"] == "slower" and verdicts["aten::mm"] == "slower"
    kernels = result.measures.filter((pl.col("section") == "kernels") & pl.col("rank").is_null())
    unchanged = kernels.filter(pl.col("item").str.contains("layer_norm|fmha|attention|flash"))
    assert unchanged.height >= 2
    # unchanged kernels move by no more than kernels drift between processes of the unchanged job (under 2%; the
    # 1% floor still calls some of that drift: docs/diff.md)
    assert unchanged.filter(pl.col("verdict").is_in(CALLED) & (pl.col("percent_delta").abs() >= 2)).is_empty()
    assert result.metric("gpu:busy")["verdict"] == "slower"
    # the step got shorter although the GPU did more: that process's host ran faster, which one capture a side
    # cannot tell from the change, so the (host-bound) step time is not called
    assert result.headline()["delta"] < 0 and result.headline()["verdict"] == "inconclusive"
    assert any("--host-floor" in note for note in result.notes)
