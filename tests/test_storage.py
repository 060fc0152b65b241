"""Inputs and datasets at URLs (tracekit/storage.py): fsspec's `memory://` (in this process) and `file://` stand in
for S3 and GCS. What is read from a URL equals what is read from the same files on disk; a dataset written to a URL
has the same bytes as one written to a folder; a failed write leaves nothing under the URL."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import subprocess
import sys
import uuid
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import fsspec
import openpyxl
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import tracekit
from tests.conftest import REPO
from tracekit import storage, synth
from tracekit.cli import main
from tracekit.output import dataset

MEMORY = fsspec.filesystem("memory")


class Boom(Exception):
    """The failure a test injects into a writer."""


def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def memory_snapshot(url: str) -> dict[str, bytes]:
    root = url.removeprefix("memory://").rstrip("/")
    return {found.removeprefix(f"/{root}/"): MEMORY.cat_file(found) for found in sorted(MEMORY.find(root))}


def copy_to_memory(folder: Path, url: str) -> None:
    for name, data in snapshot(folder).items():
        MEMORY.pipe_file(f"{url}/{name}", data)


@pytest.fixture
def bucket():
    """A fresh memory:// prefix, removed afterwards (the memory file system lives as long as the process)."""
    url = f"memory://tracekit-test-{uuid.uuid4().hex[:8]}"
    yield url
    MEMORY.rm(url.removeprefix("memory://"), recursive=True) if MEMORY.exists(url) else None


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    """Two ranks' traces (traces/) and their dataset ingested to a local folder (ds/)."""
    root = tmp_path_factory.mktemp("job")
    synth.generate(root / "traces", ranks=2, steps=2, seed=4)
    assert run("ingest", root / "traces", "-o", root / "ds").exit_code == 0
    return root


def without_source_files(tables: tracekit.TraceTables) -> dict:
    return {name: t.drop_columns([c for c in t.column_names if c == "source_file"]) for name, t in tables.items()}


def test_a_url_stays_text_and_a_path_becomes_a_path():
    assert storage.location("s3://bucket//job/traces") == "s3://bucket//job/traces"  # a Path would collapse //
    assert storage.location("traces/rank0.json") == Path("traces/rank0.json")
    assert storage.join("memory://b/ds/", "events", "rank=0") == "memory://b/ds/events/rank=0"
    assert storage.name("gs://b/job/rank3.json.gz") == "rank3.json.gz"
    assert not storage.is_url("select 'a://b' as x") and not storage.is_url(Path("memory://x"))


def test_import_tracekit_and_a_local_load_do_not_import_fsspec(job):
    code = ("import sys, tracekit; tracekit.load(sys.argv[1]); tracekit.open(sys.argv[2]).close(); "
            "print('fsspec' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(job / "traces"), str(job / "ds")], capture_output=True,
                         text=True, cwd=REPO, check=True).stdout
    assert out.split() == ["False"]


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_ingest_to_a_url_writes_the_bytes_of_a_local_ingest(job, bucket, tmp_path, scheme):
    out = f"{bucket}/ds" if scheme == "memory" else (tmp_path / "ds").as_uri()
    result = run("ingest", job / "traces", "-o", out)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"wrote {out}: ranks [0, 1]")
    written = memory_snapshot(out) if scheme == "memory" else snapshot(tmp_path / "ds")
    local = snapshot(job / "ds")
    assert sorted(written) == sorted(local) and any(name.endswith(".parquet") for name in local)
    for name, data in local.items():
        assert written[name] == data, name
    # and read back in place, through the API: the same tables as the local dataset
    assert tracekit.load(out) == tracekit.load(job / "ds")


def test_traces_at_a_url_read_as_the_same_files_on_disk(job, bucket):
    copy_to_memory(job / "traces", f"{bucket}/traces")
    inputs = tracekit.resolve_inputs(f"{bucket}/traces/")
    assert inputs.files == (f"{bucket}/traces/rank0.json", f"{bucket}/traces/rank1.json")  # not ground_truth.json
    at_url, on_disk = tracekit.load(f"{bucket}/traces/"), tracekit.load(job / "traces")
    assert without_source_files(at_url) == without_source_files(on_disk)
    assert at_url.ranks.column("source_file").to_pylist() == list(inputs.files)
    one = tracekit.load(f"{bucket}/traces/rank1.json")
    assert one.rank_list == [1] and one.events.num_rows == on_disk.events.filter(
        on_disk.events.column("rank").to_numpy() == 1).num_rows


def test_gzip_and_cut_files_at_a_url_read_as_on_disk(tmp_path, bucket):
    synth.generate(tmp_path / "gz", ranks=1, steps=2, seed=2, gzip=True)
    gz = tmp_path / "gz" / "rank0.json.gz"
    text = gzip.decompress(gz.read_bytes())
    (tmp_path / "cut.json").write_bytes(text[:len(text) // 2])
    copy_to_memory(tmp_path / "gz", f"{bucket}/gz")
    MEMORY.pipe_file(f"{bucket}/cut.json", text[:len(text) // 2])
    assert without_source_files(tracekit.load(f"{bucket}/gz/rank0.json.gz")) == without_source_files(tracekit.load(gz))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        at_url = tracekit.load(f"{bucket}/cut.json")
        on_disk = tracekit.load(tmp_path / "cut.json")
    messages = [str(w.message) for w in caught if issubclass(w.category, tracekit.CutTraceWarning)]
    assert len(messages) == 2 and messages[0] == messages[1].replace(str(tmp_path / "cut.json"), f"{bucket}/cut.json")
    assert messages[0].startswith(f"{bucket}/cut.json: truncated at byte ")
    assert without_source_files(at_url) == without_source_files(on_disk) and on_disk.events.num_rows


def cell_values(folder: Path) -> dict[str, list]:
    values = {}
    for path in sorted(folder.glob("*.xlsx")):
        book = openpyxl.load_workbook(path, read_only=True)
        values[path.name] = [(sheet.title, [tuple(c.value for c in row) for row in sheet.iter_rows()])
                             for sheet in book.worksheets]
    return values


def test_a_report_of_a_url_dataset_equals_the_report_of_the_local_one(job, bucket, tmp_path):
    copy_to_memory(job / "ds", f"{bucket}/ds")
    for source, out in ((f"{bucket}/ds", tmp_path / "from_url"), (job / "ds", tmp_path / "from_disk")):
        result = run("report", source, "-o", out)
        assert result.exit_code == 0, result.output
    at_url, on_disk = cell_values(tmp_path / "from_url"), cell_values(tmp_path / "from_disk")
    assert sorted(at_url) == ["rank0.xlsx", "rank1.xlsx", "ranks.xlsx"]
    assert at_url == on_disk


def test_a_report_of_traces_at_a_file_url_equals_the_report_of_their_paths(job, tmp_path):
    for source, out in (((job / "traces").as_uri(), tmp_path / "from_url"), (job / "traces", tmp_path / "from_disk")):
        result = run("report", source, "-o", out)
        assert result.exit_code == 0, result.output
    # the trace files are named as given (a URL, a path) wherever a sheet names them; all else is equal
    url_text = (job / "traces").as_uri()
    at_url = json.loads(json.dumps(cell_values(tmp_path / "from_url"), default=str).replace(url_text, str(job / "traces")))
    assert at_url == json.loads(json.dumps(cell_values(tmp_path / "from_disk"), default=str))


QUERIES = ["select rank, kind, count(*) as n, sum(dur) as busy from events group by all order by all",
           "select e.rank, count(*) as n from edges e join events s on s.rank = e.rank and s.id = e.src "
           "group by all order by all",
           "from op_summary order by all limit 50"]


# ids of our own: pytest 9 names a parameter with "=" in it by its index, pytest 8 by its text (.ci/oldest_skip.txt
# names these tests for the oldest pytest)
@pytest.mark.parametrize("query", QUERIES, ids=["events by kind", "edges joined to events", "op_summary"])
def test_sql_over_a_url_dataset_equals_sql_over_the_local_one(job, bucket, query):
    copy_to_memory(job / "ds", f"{bucket}/ds")
    at_url = run("sql", query, f"{bucket}/ds", "--format", "csv")
    on_disk = run("sql", query, job / "ds", "--format", "csv")
    assert at_url.exit_code == on_disk.exit_code == 0, at_url.output
    assert at_url.stdout == on_disk.stdout and len(on_disk.stdout.splitlines()) > 2
    with tracekit.open(f"{bucket}/ds") as db:  # the API reads the same dataset in place
        assert db.sql(query).equals(tracekit.open(job / "ds").sql(query))


@pytest.mark.parametrize("missing", ["memory://tracekit-nothing-here/traces/", "file:///no/such/dir/rank0.json"])
def test_a_missing_url_is_one_line_and_exit_code_2(missing, tmp_path):
    for args in (["report", missing, "-o", tmp_path / "out"], ["sql", "select 1", missing],
                 ["ingest", missing, "-o", tmp_path / "ds"]):
        result = run(*args)
        assert result.exit_code == 2, result.output
        assert result.stderr.splitlines() == [f"tracekit: error: {missing}: no such file or directory"]
    assert not (tmp_path / "ds").exists() and not (tmp_path / "out").exists()


def test_an_unknown_scheme_is_one_line_and_exit_code_2():
    result = run("sql", "select 1", "nosuchscheme://bucket/ds")
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("tracekit: error: nosuchscheme://bucket/ds: not a usable URL (")


@pytest.mark.parametrize("fail", ["marker", "second_partition"])
def test_a_failed_write_to_a_url_leaves_nothing_there(job, bucket, monkeypatch, fail):
    tables = tracekit.load(job / "ds")
    if fail == "marker":
        monkeypatch.setattr(dataset, "write_marker", lambda *a: (_ for _ in ()).throw(Boom()))
    else:
        calls, real = [], pq.write_table

        def write_table(table, where, **kwargs):
            calls.append(1)
            if len(calls) == 2:
                where.write(b"half a file")
                raise Boom
            return real(table, where, **kwargs)
        monkeypatch.setattr(dataset.pq, "write_table", write_table)
    with pytest.raises(Boom):
        dataset.write_dataset(tables, f"{bucket}/ds")
    assert not MEMORY.exists(f"{bucket}/ds") or MEMORY.find(f"{bucket}/ds") == []
    assert memory_snapshot(bucket) == {}


def test_force_replaces_a_url_dataset_and_leaves_no_file_of_the_old_one(job, bucket, tmp_path):
    out = f"{bucket}/ds"
    assert run("ingest", job / "traces", "-o", out).exit_code == 0
    synth.generate(tmp_path / "one", ranks=1, steps=1, seed=8)
    again = run("ingest", tmp_path / "one", "-o", out)
    assert again.exit_code == 2
    assert again.stderr.splitlines() == [f"tracekit: error: {out}: directory is not empty (use --force to replace "
                                         f"a dataset there)"]
    assert run("ingest", tmp_path / "one", "-o", out, "--force").exit_code == 0
    assert run("ingest", tmp_path / "one", "-o", tmp_path / "one_ds").exit_code == 0
    assert memory_snapshot(out) == snapshot(tmp_path / "one_ds")  # no rank=1 partition of the old dataset left


def test_a_url_holding_other_files_is_not_replaced(job, bucket):
    MEMORY.pipe_file(f"{bucket}/notes/readme.txt", b"mine")
    result = run("ingest", job / "traces", "-o", f"{bucket}/notes", "--force")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"tracekit: error: {bucket}/notes: not empty and not a tracekit dataset; "
                                          f"refusing to overwrite it"]
    assert memory_snapshot(bucket) == {"notes/readme.txt": b"mine"}


def test_an_output_url_never_replaces_an_input_url(job, bucket):
    copy_to_memory(job / "traces", f"{bucket}/traces")
    result = run("ingest", f"{bucket}/traces/rank0.json", "-o", bucket, "--force")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"tracekit: error: {bucket}: holds the input {bucket}/traces/rank0.json; "
                                          f"write the output elsewhere"]
    assert sorted(memory_snapshot(f"{bucket}/traces")) == ["ground_truth.json", "rank0.json", "rank1.json"]


def test_a_report_to_a_url_is_refused_and_makes_no_local_folder(job, bucket, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("report", job / "ds", "-o", f"{bucket}/report")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"tracekit: error: {bucket}/report: written to a local path only (of the "
                                          f"outputs, only `tracekit ingest` writes to a URL)"]
    assert list(tmp_path.iterdir()) == [] and memory_snapshot(bucket) == {}


def rank_part(tables: tracekit.TraceTables, rank: int) -> tracekit.TraceTables:
    return tracekit.TraceTables(**{name: t.filter(pc.equal(t.column("rank"), rank)) for name, t in tables.items()})


@pytest.mark.parametrize("where", ["url", "path"])
def test_ranks_written_by_other_processes_make_the_dataset_of_one_write(job, tmp_path, where):
    """The pieces a cluster uses: `write_tables` in a worker process per rank, given the location as text (a URL,
    or the local building folder), then the marker; the same bytes as `write_dataset` in one process."""
    tables = tracekit.load(job / "ds")
    out = (tmp_path / "ds").as_uri() if where == "url" else tmp_path / "ds"
    with dataset.building_dataset(out) as building, \
            ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as workers:
        list(workers.map(dataset.write_tables, [rank_part(tables, r) for r in (0, 1)], [str(building)] * 2))
        dataset.write_marker(building, {name: t.num_rows for name, t in tables.items()}, tables.rank_list)
    assert snapshot(tmp_path / "ds") == snapshot(job / "ds")
