"""`tracekit report`: the workbooks read back (openpyxl) against the query results and the synth ground truth;
text stays text; same input, same bytes; clear errors for a bad output folder."""

from __future__ import annotations

import json
import math
import re
import statistics
import subprocess
import sys
import threading
import zipfile
from dataclasses import replace as replaced
from decimal import Decimal
from pathlib import Path

import openpyxl
import polars as pl
import pytest
from click.testing import CliRunner

import tracekit
from tests.conftest import REPO, shared_trace
from tracekit import synth as synthetic
from tracekit.cli import main
from tracekit.engine import catalog
from tracekit.output import workbooks as report
from tracekit.output.xlsx import Block, Column, Sheet, shape_rows, write_workbook
from tracekit.query import analyses

QWEN = "nvidia/h100_qwen1.5-0.5b.json.gz"
DANGEROUS = ["=1+1", "+A1", "-2+3", "@SUM(A1:A2)", "=cmd|' /C calc'!A0", '=HYPERLINK("http://x","y")',
             "\tleading tab", "_x0041_", "<&>", " padded ", "1e5", "TRUE"]


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracekit.cli", *args], capture_output=True, text=True,
                          cwd=cwd or REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def read_workbook(path: Path) -> dict[str, list[list]]:
    """Every sheet's cells (values only), trailing empty rows dropped."""
    book = openpyxl.load_workbook(path, read_only=True)
    sheets = {}
    for ws in book.worksheets:
        rows = [list(r) for r in ws.iter_rows(values_only=True)]
        while rows and all(v is None for v in rows[-1]):
            rows.pop()
        sheets[ws.title] = rows
    book.close()
    return sheets


def shown(value, number_format: str):
    """A query value as the workbook should hold it (the style's scaling and text formats)."""
    spec = report.style().formats[number_format]
    if isinstance(value, Decimal):
        value = float(value)
    if value is None or isinstance(value, float) and not math.isfinite(value):
        return None
    if spec.one_line:
        return re.sub(r"\n *", "", value)
    if spec.text and not isinstance(value, str):
        return str(value)
    if isinstance(value, bool) or isinstance(value, str):
        return value
    if spec.scale:
        return float(value) * spec.scale
    return value


def expected_rows(block: Block, frame: pl.DataFrame) -> list[list]:
    columns = [c for c in block.columns]
    rows = []
    for record in frame.iter_rows(named=True):
        rows.append([shown(record[c.col], c.format or report.style().default_format(c.col, frame.schema[c.col]))
                     for c in columns])
    return rows


def assert_same_rows(written: list[list], expected: list[list], where: str) -> None:
    """Row by row; fractional numbers to the 12 significant digits the style writes."""
    assert len(written) == len(expected), where
    for got, want in zip(written, expected):
        assert len(got) == len(want), where
        for a, b in zip(got, want):
            if isinstance(b, float) and not isinstance(b, bool):
                assert a == pytest.approx(b, rel=1e-11, abs=1e-9), (where, got, want)
            else:
                assert a == b and type(a) is type(b), (where, got, want)


# --------------------------------------------------------------------------- the definitions


def test_every_query_the_workbooks_read_exists():
    missing = sorted(set(report.report_queries()) - set(catalog.available()))
    assert not missing, f"reports/*.toml name queries that do not exist: {missing}"


def test_definitions_use_known_formats_and_columns_say_their_unit():
    formats = report.style().formats
    for spec in report.workbook_specs():
        for sheet in spec.sheets:
            for block in sheet.blocks:
                for column in block.columns or ():
                    assert column.format is None or column.format in formats, (sheet.name, column)
                    header = column.header or report.style().default_header(column.col)
                    if column.col.endswith("_ms"):
                        assert "(ms)" in header, (sheet.name, header)
                    if column.col.endswith("_us"):
                        assert "(µs)" in header, (sheet.name, header)


# --------------------------------------------------------------------------- one real rank


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    tables = tracekit.load(shared_trace(QWEN))
    out = tmp_path_factory.mktemp("qwen")
    problems: list[str] = []
    paths = report.write_reports(tables, out, problems=problems)
    results = analyses.run_all(tables, report.report_queries())
    return tables, paths, problems, results


def test_the_per_step_critical_path_shows_every_category_so_a_row_adds_up_to_its_step(qwen):
    """Each category of critical_path_steps (a column per category, adding up to window_ms) is a column of the
    sheet's Per step block: one left out (unexplained_gpu_wait_ms was) leaves a row short of its step."""
    _, _, _, results = qwen
    categories = {c for c in results["critical_path_steps"].columns if c.endswith("_ms") and c != "window_ms"}
    blocks = [b for spec in report.workbook_specs() for sheet in spec.sheets for b in sheet.blocks
              if b.query == "critical_path_steps"]
    assert blocks and all(categories <= {c.col for c in b.columns} for b in blocks)


def test_single_rank_writes_one_workbook_without_problems(qwen):
    tables, paths, problems, _ = qwen
    assert [p.name for p in paths] == ["rank0.xlsx"]
    assert problems == []


def expected_sheets(spec: report.WorkbookSpec, results: dict[str, pl.DataFrame], rank: int | None):
    """(sheet name, sheet spec, [(block, rows)]) in workbook order, derived from the definitions and query results."""
    def rows_of(block: Block, split: tuple[str, object] | None = None) -> pl.DataFrame:
        frame = results[block.query]
        if rank is not None:
            frame = frame.filter(pl.col("rank") == rank)
        if split:
            frame = frame.filter(pl.col(split[0]) == split[1])
        return shape_rows(block, frame)

    sheets = []
    for sheet in spec.sheets:
        if sheet.split_by:
            values = set()
            for block in sheet.blocks:
                frame = results[block.query]
                frame = frame if rank is None else frame.filter(pl.col("rank") == rank)
                values |= set(frame.get_column(sheet.split_by).drop_nulls().to_list()) - set(sheet.skip)
            ordered = [v for v in sheet.order if v in values] + sorted(values - set(sheet.order))
            splits = [(sheet.name.format(value=v), (sheet.split_by, v)) for v in ordered]
        else:
            splits = [(sheet.name, None)]
        for name, split in splits:
            blocks = [(b, rows_of(b, split)) for b in sheet.blocks]
            blocks = [(b, f) for b, f in blocks if f.height]
            if blocks:
                sheets.append((name.replace("/", "-"), sheet, blocks))
    return sheets


def test_sheet_names_follow_the_definition_and_leave_out_empty_ones(qwen):
    tables, paths, _, results = qwen
    expected = [name for name, _, _ in expected_sheets(report.workbook_spec("rank"), results, 0)]
    assert openpyxl.load_workbook(paths[0], read_only=True).sheetnames == expected
    assert "Overview" in expected and "Ops" in expected and "Kernels" in expected
    assert "Collectives" not in expected  # a single-GPU inference trace has no collectives: left out, not empty


def test_table_sheets_hold_the_query_results(qwen):
    """Headers as defined; every value equal to the query's (percent scaled to Excel's %); order as defined."""
    tables, paths, _, results = qwen
    cells = read_workbook(paths[0])
    checked = 0
    for name, sheet, blocks in expected_sheets(report.workbook_spec("rank"), results, 0):
        if len(sheet.blocks) != 1:
            continue
        (block, frame), = blocks
        rows = cells[name]
        assert rows[0][: len(block.columns)] == [c.header for c in block.columns], name
        body = [r[: len(block.columns)] for r in rows[1:]]
        assert len(body) == frame.height, name
        assert_same_rows(body, expected_rows(block, frame), name)
        if block.order_by:
            key = block.order_by[0]
            index = [c.col for c in block.columns].index(key.lstrip("-"))
            keys = [r[index] for r in body if r[index] is not None]
            assert keys == sorted(keys, reverse=key.startswith("-")), name
        checked += 1
    assert checked >= 6


def test_overview_has_the_trace_the_breakdown_with_a_native_chart_and_the_top_ops(qwen):
    tables, paths, _, results = qwen
    rows = read_workbook(paths[0])["Overview"]
    labels = {r[0]: r[1] for r in rows if r and r[0]}
    assert labels["Trace file"] == str(shared_trace(QWEN))
    assert labels["Device"] == "NVIDIA H100 80GB HBM3"
    timeline = {r["category"]: r for r in results["gpu_timeline"].iter_rows(named=True)}
    start = [r[0] for r in rows].index("GPU time breakdown") + 2
    breakdown = {r[0]: r for r in rows[start:start + 5]}
    for category in ("computation", "exposed_communication", "exposed_memcpy", "idle", "total"):
        assert breakdown[category][1] == pytest.approx(timeline[category]["time_ms"], rel=1e-11)
        assert breakdown[category][2] == pytest.approx(timeline[category]["percent"] / 100, rel=1e-11)
    start = [r[0] for r in rows].index("Top 10 ops by kernel time") + 2
    top = [r[0] for r in rows[start:start + 10]]
    ops = results["op_summary"].sort(["direct_kernel_ms", "name"], descending=[True, False])
    assert top == ops.head(10).get_column("name").to_list()
    with zipfile.ZipFile(paths[0]) as z:
        charts = [n for n in z.namelist() if n.startswith("xl/charts/chart")]
        kinds = "".join(z.read(n).decode() for n in charts)
        drawing = z.read("xl/worksheets/_rels/sheet1.xml.rels").decode()
    assert "<c:pieChart>" in kinds and "<c:barChart>" in kinds
    assert "drawing" in drawing  # the charts sit on the Overview sheet (sheet1)


def test_diagnostics_sheet_counts_every_note_by_reason(qwen):
    tables, paths, _, _ = qwen
    rows = read_workbook(paths[0])["Diagnostics"]
    notes = tables.polars("diagnostics").filter((pl.col("rank") == 0) | pl.col("rank").is_null()
                                                | ~pl.col("rank").is_in(tables.rank_list))
    truth = dict(notes.group_by("reason").len().iter_rows())
    titles = [r[0] for r in rows]
    header = titles.index("Stage")
    assert rows[header][:6] == ["Stage", "Reason", "Entries", "Dropped (no row anywhere)", "Listed below",
                                "Example detail"]
    summary = {}
    for r in rows[header + 1:]:
        if r[0] is None:
            break
        summary[r[1]] = r[2]
    assert summary == truth
    listed_from = titles.index("Entries (the first of each reason)") + 2
    listed = rows[listed_from:]
    assert len(listed) == sum(min(n, 100) for n in truth.values())
    assert {r[1] for r in listed} == set(truth)


# --------------------------------------------------------------------------- several ranks (synth ground truth)


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    from tracekit import synth as synth_module
    traces = tmp_path_factory.mktemp("synth")
    files = synth_module.generate(traces, ranks=3, steps=3, seed=3)
    truth = json.loads((traces / "ground_truth.json").read_text())
    tables = tracekit.load([f for f in files if f.name.startswith("rank")])
    out = tmp_path_factory.mktemp("synth_report")
    problems: list[str] = []
    paths = report.write_reports(tables, out, problems=problems)
    return tables, truth, paths, problems


def test_several_ranks_give_one_workbook_each_and_a_comparison(synth):
    tables, truth, paths, problems = synth
    assert [p.name for p in paths] == ["rank0.xlsx", "rank1.xlsx", "rank2.xlsx", "ranks.xlsx"]
    assert problems == []
    names = openpyxl.load_workbook(paths[-1], read_only=True).sheetnames
    assert names[:2] == ["Ranks", "Steps by rank"] and "Ops by rank" in names and "Kernels by rank" in names


def rank_table(rows: list[list], key_header: str) -> tuple[list, dict]:
    header = rows[0]
    return header, {r[header.index(key_header)]: dict(zip(header, r)) for r in rows[1:]}


def test_ranks_sheet_has_each_ranks_gpu_time_from_the_ground_truth_and_marks_the_outlier(synth):
    tables, truth, paths, _ = synth
    header, metrics = rank_table(read_workbook(paths[-1])["Ranks"], "Metric")
    for metric, key in (("GPU busy (ms)", "busy_ns"), ("GPU idle (ms)", "idle_ns"),
                        ("Computation (ms)", "computation_ns"), ("Exposed communication (ms)", "exposed_comm_ns")):
        row = metrics[metric]
        values = [t["gpu_timeline"][key] / 1e6 for t in truth["ranks"]]
        for rank, value in enumerate(values):
            assert row[f"rank {rank}"] == pytest.approx(value, rel=1e-9, abs=1e-9), (metric, rank)
        median = statistics.median(values)
        assert row["Min"] == pytest.approx(min(values)) and row["Max"] == pytest.approx(max(values))
        assert row["Median"] == pytest.approx(median)
        deviations = [abs(v - median) for v in values]
        if max(deviations) > 0:
            expected = min(r for r, d in enumerate(deviations) if d == max(deviations))
            assert row["Outlier rank (furthest from median)"] == expected, metric


def test_the_outlier_ranks_cell_and_only_it_is_highlighted(synth):
    tables, truth, paths, _ = synth
    ws = openpyxl.load_workbook(paths[-1])["Ranks"]
    header = [c.value for c in ws[1]]
    outlier = header.index("Outlier rank (furthest from median)")
    marked = report.style().cells["marked"]["bg_color"].lstrip("#").upper()
    rows = 0
    for row in ws.iter_rows(min_row=2):
        if row[0].value is None:
            break
        highlighted = {header[c.column - 1] for c in row if (c.fill.fgColor.rgb or "").upper().endswith(marked)}
        expected = set() if row[outlier].value is None else {f"rank {row[outlier].value}"}
        assert highlighted == expected, row[0].value
        rows += 1
    assert rows >= 8


def test_ops_by_rank_puts_every_ranks_kernel_time_side_by_side(synth):
    tables, truth, paths, _ = synth
    header, ops = rank_table(read_workbook(paths[-1])["Ops by rank"], "Op")
    checked = 0
    for rank, rank_truth in enumerate(truth["ranks"]):
        for name, op in rank_truth["ops"].items():
            if op["direct_kernel_ns"]:
                assert ops[name][f"rank {rank} (ms)"] == pytest.approx(op["direct_kernel_ns"] / 1e6, rel=1e-9), name
                checked += 1
    assert checked > 10


def test_rank_workbooks_agree_with_the_comparison(synth):
    tables, truth, paths, _ = synth
    _, compared = rank_table(read_workbook(paths[-1])["Kernels by rank"], "Kernel")
    for rank in range(3):
        _, kernels = rank_table(read_workbook(paths[rank])["Kernels"], "Kernel")
        for name, row in kernels.items():
            assert compared[name][f"rank {rank} (ms)"] == pytest.approx(row["Total (µs)"] / 1e3, rel=1e-11)


# --------------------------------------------------------------------------- text stays text


def test_writer_writes_every_string_as_text(tmp_path):
    frame = pl.DataFrame({"name": DANGEROUS, "time_ms": [float(i) for i in range(len(DANGEROUS))]})
    block = Block("q", columns=(Column("name", "Name"), Column("time_ms")))
    path = tmp_path / "strings.xlsx"
    assert write_workbook(path, [Sheet("=Sheet", ((block, frame),))], report.style()) == []
    book = openpyxl.load_workbook(path)
    ws = book.worksheets[0]
    cells = [ws.cell(row=r + 2, column=1) for r in range(len(DANGEROUS))]
    assert [c.value for c in cells] == DANGEROUS
    assert {c.data_type for c in cells} == {"s"}
    with zipfile.ZipFile(path) as z:
        assert not any("<f>" in z.read(n).decode() for n in z.namelist() if n.startswith("xl/worksheets/"))


def test_control_characters_get_excels_escape(tmp_path):
    """XML cannot hold U+0001: Excel writes it as _x0001_ (openpyxl leaves that escape as it is)."""
    path = tmp_path / "ctrl.xlsx"
    frame = pl.DataFrame({"name": ["ctrl\x01char"]})
    write_workbook(path, [Sheet("s", ((Block("q"), frame),))], report.style())
    with zipfile.ZipFile(path) as z:
        assert "<t>ctrl_x0001_char</t>" in z.read("xl/sharedStrings.xml").decode()


def test_trace_names_that_look_like_formulas_stay_text(tmp_path):
    trace = {"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "=HYPERLINK(\"http://x\",\"y\")", "pid": 1, "tid": 1, "ts": 10, "dur": 50,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20, "dur": 5,
         "args": {"correlation": 7, "External id": 1}},
        {"ph": "X", "cat": "kernel", "name": "@SUM(A1:A9)", "pid": 0, "tid": 7, "ts": 30, "dur": 40,
         "args": {"device": 0, "stream": 7, "correlation": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "+1-1", "pid": 1, "tid": 1, "ts": 70, "dur": 20},
        {"ph": "Q", "name": "-unknown phase", "pid": 1, "tid": 1, "ts": 75},
    ]}
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(trace))
    paths = report.write_reports(tracekit.load(path), tmp_path / "out", problems=[])
    book = openpyxl.load_workbook(paths[0])
    strings = {c.value: c.data_type for ws in book.worksheets for row in ws.iter_rows() for c in row
               if isinstance(c.value, str)}
    assert strings["=HYPERLINK(\"http://x\",\"y\")"] == "s"
    assert strings["@SUM(A1:A9)"] == "s"
    assert all(t == "s" for t in strings.values())
    with zipfile.ZipFile(paths[0]) as z:
        assert not any("<f>" in z.read(n).decode() for n in z.namelist() if n.startswith("xl/worksheets/"))


# --------------------------------------------------------------------------- without the critical path


def test_without_the_critical_path_no_walk_runs_and_only_its_sheet_is_left_out(qwen, tmp_path, monkeypatch):
    """`--no-critical-path`: the critical path's shared tables are never computed (its walk is the report's
    costliest node) and the rank workbook is the default one less its Critical path sheet, cell for cell."""
    tables, paths, _, _ = qwen
    made: list[str] = []
    materialize = catalog.materialize_macro
    monkeypatch.setattr(catalog, "materialize_macro", lambda con, name: (made.append(name), materialize(con, name))[1])
    problems: list[str] = []
    lean = report.write_reports(tables, tmp_path, problems=problems, critical_path=False)
    assert problems == [] and [p.name for p in lean] == ["rank0.xlsx"]
    assert made and not [name for name in made if name.startswith(("_critical_path", "step_critical_paths"))]
    full, without = read_workbook(paths[0]), read_workbook(lean[0])
    assert "Critical path" in full
    assert list(without) == [name for name in full if name != "Critical path"]
    for name, rows in without.items():
        assert rows == full[name], name
    # the sheet's queries, named here (an oracle for the macro-call test that finds them)
    assert {"critical_path_categories", "critical_path_steps", "critical_path_top"} == (
        set(report.report_queries()) - set(report.report_queries(critical_path=False)))


def test_no_critical_path_reaches_every_process_of_a_report(tmp_path):
    """The option travels with the per-rank work to `--jobs` processes: their rank workbooks lack the sheet, and
    ranks.xlsx (no critical path in it) is the same bytes as the default report's."""
    traces = [f for f in synthetic.generate(tmp_path / "traces", ranks=3, steps=3, seed=3) if f.name.startswith("rank")]
    for name, extra in (("full", []), ("lean", ["--no-critical-path"])):
        result = run_cli("report", *map(str, traces), "-o", str(tmp_path / name), "--jobs", "2", *extra)
        assert result.returncode == 0, result.stderr
    for rank in range(3):
        full = openpyxl.load_workbook(tmp_path / "full" / f"rank{rank}.xlsx", read_only=True).sheetnames
        lean = openpyxl.load_workbook(tmp_path / "lean" / f"rank{rank}.xlsx", read_only=True).sheetnames
        assert "Critical path" in full and lean == [n for n in full if n != "Critical path"]
    assert (tmp_path / "lean" / "ranks.xlsx").read_bytes() == (tmp_path / "full" / "ranks.xlsx").read_bytes()


# --------------------------------------------------------------------------- determinism


def test_same_input_gives_the_same_bytes(qwen, tmp_path):
    tables, paths, _, _ = qwen
    again = report.write_reports(tables, tmp_path, problems=[])
    assert again[0].read_bytes() == paths[0].read_bytes()


def test_an_ingested_dataset_gives_the_same_workbooks_as_its_trace_files(synth, tmp_path):
    """The dataset holds the rows in another order, so floats are added up in another order: equal to the 11th
    significant digit (the 12th may round the other way)."""
    tables, _, paths, _ = synth
    tracekit.write_dataset(tables, tmp_path / "dataset")
    again = report.write_reports(tracekit.load(tmp_path / "dataset"), tmp_path / "out", problems=[])
    for first, second in zip(paths, again):
        one, other = read_workbook(first), read_workbook(second)
        assert list(one) == list(other), first.name
        for sheet in one:
            assert_same_rows(other[sheet], one[sheet], f"{first.name} {sheet}")


def test_same_traces_give_the_same_bytes_every_time(synth, tmp_path):
    tables, _, paths, _ = synth
    for attempt in range(3):
        again = report.write_reports(tables, tmp_path / str(attempt), problems=[])
        assert [p.read_bytes() for p in again] == [p.read_bytes() for p in paths]


def test_workbooks_written_beside_the_analyses_are_those_written_after_them(qwen, synth, tmp_path):
    """A report writes each sheet as its analyses end, beside the others still running; the same bytes as the
    workbooks written from the finished analyses."""
    for tables, paths in ((qwen[0], qwen[1]), (synth[0], synth[2])):
        done = report.run_analyses(tables)
        after = report.write_reports(tables, tmp_path / str(len(paths)), analyses_done=done, problems=[])
        assert [p.name for p in after] == [p.name for p in paths]
        assert [p.read_bytes() for p in after] == [p.read_bytes() for p in paths]


def test_sheets_are_written_while_analyses_still_run(qwen, tmp_path, monkeypatch):
    """The Overview is written before the critical path's last analysis ends: that analysis waits until it is."""
    tables, paths, _, _ = qwen
    overview_written = threading.Event()
    real_step, real_write_sheet = analyses.run_step, report.WorkbookWriter.write_sheet

    def run_step(con, step, *rest, **named):
        if step == "critical_path_top":
            assert overview_written.wait(60), "the Overview was not written before the analyses ended"
        return real_step(con, step, *rest, **named)

    def write_sheet(writer, sheet, taken):
        real_write_sheet(writer, sheet, taken)
        if sheet.name == "Overview":
            overview_written.set()

    monkeypatch.setattr(analyses, "run_step", run_step)
    monkeypatch.setattr(report.WorkbookWriter, "write_sheet", write_sheet)
    again = report.write_reports(tables, tmp_path, problems=[])
    assert overview_written.is_set() and again[0].read_bytes() == paths[0].read_bytes()


def test_an_error_in_the_analyses_stops_the_writer_and_leaves_no_workbook(qwen, tmp_path, monkeypatch):
    tables = qwen[0]
    real_step = analyses.run_step

    def run_step(con, step, *rest, **named):
        if step == "op_perf":
            raise RuntimeError("op_perf broke")
        return real_step(con, step, *rest, **named)

    monkeypatch.setattr(analyses, "run_step", run_step)
    with pytest.raises(RuntimeError, match="op_perf broke"):
        report.write_reports(tables, tmp_path / "out", problems=[])
    assert list(tmp_path.iterdir()) == []
    assert not [t for t in threading.enumerate() if t.name.startswith("tracekit-write")]


def test_rows_with_equal_sort_keys_come_out_in_one_order_whatever_the_input_order():
    frame = pl.DataFrame({"name": ["b", "a", "c", "a"], "time_ms": [1.0, 1.0, 2.0, 1.0], "count": [3, 2, 1, 1]})
    block = Block("q", order_by=("-time_ms",))
    orders = {tuple(shape_rows(block, frame.sample(fraction=1.0, shuffle=True, seed=s)).iter_rows()) for s in range(8)}
    assert orders == {(("c", 2.0, 1), ("a", 1.0, 1), ("a", 1.0, 2), ("b", 1.0, 3))}


# --------------------------------------------------------------------------- output folder


def test_output_path_that_is_a_file_is_one_line_and_exit_2(tmp_path):
    target = tmp_path / "taken"
    target.write_text("x")
    result = run_cli("report", str(shared_trace(QWEN)), "-o", str(target))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"tracekit: error: {target}: exists and is not a directory"]


def test_output_folder_that_cannot_be_made_is_one_line_and_exit_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = run_cli("report", str(shared_trace(QWEN)), "-o", str(blocker / "sub"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot create directory" in lines[0] and "Traceback" not in result.stderr


def test_unwritable_output_folder_is_an_input_error(tmp_path, monkeypatch):
    monkeypatch.setattr(report.os, "access", lambda path, mode: False)  # tests may run as root, who may write anywhere
    with pytest.raises(tracekit.InputError, match="not writable"):
        report.check_out_dir(tmp_path, force=False)


def test_existing_workbooks_are_replaced_only_with_force(tmp_path):
    trace = str(shared_trace(QWEN))
    stale = tmp_path / "rank5.xlsx"
    stale.write_text("from an earlier 8-rank report")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    result = run_cli("report", trace, "-o", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"tracekit: error: {stale}: exists (use --force to replace the workbooks in {tmp_path})"]
    result = run_cli("report", trace, "-o", str(tmp_path), "--force")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "rank0.xlsx"]
    assert "rank0.xlsx" in result.stdout and "GPU time" in result.stdout


# --------------------------------------------------------------------------- a sheet whose query is missing


def test_a_sheet_whose_query_does_not_exist_is_reported_not_silently_skipped(tmp_path, monkeypatch, qwen):
    tables = qwen[0]
    definitions = tmp_path / "reports"
    definitions.mkdir()
    (definitions / "style.toml").write_text((report.reports_dir() / "style.toml").read_text())
    (definitions / "rank.toml").write_text(
        'file = "rank{rank}.xlsx"\nper_rank = true\n'
        '[[sheets]]\nname = "GPU timeline"\nquery = "gpu_timeline"\n'
        '[[sheets]]\nname = "Future"\nquery = "no_such_query"\n')
    (definitions / "ranks.toml").write_text('file = "ranks.xlsx"\nmin_ranks = 2\nsheets = []\n')
    monkeypatch.setattr(report, "reports_dir", lambda: definitions)
    for cached in (report.workbook_spec, report.style):
        cached.cache_clear()
    written = {}
    try:
        for critical_path in (True, False):  # without the critical path too: a missing query is no path's
            problems: list[str] = []
            paths = report.write_reports(tables, tmp_path / str(critical_path), problems=problems,
                                         critical_path=critical_path)
            written[critical_path] = (openpyxl.load_workbook(paths[0], read_only=True).sheetnames, problems)
    finally:
        monkeypatch.undo()
        for cached in (report.workbook_spec, report.style):
            cached.cache_clear()
    for sheets, problems in written.values():
        assert sheets == ["GPU timeline"]
        assert problems == ["rank.toml sheet 'Future': left out query no_such_query: "
                            "queries/no_such_query.sql does not exist"]


def test_an_analysis_that_runs_out_of_memory_fails_alone(tmp_path, monkeypatch):
    """DuckDB's memory limit stops one analysis: the others' sheets are written, one warning line names it, exit 3."""
    synthetic.generate(tmp_path / "trace", ranks=1, steps=2, seed=3)
    real_load_query = catalog.load_query
    # a list of 200M integers (1.6 GB) cannot be held under a 300 MB limit
    hungry = "select rank, len(list(range)) as n from (select 0 as rank) cross join range(200000000) group by rank"
    monkeypatch.setattr(catalog, "load_query", lambda name: replaced(real_load_query(name), sql=hungry)
                        if name == "op_perf" else real_load_query(name))
    monkeypatch.setenv("TRACEKIT_MEMORY_LIMIT", "300MB")
    result = CliRunner().invoke(main, ["report", str(tmp_path / "trace" / "rank0.json"), "-o", str(tmp_path / "out")])
    assert result.exit_code == 3, result.output
    warnings_seen = [line for line in result.stderr.splitlines() if line.startswith("tracekit: warning: ")]
    # the analysis itself, then each that reads it, one line each
    assert warnings_seen[0].startswith("tracekit: warning: analysis op_perf failed and was left out: Out of "
                                       "Memory Error"), result.stderr
    assert len(warnings_seen) == 2 and "roofline" in warnings_seen[1], result.stderr
    assert all("needs op_perf, which failed" in line for line in warnings_seen[1:]), result.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["rank0.xlsx"]
    book = openpyxl.load_workbook(tmp_path / "out" / "rank0.xlsx", read_only=True)
    assert {"Overview", "GPU timeline", "Ops", "Kernels", "Steps"} <= set(book.sheetnames)
    # without op_perf: none of its per-family sheets (Perf GEMM, ... on this trace); the Critical path's still there
    assert not [name for name in book.sheetnames if name.startswith("Perf ")], book.sheetnames
    assert "Critical path" in book.sheetnames


def test_rank_workbook_sheets_grow_with_names_not_with_the_trace(tmp_path):
    """The same job profiled for 2 and for 8 steps: every sheet but the per-step ones has as many rows."""
    rows = {}
    for steps in (2, 8):
        synthetic.generate(tmp_path / f"s{steps}", ranks=1, steps=steps, seed=11)
        report.write_reports(tracekit.load(tmp_path / f"s{steps}" / "rank0.json"), tmp_path / f"r{steps}")
        book = openpyxl.load_workbook(tmp_path / f"r{steps}" / "rank0.xlsx", read_only=True)
        rows[steps] = {name: sum(1 for _ in book[name].iter_rows()) for name in book.sheetnames}
    per_step = {"Steps", "Critical path"}  # a line per step (Critical path: its "Per step" block)
    assert rows[2].keys() == rows[8].keys()
    for name in rows[2].keys() - per_step:
        assert rows[8][name] == rows[2][name], name
    assert rows[8]["Critical path"] - rows[2]["Critical path"] == 6


def test_a_one_rank_report_runs_no_cross_rank_comparison():
    """ranks.xlsx needs two ranks: a one-rank report does not compute what only that workbook reads."""
    only_ranks = set(report.workbook_spec("ranks").queries()) - set(report.workbook_spec("rank").queries())
    assert "rank_compare" in only_ranks
    assert not only_ranks & set(report.report_queries(1))
    assert only_ranks <= set(report.report_queries(2))
