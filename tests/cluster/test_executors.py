"""One plan, every executor: a report, a dataset and a diff side made in this process, in a local process pool
(`--jobs 2`) and on a local Dask cluster (`--scheduler local:2`) are the same bytes, on the shared multi-rank sets
with their Execution Traces; a user error inside a pool's worker is one line and exit code 2."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit
from tests.conftest import REPO, shared_trace
from tracekit.executors import InProcess, ProcessPool
from tracekit.inputs import resolve_inputs
from tracekit.output.dataset import ingest
from tracekit.output.terminal import QUERIES
from tracekit.output.workbooks import report

SETS = ["multirank/dlrm_8ranks_v100", "multirank/cpu_torch2.13_ddp_gloo_2ranks"]


@pytest.fixture(scope="module")
def executors():
    """In this process, 2 local processes, and (where Dask is installed) a local cluster of 2 worker processes."""
    with ProcessPool(2) as pool:
        found = {"in process": InProcess(), "--jobs 2": pool}
        try:
            from tracekit.cluster.scheduler import dask_executor
            with dask_executor("local:2") as dask:
                yield found | {"--scheduler local:2": dask}
        except tracekit.InputError:  # no Dask: the pool and this process still compare
            yield found


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", SETS)
def test_every_executor_writes_the_same_report_and_dataset(name, executors, tmp_path):
    traces = shared_trace(name)
    inputs = resolve_inputs(traces)
    execution_traces = sorted(p.name for p in traces.glob("et_rank*.json.gz"))
    written = {}
    for where, executor in executors.items():
        done, paths, _ = report(inputs, tmp_path / where / "report", executor, extra=QUERIES)
        dataset = ingest(inputs, tmp_path / where / "dataset", executor)
        written[where] = files_of(tmp_path / where)
        ranks = sorted(int(p.name[len("et_rank"):].split(".")[0]) for p in traces.glob("et_rank*.json.gz"))
        assert list(done.ranks) == dataset.ranks == ranks and len(paths) == len(ranks) + 1
        assert dataset.rows["et_nodes"] > 0  # the Execution Traces were read, on every executor
    assert len(execution_traces) == len(ranks)
    reference = written.pop("in process")
    for where, files in written.items():
        assert files.keys() == reference.keys(), where
        assert [f for f in files if files[f] != reference[f]] == [], where
    # independent of the code: each rank's ET file is named in its own rank's et_file note, from the raw file name
    notes = tracekit.load(tmp_path / "in process" / "dataset").diagnostics.to_pylist()
    assert sorted((n["rank"], Path(n["source_file"]).name) for n in notes if n["reason"] == "et_file") == [
        (r, f"et_rank{r}.json.gz") for r in ranks]


def test_every_executor_gives_the_same_diff_side(executors):
    traces = shared_trace(SETS[1])
    sides = {where: tracekit.diff.summarize_inputs(resolve_inputs(traces), "gloo", executor)
             for where, executor in executors.items()}
    reference = sides.pop("in process")
    for where, side in sides.items():
        assert side.results.keys() == reference.results.keys(), where
        assert all(side.results[n].equals(frame) for n, frame in reference.results.items()), where


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracekit.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300, check=False)


def test_a_user_error_in_a_pool_worker_is_one_line_and_exit_2(tmp_path):
    """Two Execution Traces named for rank 0: read with every Kineto file in one task, in a worker process, which
    refuses them (InputError): the command says so in one line, exit code 2, and writes nothing."""
    tracekit.synth.generate(tmp_path / "kineto", 2, 2, 0)
    pair = shared_trace("et_pairs/cpu_torch2.13_single")
    et = next(p for p in pair.iterdir() if p.name.startswith("et"))
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        shutil.copy(et, tmp_path / folder / "et_rank0.json.gz")
    result = run_cli("report", str(tmp_path / "kineto"), str(tmp_path / "a" / "et_rank0.json.gz"),
                     str(tmp_path / "b" / "et_rank0.json.gz"), "-o", str(tmp_path / "out"), "--jobs", "2")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"tracekit: error: {tmp_path / 'b' / 'et_rank0.json.gz'}: Execution Trace for rank 0, which "
        f"{tmp_path / 'a' / 'et_rank0.json.gz'} is too (name ET files like et_rank3.json)"]
    assert not (tmp_path / "out").exists()


def test_no_readable_file_on_a_pool_is_one_line_and_exit_2(tmp_path):
    for r in (0, 1):
        (tmp_path / f"rank{r}.json").write_text("garbage")
    result = run_cli("ingest", str(tmp_path), "-o", str(tmp_path / "ds"), "--jobs", "2")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"{tmp_path / 'rank0.json'}: not valid JSON" in result.stderr and not (tmp_path / "ds").exists()


def test_execution_traces_not_named_for_a_rank_are_read_with_every_kineto_file(executors, tmp_path):
    """The gloo set with its ETs renamed so their names give no rank: each rank comes from its ET's pid, which only
    every Kineto file together can match; on every executor the input is then one task, with the same bytes."""
    traces = shared_trace(SETS[1])
    (tmp_path / "in").mkdir()
    for p in traces.iterdir():
        shutil.copy(p, tmp_path / "in" / p.name.replace("et_rank0", "et_first").replace("et_rank1", "et_second"))
    written = {}
    for where, executor in executors.items():
        dataset = ingest(resolve_inputs(tmp_path / "in"), tmp_path / where / "dataset", executor)
        written[where] = files_of(tmp_path / where)
        assert dataset.rows["et_nodes"] > 0
    reference = written.pop("in process")
    assert all(files == reference for files in written.values())
    notes = tracekit.load(tmp_path / "in process" / "dataset").diagnostics.to_pylist()
    assert sorted((n["rank"], Path(n["source_file"]).name, "rank from pid" in n["detail"]) for n in notes
                  if n["reason"] == "et_file") == [(0, "et_first.json.gz", True), (1, "et_second.json.gz", True)]
