"""A second engine over the dataset: Spark reads what `tracekit ingest` wrote and answers as tracekit does.

Runs only where pyspark (the `spark` extra) and a JVM are installed; CI has neither and skips it. The queries and
the comparison are those of bench/second_engine.py; results are checked against the synth generator's ground truth
as well as between the engines.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def load_bench():
    spec = importlib.util.spec_from_file_location("second_engine", REPO / "bench" / "second_engine.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


second_engine = load_bench()


@pytest.fixture(scope="module")
def spark():
    pytest.importorskip("pyspark", reason="pyspark not installed (pip install -e '.[spark]')")
    if shutil.which("java") is None:
        pytest.skip("no JVM on PATH (Spark needs one: apt-get install openjdk-17-jre-headless)")
    session = second_engine.start_spark(cores=1)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def synth_job(tmp_path_factory):
    """A 2-rank, 2-step synth job ingested: (dataset folder, ground truth)."""
    import json

    import tracekit

    root = tmp_path_factory.mktemp("second_engine")
    tracekit.synth.generate(root / "traces", ranks=2, steps=2)
    tracekit.write_dataset(tracekit.load(root / "traces"), root / "dataset")
    return root / "dataset", json.loads((root / "traces" / "ground_truth.json").read_text())


def test_step_kernel_time_is_the_same_in_both_engines_and_the_ground_truth(spark, synth_job):
    dataset, truth = synth_job
    text, tables = second_engine.spark_queries()["step_kernel_time"]
    duck = second_engine.run_tracekit(dataset, text)
    sparked = second_engine.run_spark(spark, dataset, text, tables)
    assert second_engine.differences(duck, sparked) == []

    step_ms = {(rank["rank"], int(step["name"].split("#")[1])): step["dur_ns"] / 1e6
               for rank in truth["ranks"] for step in rank["steps"]}
    columns, rows = sparked
    assert {(r[columns.index("rank")], r[columns.index("step")]): r[columns.index("step_ms")] for r in rows} \
        == pytest.approx(step_ms, rel=1e-12)
    for row in rows:
        step = row[columns.index("step")]
        slowest = max(sorted(r for r, s in step_ms if s == step), key=lambda r: step_ms[(r, step)])
        assert row[columns.index("slowest_rank")] == slowest


def test_collective_skew_in_spark_is_tracekits_analysis_and_the_ground_truth(spark, synth_job):
    dataset, truth = synth_job
    duck = second_engine.run_tracekit(dataset, second_engine.tracekit_queries()["collective_skew"])
    sparked = second_engine.run_spark(spark, dataset, *second_engine.spark_queries()["collective_skew"])
    assert second_engine.differences(duck, sparked) == []

    columns, rows = sparked
    assert len({row[columns.index("process_group")] for row in rows}) == 1  # synth: one group, seq = order
    starts = [[c["start"] for c in rank["collectives"]] for rank in truth["ranks"]]
    assert len(rows) == len(starts[0]) > 0
    for row, arrivals in zip(rows, zip(*starts)):
        assert row[columns.index("start_skew_us")] == pytest.approx((max(arrivals) - min(arrivals)) / 1e3)
        assert row[columns.index("slowest_rank")] == arrivals.index(max(arrivals))  # lowest rank on a tie


def test_spark_reads_every_column_with_the_schemas_type(spark, synth_job):
    dataset, _ = synth_job
    notes = second_engine.schema_report(spark, dataset)
    assert [n for n in notes if "rank is the last column" not in n] == []


def test_a_different_value_is_reported():
    columns = ["rank", "ms", "name"]
    left = (columns, [(0, 1.0, "a"), (1, 2.0, "b")])
    assert second_engine.differences(left, (columns, [(0, 1.0 + 1e-12, "a"), (1, 2.0, "b")])) == []
    assert second_engine.differences(left, (columns, [(0, 1.0 + 1e-6, "a"), (1, 2.0, "b")])) \
        == ["row 0 ms: 1.0 vs 1.000001"]
    assert second_engine.differences(left, (columns, [(0, 1.0, "a")])) == ["2 rows vs 1"]
    assert second_engine.differences(left, (columns, [(0, 1.0, "a"), (1, 2.0, None)])) \
        == ["row 1 name: 'b' vs None"]
    assert second_engine.differences(left, (["rank", "ms", "other"], left[1]))[0].startswith("columns differ")
