"""--scheduler: the plan's per-rank tasks on a local Dask cluster of 2 worker processes give the bytes a run in this
process writes (dataset, workbooks, diff), also when a rank's file is bad; a worker that dies leaves its file out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit
from tracekit.errors import InputError
from tracekit.inputs import resolve_inputs
from tracekit.output.dataset import ingest
from tracekit.output.workbooks import report

distributed = pytest.importorskip("distributed", reason="Dask is not installed (pip install 'tracekit[dask]')")


@pytest.fixture(scope="module")
def on_dask():
    import dask

    from tracekit.cluster.scheduler import dask_executor
    # a task whose worker dies once is given up (not after 4 deaths): no restarts to wait for in the worker-death
    # test; no other task is affected, since none waits in a worker's queue (DaskExecutor.map)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), dask_executor("local:2") as executor:
        yield executor


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    """Three ranks, and a fourth file that is not JSON (a rank whose trace is bad)."""
    root = tmp_path_factory.mktemp("job")
    tracekit.synth.generate(root / "traces", 3, 3, 0)
    (root / "traces" / "rank3.json").write_text("garbage")
    return root / "traces"


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_ingest_writes_the_same_dataset_bytes(on_dask, job, tmp_path):
    with pytest.warns(tracekit.LeftOutFileWarning, match="rank3.json: not valid JSON"):
        tracekit.write_dataset(tracekit.load(job), tmp_path / "local")
    with pytest.warns(tracekit.LeftOutFileWarning, match="rank3.json: not valid JSON"):
        written = ingest(resolve_inputs(job), tmp_path / "cluster", on_dask)
    local, cluster = files_of(tmp_path / "local"), files_of(tmp_path / "cluster")
    assert local.keys() == cluster.keys() and local == cluster
    assert written.ranks == [0, 1, 2]
    # the bad file is in the dataset's notes, about no rank
    notes = tracekit.load(tmp_path / "cluster").diagnostics.to_pylist()
    assert [n["source_file"] for n in notes if n["reason"] == "file_unreadable"] == [str(job / "rank3.json")]


def test_report_writes_the_same_workbook_bytes(on_dask, job, tmp_path):
    from tracekit.output.terminal import QUERIES
    from tracekit.output.workbooks import run_analyses, write_reports
    with pytest.warns(tracekit.LeftOutFileWarning):
        tables = tracekit.load(job)
    local = write_reports(tables, tmp_path / "local", analyses_done=run_analyses(tables, extra=QUERIES), problems=[])
    with pytest.warns(tracekit.LeftOutFileWarning):
        done, paths, _ = report(resolve_inputs(job), tmp_path / "cluster", on_dask, extra=QUERIES)
    assert [p.name for p in paths] == [p.name for p in local] == ["rank0.xlsx", "rank1.xlsx", "rank2.xlsx", "ranks.xlsx"]
    assert files_of(tmp_path / "local") == files_of(tmp_path / "cluster")  # also: no staging folder left behind
    assert done.results["diagnostics_reasons"].filter(reason="file_unreadable")["entries"].to_list() == [1]


def test_diff_gives_the_same_comparison(on_dask, tmp_path):
    from tracekit import diff
    for name, seed in (("base", 1), ("cand", 2)):
        tracekit.synth.generate(tmp_path / name, 2, 8, 0, noise=0.02, noise_seed=seed,
                                slow_kernels={"gemm": 1.3} if name == "cand" else {})
    local = diff.compare(*(diff.summarize(tracekit.load(tmp_path / n), n) for n in ("base", "cand")))
    sides = [diff.summarize_inputs(resolve_inputs(tmp_path / n), n, on_dask) for n in ("base", "cand")]
    cluster = diff.compare(*sides)
    assert cluster.measures.equals(local.measures)
    assert all(cluster.sections[name].equals(frame) for name, frame in local.sections.items())
    diff.write_workbook(local, tmp_path / "local.xlsx")
    diff.write_workbook(cluster, tmp_path / "cluster.xlsx")
    assert (tmp_path / "local.xlsx").read_bytes() == (tmp_path / "cluster.xlsx").read_bytes()
    slower = cluster.measures.filter(section="kernels", verdict="slower", decides=True)["item"].to_list()
    assert slower and all("gemm" in item for item in slower)  # the injected change is found, and only it


def die_on_rank_1(tables, *_):
    if tables.rank_list == [1]:
        os._exit(1)


def test_a_worker_that_dies_leaves_its_file_out(on_dask, job, tmp_path, monkeypatch):
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the job goes to the workers by value
    from tracekit import pipeline
    monkeypatch.setattr(pipeline, "batches", lambda files, threads: [[f] for f in files])  # a file a task here
    with pytest.warns(tracekit.LeftOutFileWarning) as caught:
        done = pipeline.run_plan(resolve_inputs(job), die_on_rank_1, (), on_dask)
    assert done.ranks == [0, 2]
    messages = sorted(str(w.message) for w in caught)
    assert "rank1.json: the worker reading it died" in messages[0] and "rank3.json: not valid JSON" in messages[1]
    notes = done.diagnostics.to_pylist()
    assert sorted(n["source_file"] for n in notes if n["reason"] == "file_unreadable") == [
        str(job / "rank1.json"), str(job / "rank3.json")]


def write_then_die_on_rank_1(tables, building):
    from tracekit.output.dataset import write_ranked
    if tables.rank_list != [1]:
        return write_ranked(tables, building)
    write_ranked(tables.with_tables(edges=tables.edges.slice(0, 0)), building)  # all but its edges
    os._exit(1)


def test_a_worker_that_dies_mid_write_leaves_no_trace_of_its_rank(on_dask, job, tmp_path, monkeypatch):
    import cloudpickle

    from tracekit import pipeline
    from tracekit.output import dataset
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    monkeypatch.setattr(dataset, "write_ranked", write_then_die_on_rank_1)
    monkeypatch.setattr(pipeline, "batches", lambda files, threads: [[f] for f in files])
    with pytest.warns(tracekit.LeftOutFileWarning):
        written = ingest(resolve_inputs(job), tmp_path / "ds", on_dask)
    assert written.ranks == [0, 2]
    assert not list((tmp_path / "ds").rglob("rank=1"))
    with pytest.warns(tracekit.LeftOutFileWarning):  # the dataset reads back whole: rows as its marker counts
        tables = tracekit.load(tmp_path / "ds")
    assert tables.rank_list == [0, 2]


def test_two_files_of_one_rank_fail_the_whole_run(on_dask, tmp_path):
    tracekit.synth.generate(tmp_path / "a", 1, 2, 0)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "rank0.json").write_bytes((tmp_path / "a" / "rank0.json").read_bytes())
    with pytest.raises(InputError, match="holds rank 0, which .* holds too"):
        ingest(resolve_inputs([tmp_path / "a" / "rank0.json", tmp_path / "b" / "rank0.json"]), tmp_path / "ds",
               on_dask)
    assert sorted(tmp_path.iterdir()) == [tmp_path / "a", tmp_path / "b"]  # no dataset, nothing half-built


def test_the_command_line_runs_on_a_local_cluster(job, tmp_path):
    """End to end, as a user runs it: same workbooks, a warning line for the bad rank, exit code 3."""
    run = [sys.executable, "-m", "tracekit.cli", "report", str(job)]
    local = subprocess.run(run + ["-o", str(tmp_path / "local")], capture_output=True, text=True)
    cluster = subprocess.run(run + ["-o", str(tmp_path / "cluster"), "--scheduler", "local:2"],
                             capture_output=True, text=True)
    assert local.returncode == cluster.returncode == 3, cluster.stderr
    assert cluster.stderr.strip().splitlines() == local.stderr.strip().splitlines() == [
        f"tracekit: warning: {job / 'rank3.json'}: not valid JSON (JSON is malformed: invalid character (byte 0)); "
        "left out (the other files were read)"]
    assert files_of(tmp_path / "local") == files_of(tmp_path / "cluster")


@pytest.mark.parametrize("spec, message", [("local:0", "N must be 1 to 1024"), ("yarn", "not local:N or tcp://"),
                                           ("tcp://127.0.0.1:9", "cannot reach the scheduler")])
def test_a_bad_scheduler_is_one_line_and_exit_2(spec, message, job, tmp_path):
    result = subprocess.run([sys.executable, "-m", "tracekit.cli", "ingest", str(job), "-o", str(tmp_path / "ds"),
                             "--scheduler", spec], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert message in result.stderr and not (tmp_path / "ds").exists()


def test_an_ingested_dataset_is_read_rank_by_rank_on_the_workers(on_dask, job, tmp_path):
    """Ingest once (to a file:// URL, written by the workers through fsspec), then report from the dataset on the
    cluster, each worker reading one rank's partitions: the workbooks of a local report of the same dataset."""
    from tracekit.output.terminal import QUERIES
    from tracekit.output.workbooks import run_analyses, write_reports
    url = f"file://{tmp_path / 'dataset'}"
    with pytest.warns(tracekit.LeftOutFileWarning):
        ingest(resolve_inputs(job), url, on_dask)
    with pytest.warns(tracekit.LeftOutFileWarning):
        tracekit.write_dataset(tracekit.load(job), tmp_path / "local-dataset")
    assert files_of(tmp_path / "dataset") == files_of(tmp_path / "local-dataset")
    with pytest.warns(tracekit.LeftOutFileWarning):  # the dataset's note about the bad file, read again
        tables = tracekit.load(tmp_path / "dataset")
    write_reports(tables, tmp_path / "local", analyses_done=run_analyses(tables, extra=QUERIES), problems=[])
    with pytest.warns(tracekit.LeftOutFileWarning):
        report(resolve_inputs(url), tmp_path / "cluster", on_dask, extra=QUERIES)
    assert files_of(tmp_path / "local") == files_of(tmp_path / "cluster")


def test_small_files_are_read_in_groups_with_the_same_bytes(on_dask, tmp_path):
    """8 small ranks on 2 worker threads: 4 tasks of 2 files, each group joined and linked together."""
    tracekit.synth.generate(tmp_path / "traces", 8, 2, 0)
    files = sorted((tmp_path / "traces").glob("rank*.json"), key=lambda p: int(p.stem[4:]))
    from tracekit.pipeline import batches
    groups = batches(files, 2)
    assert [len(g) for g in groups] == [2, 2, 2, 2] and sum(groups, []) == files
    ingest(resolve_inputs(tmp_path / "traces"), tmp_path / "cluster", on_dask)
    tracekit.write_dataset(tracekit.load(tmp_path / "traces"), tmp_path / "local")
    assert files_of(tmp_path / "local") == files_of(tmp_path / "cluster")
    assert batches(files, 16) == [[f] for f in files]  # as many threads as files: one file a task


def test_traces_without_events_are_refused_with_the_local_message(on_dask, tmp_path):
    for r in (0, 1):
        (tmp_path / f"rank{r}.json").write_text('{"traceEvents": []}')
    with pytest.raises(InputError) as local:
        tracekit.load(tmp_path)
    with pytest.raises(InputError) as cluster:
        ingest(resolve_inputs(tmp_path), tmp_path / "ds", on_dask)
    assert str(cluster.value) == str(local.value) and "no trace events (traceEvents is empty)" in str(local.value)
    assert not (tmp_path / "ds").exists()
