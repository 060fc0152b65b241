"""The same input gives the same output, run after run: byte-identical Parquet datasets, report workbooks and diff
workbooks. Each run is its own process (thread timing, hash seeds and the rest differ between runs, not within one)."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import openpyxl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tracekit
from tests.conftest import REPO, shared_trace
from tracekit import schema, synth
from tracekit.output import dataset
from tracekit.output import workbooks as report
from tracekit.output.terminal import QUERIES
from tracekit.query import analyses

RESNET_PAIR = "diff_pairs/resnet50_v100_workers0_vs_workers4"


def run_cli(*args) -> None:
    result = subprocess.run([sys.executable, "-m", "tracekit.cli", *map(str, args)], capture_output=True, text=True,
                            cwd=REPO, check=False)
    assert result.returncode == 0, result.stderr


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def cell_values(path: Path) -> dict[str, list[tuple]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # openpyxl does not know the data bar extension
        book = openpyxl.load_workbook(path, read_only=True)
    values = {ws.title: list(ws.iter_rows(values_only=True)) for ws in book.worksheets}
    book.close()
    return values


@pytest.fixture(scope="module")
def synth_pair(tmp_path_factory) -> tuple[Path, Path]:
    """Two noisy captures of one 2-rank job, the second with a slower GEMM (per-step noise gets measured)."""
    root = tmp_path_factory.mktemp("synth_pair")
    synth.generate(root / "base", ranks=2, steps=4, noise=0.05, noise_seed=1)
    synth.generate(root / "slow", ranks=2, steps=4, noise=0.05, noise_seed=2, slow_kernels={"gemm": 1.3})
    return root / "base", root / "slow"


@pytest.mark.parametrize("source", ["synth", "multirank/dlrm_8ranks_v100", "et_pairs/cpu_torch2.13_single"])
def test_ingest_twice_gives_byte_identical_parquet(source, synth_pair, tmp_path):
    traces = synth_pair[0] if source == "synth" else shared_trace(source)
    for run in ("first", "second"):
        run_cli("ingest", traces, "-o", tmp_path / run)
    first, second = files_of(tmp_path / "first"), files_of(tmp_path / "second")
    assert list(first) == list(second)
    assert [name for name in first if first[name] != second[name]] == []
    assert any(name.startswith("edges/") for name in first)  # the table DuckDB builds in no fixed order

    marker = json.loads(first["_tracekit.json"])
    # no time, path or id that could differ
    assert sorted(marker) == ["format", "ranks", "schema_fingerprint", "schema_version", "tables"]
    for name in first:
        if name.endswith(".parquet"):
            meta = pq.read_metadata(tmp_path / "first" / name)
            # the writer's version only (some pyarrow wheels add "-SNAPSHOT")
            assert meta.created_by.removesuffix("-SNAPSHOT") == f"parquet-cpp-arrow version {pa.__version__}"
            assert set(meta.metadata) == {b"ARROW:schema", b"tracekit.table", b"tracekit.schema_version"}, name



@pytest.mark.parametrize("name", ["events", "edges"])
def test_a_table_is_written_in_key_order_however_its_rows_came(name, tmp_path):
    """`in_key_order` against a sort of its own (numpy's lexsort over the key, then the other columns), for the
    rows in the order the pipeline gives them (the reader's events are in key order already, and are then written
    as they are) and shuffled; each written file reads back as the sorted table."""
    table = getattr(tracekit.load(shared_trace("nvidia/h100_qwen1.5-0.5b.json.gz")), name)
    columns = [f.name for f in table.schema if not pa.types.is_nested(f.type)]
    key = list(schema.TABLES[name].key)  # events: (rank, id); edges: (rank, src, dst, kind)
    sort_keys = []  # each column as (null last, value), most significant first; lexsort takes them reversed
    for column in key + [c for c in columns if c not in key]:
        values, text = table[column].to_pylist(), pa.types.is_string(table[column].type)
        filled = [("" if text else 0) if v is None else v for v in values]
        sort_keys += [np.array([v is None for v in values]), np.array(filled, dtype=object if text else None)]
    expected = table.take(np.lexsort(sort_keys[::-1]))
    shuffled = table.take(np.random.default_rng(0).permutation(table.num_rows))
    for given in (table, shuffled):
        ordered = dataset.in_key_order(name, given)
        assert ordered.equals(expected)
        pq.write_table(ordered, tmp_path / "t.parquet")
        assert pq.read_table(tmp_path / "t.parquet").equals(expected)
    if name == "events":
        assert dataset.in_key_order(name, table) is table  # already in key order: not copied


def test_report_twice_gives_byte_identical_workbooks(tmp_path):
    traces = shared_trace("multirank/cpu_torch2.13_ddp_gloo_2ranks")
    for run in ("first", "second"):
        run_cli("report", traces, "-o", tmp_path / run)
    first, second = files_of(tmp_path / "first"), files_of(tmp_path / "second")
    assert list(first) == ["rank0.xlsx", "rank1.xlsx", "ranks.xlsx"]
    assert first == second


@pytest.mark.parametrize("pair", ["synth", "resnet"])
def test_diff_twice_gives_the_same_workbook(pair, synth_pair, tmp_path):
    if pair == "synth":
        base, cand = synth_pair
    else:
        folder = shared_trace(RESNET_PAIR)
        base, cand = folder / "workers0.pt.trace.json.gz", folder / "workers4.pt.trace.json.gz"
    for run in ("first", "second"):
        run_cli("diff", base, cand, "-o", tmp_path / f"{run}.xlsx")
    first, second = cell_values(tmp_path / "first.xlsx"), cell_values(tmp_path / "second.xlsx")
    assert list(first) == list(second)
    for sheet in first:
        assert first[sheet] == second[sheet], sheet
    assert (tmp_path / "first.xlsx").read_bytes() == (tmp_path / "second.xlsx").read_bytes()


def test_analyses_give_the_same_bits_on_one_thread_and_on_many():
    """Parallel aggregates add partial results in the order threads finish: none of the report's queries may let
    that show (kernel stddevs did, in their last digits, on this trace). `threads=4` also runs 4 analyses at a
    time, on cursors of one database (`analyses.run_concurrently`); `threads=1` one at a time."""
    tables = tracekit.load(shared_trace("nvidia/a100_trainer_rank0of16_cudagraph.json.gz"))
    names = list(dict.fromkeys(report.report_queries() + list(QUERIES)))
    one = analyses.run_all(tables, names, {}, threads=1)
    for _ in range(3):
        many = analyses.run_all(tables, names, {}, threads=4)
        for name in names:
            assert one[name].equals(many[name]), name
