"""A real-noise oracle: two captures of one unchanged training job on an H200 (tests/data/gpu/noise_a, noise_b:
record.py's train_trace twice, 6 steps each). Nothing changed, so every slower/faster verdict is a false one: the step
time and the GPU's measures must not be called, and elsewhere no more than the level allows (each measure at alpha,
no multiple-comparison correction: docs/diff.md)."""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path

import polars as pl

import tracekit
from tracekit import diff

DATA = Path(__file__).parents[1] / "data" / "gpu"
CALLED = ["slower", "faster"]
JUDGED = [*CALLED, "no change", "inconclusive"]


@functools.cache
def comparison() -> diff.DiffResult:
    return diff.compare(tracekit.load(DATA / "noise_a.json.gz"), tracekit.load(DATA / "noise_b.json.gz"))


def op_keys(name: str) -> set[tuple[str, str, str]]:
    entries = json.loads(gzip.decompress((DATA / name).read_bytes()))["traceEvents"]
    return {(e["name"], json.dumps(e["args"].get("Input Dims")), json.dumps(e["args"].get("Input type")))
            for e in entries if e.get("cat") == "cpu_op" and e.get("ph") == "X"}


def all_ranks() -> pl.DataFrame:
    return comparison().measures.filter(pl.col("rank").is_null())


def test_step_time_and_gpu_measures_are_not_called():
    head = comparison().headline()
    assert head["verdict"] not in CALLED and (head["n_base"], head["n_cand"]) == (6, 6)
    gpu = all_ranks().filter(pl.col("section").is_in(["step_time", "gpu_timeline", "kernels", "categories",
                                                      "op_rates", "critical_path"]))
    assert gpu.filter(pl.col("verdict").is_in(JUDGED)).height >= 50
    assert gpu.filter(pl.col("verdict").is_in(CALLED)).height == 0


def test_false_calls_stay_within_the_level():
    judged = all_ranks().filter(pl.col("verdict").is_in(JUDGED))
    shares = judged.group_by("section").agg(judged=pl.len(), called=pl.col("verdict").is_in(CALLED).sum())
    assert judged.height >= 1000
    assert (shares["called"] <= 0.05 * shares["judged"]).all(), shares


def test_nothing_is_on_one_side_only():
    """Both captures ran the same ops with the same shapes (read off the raw files), so no key is added or removed;
    a rate both sides leave undefined (an op that launched no kernel) is not 'added'."""
    assert op_keys("noise_a.json.gz") == op_keys("noise_b.json.gz")
    assert comparison().one_side_only().height == 0
    assert all_ranks().filter(pl.col("verdict").is_in(["added", "removed"])).height == 0
