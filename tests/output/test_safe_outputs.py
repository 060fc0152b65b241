"""Outputs are written safely: a writer that fails half-way leaves no partial file and an existing output as it was;
an output never overwrites or deletes an input; strings from traces never become spreadsheet formulas."""

from __future__ import annotations

import gzip
import json
import os
import time
import zipfile
from pathlib import Path

import openpyxl
import pyarrow as pa
import pytest
from click.testing import CliRunner

import tracekit
from tracekit import diff, synth
from tracekit.cli import main
from tracekit.errors import InputError
from tracekit.output import dataset, files, graph, xlsx
from tracekit.output import workbooks as report
from tracekit.output.files import opened_output, write_output_file
from tests.support.gzip_files import gzip_header_name
from tests.support.page_cache import page_cache


class Boom(Exception):
    """The failure a test injects into a writer."""


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (hidden ones too) and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def fail_on_call(n: int, real, at: int = 0):
    """`real`, except that call number `n` writes a little to its argument `at` (a path or a text stream) and
    raises Boom."""
    calls = []

    def wrapper(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            target = args[at]
            if isinstance(target, (str, Path)):
                Path(target).write_bytes(b"half a file")
            else:
                target.write("half a file")
            raise Boom
        return real(*args, **kwargs)

    return wrapper


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("two_ranks")
    synth.generate(root, ranks=2, steps=2, seed=9)
    return root


@pytest.fixture(scope="module")
def tables(two_ranks):
    return tracekit.load(two_ranks)


# --------------------------------------------------------------------------------------------- write_output_file


def test_output_file_appears_only_complete(tmp_path):
    target = tmp_path / "rows.csv"
    target.write_text("the previous rows\n")

    def failing(path: Path):
        path.write_text("new rows, but not all of them")
        raise Boom

    with pytest.raises(Boom):
        write_output_file(target, failing)
    assert snapshot(tmp_path) == {"rows.csv": b"the previous rows\n"}
    write_output_file(target, lambda path: path.write_text("new rows\n"))
    assert snapshot(tmp_path) == {"rows.csv": b"new rows\n"}


@pytest.mark.parametrize("compressed", [True, False])
def test_an_opened_output_holds_every_write_in_order(tmp_path, compressed):
    target = tmp_path / "out.json.gz"
    writes = [b"x" * 5_000_000, bytearray(b"a mutable buffer, reused below"), memoryview(b"a view"), b""]
    expected = b"".join(bytes(w) for w in writes)
    with opened_output(target, compressed) as out:
        for data in writes:
            out.write(data)
        writes[1][:] = b"-" * len(writes[1])  # handed over already: the file holds what was written
    data = target.read_bytes()
    assert (gzip.decompress(data) if compressed else data) == expected


@pytest.mark.parametrize("compressed", [True, False])
def test_a_writeback_starts_on_the_file_and_changes_no_byte(tmp_path, monkeypatch, compressed):
    """start_writeback hands the OS the output's own file with the bytes so far in it (buffered ones flushed first;
    the compressed ones without flushing zlib, so the file is the one gzip.open writes), and the output's bytes are
    unchanged."""
    started = []
    target = tmp_path / "out.json.gz"

    def sync_file_range(fd, offset, length, flags):
        started.append((os.fstat(fd).st_ino, os.fstat(fd).st_size, offset, length, flags))

    monkeypatch.setattr(files, "_sync_file_range", lambda: sync_file_range)
    rows = [f'{{"row":{i}}},\n'.encode() for i in range(20_000)]  # small writes: held in buffers
    with opened_output(target, compressed) as out:
        for row in rows[:10_000]:
            out.write(row)
        out.start_writeback()
        if not compressed:  # flushed by the writer's call, before it returns
            assert target.stat().st_size == len(b"".join(rows[:10_000]))
        for row in rows[10_000:]:
            out.write(row)
    data = target.read_bytes()
    assert (gzip.decompress(data) if compressed else data) == b"".join(rows)
    (inode, size, offset, length, flags), = started  # done by the close
    assert (inode, offset, length, flags) == (target.stat().st_ino, 0, 0, 2)  # all of it; start the writes only
    assert size > 0
    if compressed:
        (tmp_path / "reference").mkdir()
        reference = tmp_path / "reference" / target.name  # (its name is in the header)
        with gzip.open(reference, "wb", compresslevel=1) as ref:
            for row in rows:
                ref.write(row)
        expected = reference.read_bytes()
        assert data[:4] + data[8:] == expected[:4] + expected[8:]  # all but the header's mtime
        assert size < len(data)  # the bytes compressed before it, not yet all


def test_a_compressed_output_names_the_final_file_in_its_header(tmp_path):
    """Written to a temporary file and renamed, a .gz output's header still names the file the reader gets, as
    gzip does (`gunzip -N` restores that name): not the temporary one."""
    target = tmp_path / "timeline.json.gz"

    def write(temp):
        with opened_output(temp, True, target.name) as out:
            out.write(b"rows\n")

    write_output_file(target, write)
    assert gzip_header_name(target.read_bytes()) == b"timeline.json"
    assert gzip.decompress(target.read_bytes()) == b"rows\n"


@pytest.mark.parametrize("compressed", [True, False])
def test_a_writeback_started_leaves_no_page_unwritten(tmp_path, compressed):
    """The real call: the pages written before it go to disk now, not when the kernel's flusher comes round (30 s
    after they were written, by default)."""
    target = tmp_path / "out.bin"
    with opened_output(target, compressed) as out:
        out.write(os.urandom(4 << 20))  # (random bytes: as many compressed)
        if compressed:
            out.write(b"")  # the thread has written the first once it takes this
        out.flush()
        time.sleep(0.2)
        before = page_cache(target)
        if not before or not before.dirty:
            pytest.skip(f"no dirty page to see on {tmp_path} (cachestat: {before}; a file system without writeback)")
        out.start_writeback()
        deadline = time.monotonic() + 5
        while page_cache(target).dirty and time.monotonic() < deadline:
            time.sleep(0.01)
        assert page_cache(target).dirty == 0


def test_a_compressing_output_raises_the_thread_s_error(tmp_path, monkeypatch):
    class Full:
        def write(self, data):
            raise OSError(28, "No space left on device")

        def close(self):
            pass

    monkeypatch.setattr(gzip, "GzipFile", lambda *args, **kwargs: Full())
    with pytest.raises(OSError, match="No space left"), opened_output(tmp_path / "out.gz", True) as out:
        for _ in range(100):  # a later write raises it, or the end of the block does
            out.write(b"some bytes")


@pytest.mark.parametrize("case,needle", [
    ("input", "is an input"), ("directory", "is a directory"), ("no_parent", "no such directory"),
    ("exists", "exists (use --force"),
])
def test_output_file_refusals(tmp_path, case, needle):
    trace = tmp_path / "trace.json"
    trace.write_text("{}")
    target = {"input": trace, "directory": tmp_path, "no_parent": tmp_path / "nowhere" / "x.csv",
              "exists": trace}[case]
    before = snapshot(tmp_path)
    with pytest.raises(InputError, match=needle.replace("(", r"\(")):
        write_output_file(target, lambda path: path.write_text("x"), inputs=[trace] if case == "input" else [],
                          force=case != "exists")
    assert snapshot(tmp_path) == before


def test_an_input_directory_protects_the_traces_in_it(tmp_path):
    (tmp_path / "rank0.json").write_text("{}")
    with pytest.raises(InputError, match="is an input"):
        write_output_file(tmp_path / "rank0.json", lambda path: path.write_text("x"), inputs=[tmp_path])
    write_output_file(tmp_path / "notes.csv", lambda path: path.write_text("x"), inputs=[tmp_path])


# --------------------------------------------------------------------------------------------- each writer failing


def test_dataset_failing_half_way_leaves_nothing_and_the_old_dataset_whole(tables, tmp_path, monkeypatch):
    monkeypatch.setattr(dataset.pq, "write_table", fail_on_call(3, dataset.pq.write_table, at=1))
    with pytest.raises(Boom):
        tracekit.write_dataset(tables, tmp_path / "new")
    assert snapshot(tmp_path) == {} and list(tmp_path.iterdir()) == []
    monkeypatch.undo()

    tracekit.write_dataset(tables, tmp_path / "ds")
    before = snapshot(tmp_path)
    monkeypatch.setattr(dataset.pq, "write_table", fail_on_call(3, dataset.pq.write_table, at=1))
    with pytest.raises(Boom):
        tracekit.write_dataset(tables, tmp_path / "ds", force=True)
    assert snapshot(tmp_path) == before and [p.name for p in tmp_path.iterdir()] == ["ds"]


def test_replacing_a_dataset_leaves_none_of_its_files(tables, tmp_path):
    """A 2-rank dataset replaced by a 1-rank one: no rank=1 partition may survive."""
    tracekit.write_dataset(tables, tmp_path / "ds")
    one_rank = tracekit.load(min(tables.ranks.column("source_file").to_pylist()))
    tracekit.write_dataset(one_rank, tmp_path / "ds", force=True)
    assert not list((tmp_path / "ds").rglob("rank=1"))
    assert tracekit.load(tmp_path / "ds").rank_list == [0]
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]


def test_report_failing_on_the_second_workbook_keeps_the_previous_report(tables, tmp_path, monkeypatch):
    done = report.run_analyses(tables)
    monkeypatch.setattr(report, "WorkbookWriter", fail_on_call(2, report.WorkbookWriter))
    with pytest.raises(Boom):
        report.write_reports(tables, tmp_path / "new" / "report", analyses_done=done, problems=[])
    assert list(tmp_path.iterdir()) == [], "the folders it made are gone too"
    monkeypatch.undo()

    report.write_reports(tables, tmp_path / "report", analyses_done=done, problems=[])
    before = snapshot(tmp_path)
    assert sorted(before) == ["report/rank0.xlsx", "report/rank1.xlsx", "report/ranks.xlsx"]
    monkeypatch.setattr(report, "WorkbookWriter", fail_on_call(2, report.WorkbookWriter))
    with pytest.raises(Boom):
        report.write_reports(tables, tmp_path / "report", force=True, analyses_done=done, problems=[])
    assert snapshot(tmp_path) == before


def test_diff_workbook_failing_keeps_the_old_one(tables, tmp_path, monkeypatch):
    result = diff.compare(tables, tables)
    target = tmp_path / "diff.xlsx"
    target.write_bytes(b"an earlier diff")
    monkeypatch.setattr(xlsx, "write_workbook", fail_on_call(1, xlsx.write_workbook))
    with pytest.raises(Boom):
        diff.write_workbook(result, target, force=True)
    assert snapshot(tmp_path) == {"diff.xlsx": b"an earlier diff"}


@pytest.mark.parametrize("suffix,writer", [(".graphml", "write_graphml"), (".dot", "write_dot")])
def test_graph_failing_keeps_the_old_file(tables, tmp_path, monkeypatch, suffix, writer):
    target = tmp_path / f"g{suffix}"
    target.write_text("an earlier graph")
    monkeypatch.setattr(graph, writer, fail_on_call(1, getattr(graph, writer), at=1))
    with pytest.raises(Boom):
        graph.write_graph(tables, target, step=1)
    assert snapshot(tmp_path) == {target.name: b"an earlier graph"}


def test_synth_failing_keeps_the_previous_output(tmp_path, monkeypatch):
    monkeypatch.setattr(synth.writer, "write_json", fail_on_call(2, synth.writer.write_json))
    with pytest.raises(Boom):
        synth.generate(tmp_path / "new", ranks=2, steps=1, merged=True)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()

    synth.generate(tmp_path / "out", ranks=3, steps=1)
    before = snapshot(tmp_path)
    monkeypatch.setattr(synth.writer, "write_json", fail_on_call(2, synth.writer.write_json))
    with pytest.raises(Boom):
        synth.generate(tmp_path / "out", ranks=2, steps=1, seed=1, gzip=True)
    assert snapshot(tmp_path) == before


def test_synth_over_a_previous_output_removes_what_it_does_not_write_again(tmp_path):
    synth.generate(tmp_path, ranks=3, steps=1, merged=True)
    synth.generate(tmp_path, ranks=2, steps=1, gzip=True)
    assert sorted(snapshot(tmp_path)) == ["ground_truth.json", "rank0.json.gz", "rank1.json.gz"]
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == []


def test_synth_does_not_delete_files_a_forged_ground_truth_names(tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("keep")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "ground_truth.json").write_text(json.dumps({"files": ["../precious.txt"]}))
    with pytest.raises(InputError, match="not a tracekit synth ground truth"):
        synth.generate(tmp_path / "out", ranks=1, steps=1)
    assert precious.read_text() == "keep"


# --------------------------------------------------------------------------------------------- outputs onto inputs


def cli(*args) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert isinstance(result.exception, (SystemExit, type(None))), result.exception
    return result.exit_code, result.stderr


@pytest.fixture
def workspace(two_ranks, tmp_path) -> Path:
    """A copy of the two rank files in traces/, and their dataset in traces.tables/."""
    (tmp_path / "traces").mkdir()
    for p in two_ranks.glob("rank*.json"):
        (tmp_path / "traces" / p.name).write_bytes(p.read_bytes())
    tracekit.write_dataset(tracekit.load(tmp_path / "traces"), tmp_path / "traces.tables")
    return tmp_path


@pytest.mark.parametrize("args,named,needle", [
    (["ingest", "{w}/traces", "-o", "{w}/traces", "--force"], "{w}/traces", "is an input"),
    (["ingest", "{w}/traces/rank0.json", "-o", "{w}/traces/rank0.json", "--force"], "{w}/traces/rank0.json",
     "is an input"),
    (["ingest", "{w}/traces/rank0.json", "-o", "{w}/traces", "--force"], "{w}/traces", "holds the input"),
    (["ingest", "{w}/traces/rank0.json", "-o", "{w}", "--force"], "{w}", "holds the input"),
    (["ingest", "{w}/traces.tables", "-o", "{w}/traces.tables", "--force"], "{w}/traces.tables", "is an input"),
    (["ingest", "{w}/traces.tables", "-o", "{w}/traces.tables/inner"], "{w}/traces.tables/inner",
     "inside the input dataset"),
    (["diff", "{w}/traces/rank0.json", "{w}/traces/rank1.json", "-o", "{w}/traces/rank0.json", "--force"],
     "{w}/traces/rank0.json", "is an input"),
    (["diff", "{w}/traces", "{w}/traces.tables", "-o", "{w}/traces/rank1.json", "--force"],
     "{w}/traces/rank1.json", "is an input"),
    (["graph", "{w}/traces.tables", "--step", "1", "-o", "{w}/traces.tables/g.dot"], "{w}/traces.tables/g.dot",
     "inside the input dataset"),
    (["sql", "select 1", "{w}/traces/rank0.json", "-o", "{w}/traces/rank0.json"], "{w}/traces/rank0.json",
     "is an input"),
    (["run", "gpu_timeline", "{w}/traces", "-o", "{w}/traces/rank1.json"], "{w}/traces/rank1.json",
     "is an input"),
])
def test_an_output_never_replaces_an_input(workspace, args, named, needle):
    before = snapshot(workspace)
    code, stderr = cli(*(a.format(w=workspace) for a in args))
    assert code == 2
    assert stderr.startswith(f"tracekit: error: {named.format(w=workspace)}: ") and needle in stderr, stderr
    assert snapshot(workspace) == before


def test_report_does_not_replace_an_input_named_like_a_workbook(workspace):
    trace = workspace / "rank0.xlsx"  # a trace file, whatever its name
    trace.write_bytes((workspace / "traces" / "rank0.json").read_bytes())
    code, stderr = cli("report", trace, "-o", workspace, "--force")
    assert code == 2 and f"{trace}: is an input" in stderr
    assert trace.read_bytes() == (workspace / "traces" / "rank0.json").read_bytes()


def test_an_output_beside_the_inputs_is_fine(workspace):
    code, stderr = cli("ingest", workspace / "traces", "-o", workspace / "traces" / "tables")
    assert code == 0, stderr
    code, stderr = cli("sql", "select count(*) from events", workspace / "traces", "-o", workspace / "n.csv")
    assert code == 0, stderr


# --------------------------------------------------------------------------------------------- formulas stay text

FORMULA_LIKE = ["=1+1", "+1", "-1", "@SUM(A1:A2)", '=HYPERLINK("http://x","y")', "=cmd|' /C calc'!A0"]


def formula_trace(rank: int, scale: int) -> dict:
    """A ProfilerStep holding, per name, a CPU op of that name launching a kernel of that name."""
    entries = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0,
                "dur": 10_000}]
    for i, name in enumerate(FORMULA_LIKE):
        ts = 100 + i * 1000
        entries += [
            {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 50,
             "args": {"External id": i + 1}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 10,
             "dur": 5, "args": {"correlation": i + 1, "External id": i + 1}},
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts + 20, "dur": 40 * scale,
             "args": {"device": 0, "stream": 7, "correlation": i + 1}},
        ]
    return {"distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": entries}


def assert_strings_are_text(path: Path) -> set[str]:
    """Every string cell of the workbook is a string cell (type s), no sheet holds a formula; returns the strings."""
    book = openpyxl.load_workbook(path)
    kinds = {c.value: c.data_type for ws in book.worksheets for row in ws.iter_rows() for c in row
             if isinstance(c.value, str)}
    assert {k for k in kinds.values()} == {"s"}, {v: k for v, k in kinds.items() if k != "s"}
    with zipfile.ZipFile(path) as z:
        sheets = [n for n in z.namelist() if n.startswith("xl/worksheets/")]
        assert sheets and not any("<f>" in z.read(n).decode() for n in sheets)
    return set(kinds)


def test_formula_like_names_stay_text_in_every_workbook(tmp_path):
    for side, scale in (("base", 1), ("=SUM(A1)", 2)):
        (tmp_path / side).mkdir()
        for rank in (0, 1):
            (tmp_path / side / f"rank{rank}.json").write_text(json.dumps(formula_trace(rank, scale)))
    code, stderr = cli("report", tmp_path / "base", "-o", tmp_path / "report")
    assert code == 0, stderr
    workbooks = sorted((tmp_path / "report").iterdir())
    assert [p.name for p in workbooks] == ["rank0.xlsx", "rank1.xlsx", "ranks.xlsx"]
    for path in workbooks:
        strings = assert_strings_are_text(path)
        assert set(FORMULA_LIKE) <= strings, (path.name, set(FORMULA_LIKE) - strings)
    code, stderr = cli("diff", tmp_path / "base", tmp_path / "=SUM(A1)", "-o", tmp_path / "diff.xlsx")
    assert code == 0, stderr
    strings = assert_strings_are_text(tmp_path / "diff.xlsx")
    assert set(FORMULA_LIKE) <= strings, set(FORMULA_LIKE) - strings
    assert any("=SUM(A1)" in s for s in strings)  # the candidate run's label (its folder name)


def test_rows_of_no_rank_round_trip_through_a_dataset(tables, tmp_path):
    """A diagnostics row whose rank is not known (null) gets the hive null partition and comes back null."""
    unknown = tables.diagnostics.slice(0, 1).set_column(0, "rank", pa.array([None], pa.int32()))
    with_null = tables.with_tables(diagnostics=pa.concat_tables([tables.diagnostics, unknown]))
    tracekit.write_dataset(with_null, tmp_path / "ds")
    assert (tmp_path / "ds" / "diagnostics" / "rank=__HIVE_DEFAULT_PARTITION__").is_dir()
    back = tracekit.load(tmp_path / "ds").polars("diagnostics")
    assert back["rank"].null_count() == 1 and back.height == with_null.diagnostics.num_rows


def test_an_output_given_as_a_symbolic_link_replaces_its_target(tmp_path):
    (tmp_path / "real.csv").write_text("old")
    (tmp_path / "link.csv").symlink_to(tmp_path / "real.csv")
    write_output_file(tmp_path / "link.csv", lambda path: path.write_text("new"))
    assert (tmp_path / "link.csv").is_symlink() and (tmp_path / "real.csv").read_text() == "new"
