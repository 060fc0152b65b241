"""Ingest: nothing lost, exact timestamps, every format variant, clear errors on bad input."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import polars as pl
import pytest

import tracekit
from tests.conftest import REPO, TRACES, all_kineto_traces, shared_trace, trace_id
from tests.support.invariants import accounted_entries, trace_entries
from tracekit import schema


@pytest.mark.parametrize("path", all_kineto_traces(), ids=trace_id)
def test_nothing_lost(path):
    """Rows across all tables plus dropped diagnostics equal len(traceEvents), for every shared trace."""
    tables = tracekit.load(path)
    assert accounted_entries(tables) == len(trace_entries(path))
    ids = tables.polars("events").select("rank", "id")
    assert ids.is_unique().all(), "event ids must be unique within a rank"


def test_shared_traces_present_or_skipped():
    if not TRACES.is_dir():
        pytest.skip(f"shared traces folder {TRACES} not found")
    assert len(all_kineto_traces()) >= 30


def test_fractional_epoch_microseconds_are_exact():
    """v100_ns_resolution writes ts like 1712195495519689.047: float64 would lose the last digits."""
    path = shared_trace("nvidia/v100_ns_resolution.json.gz")
    text = gzip.decompress(path.read_bytes()).decode()
    first = text.index('"ts":')
    literal = text[first + 5:].lstrip().split(",")[0].strip()
    whole, frac = literal.split(".")
    expected = int(whole) * 1000 + int(frac.ljust(3, "0")[:3])
    tables = tracekit.load(path)
    assert expected in set(pl.concat([tables.polars("events")["ts"], tables.polars("instants")["ts"],
                                      tables.polars("flows")["ts"]]).to_list())
    assert float(literal) * 1000 != expected  # the float route would be wrong here


def test_relative_timestamps_get_base_time():
    path = shared_trace("nvidia/h100_qwen1.5-0.5b.json.gz")
    doc = json.loads(gzip.decompress(path.read_bytes()))
    first_x = next(e for e in doc["traceEvents"] if e.get("ph") == "X")
    tables = tracekit.load(path)
    event = tables.polars("events").filter(pl.col("id") == doc["traceEvents"].index(first_x)).row(0, named=True)
    whole, _, frac = repr(first_x["ts"]).partition(".")
    assert event["ts"] == doc["baseTimeNanoseconds"] + int(whole) * 1000 + int(frac.ljust(3, "0")[:3])
    assert event["dur"] == round(first_x["dur"] * 1000)


def test_legacy_bare_list_format():
    """2020 format: top-level list, capitalised categories, string tids, lowercase `external id`."""
    tables = tracekit.load(shared_trace("legacy/resnet50_2020-12_bare_list.pt.trace.json.gz"))
    events = tables.polars("events")
    kinds = set(events["kind"].unique())
    assert {"cpu_op", "runtime", "kernel", "memcpy", "memset"} <= kinds
    kernels = events.filter(pl.col("kind") == "kernel")
    assert kernels["stream"].null_count() == 0 and kernels["correlation"].null_count() == 0
    assert kernels["tid"].str.starts_with("stream ").all()
    assert events.filter(pl.col("kind") == "cpu_op")["external_id"].null_count() == 0
    assert events.filter(pl.col("kind") == "cpu_op")["input_dims"].null_count() == 0


def test_gpu_device_and_stream_come_from_args():
    tables = tracekit.load(shared_trace("nvidia/b200_eager_rank0of8.json.gz"))
    kernels = tables.polars("events").filter(pl.col("kind") == "kernel")
    assert kernels["device"].null_count() == 0
    assert kernels.filter(pl.col("tid") != pl.col("stream").cast(pl.String)).height == 0
    assert tables.polars("ranks")["device_name"][0] == "NVIDIA B200"


def test_collective_args_are_typed():
    events = tracekit.load(shared_trace("nvidia/b200_eager_rank0of8.json.gz")).polars("events")
    coll = events.filter(pl.col("collective_name").is_not_null())
    assert coll.height >= 1
    row = coll.row(0, named=True)
    assert row["group_size"] and row["in_msg_nelems"] is not None and row["dtype"]


def test_rank_from_distributed_info_and_file_name():
    dlrm = shared_trace("multirank/dlrm_8ranks_v100")
    tables = tracekit.load(dlrm)
    assert tables.rank_list == list(range(8))
    assert set(tables.polars("ranks")["rank_source"]) == {"distributedInfo"}
    meta = tracekit.load(shared_trace("multirank/meta_trainer_128ranks_sampled"))
    assert meta.rank_list == [0, 1]


def test_merged_file_with_per_event_rank_splits_ranks(tmp_path):
    """A TraceFuse-style merged file (args.rank per event, colliding correlation ids) gives several ranks."""
    dlrm = shared_trace("multirank/dlrm_8ranks_v100")
    merged, per_rank_events = [], {}
    for r in (0, 1):
        entries = trace_entries(dlrm / f"worker{r}.pt.trace.json.gz")
        for e in entries:
            if isinstance(e.get("pid"), int):
                e["pid"] = e["pid"] + r * 1_000_000
            if e.get("ph") == "X":
                e.setdefault("args", {})["rank"] = r
        per_rank_events[r] = sum(1 for e in entries if e.get("ph") == "X")
        merged += entries
    path = tmp_path / "merged.json"
    path.write_text(json.dumps({"traceEvents": merged}))
    tables = tracekit.load(path)
    assert tables.rank_list == [0, 1]
    counts = dict(tables.polars("events").group_by("rank").len().iter_rows())
    assert counts == per_rank_events
    assert accounted_entries(tables) == len(merged)


def test_unknown_phase_and_non_object_entries_are_kept_in_diagnostics(tmp_path):
    entries = [
        {"ph": "X", "cat": "brand_new_category", "name": "a", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
        {"ph": "B", "name": "begin", "pid": 1, "tid": 1, "ts": 11},
        42,
        {"ph": "M", "name": "process_uptime", "pid": 1, "args": {"x": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 12, "dur": 1,
         "args": {"stream": "0x7", "grid": "bogus", "device": 0}},
    ]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"traceEvents": entries}))
    tables = tracekit.load(path)
    events = tables.polars("events")
    assert events.filter(pl.col("cat") == "brand_new_category")["kind"].to_list() == ["other"]
    diag = tables.polars("diagnostics")
    dropped = diag.filter(pl.col("dropped"))
    assert dropped["position"].to_list() == [1, 2, 3]
    assert json.loads(dropped["raw"][0])["name"] == "begin"
    assert accounted_entries(tables) == len(entries)
    kernel = events.filter(pl.col("name") == "k").row(0, named=True)
    assert kernel["device"] == 0 and kernel["grid"] is None
    assert diag.filter(pl.col("reason") == "args_type").height == 1


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "tracekit.cli", *args], capture_output=True, text=True, cwd=REPO)


@pytest.mark.parametrize("content,needle", [
    (None, "no such file"),
    (b"this is not json", "not valid JSON"),
    (b'{"hello": 1}', "not a Kineto trace"),
    (b"\x1f\x8b\x08\x00garbage", "corrupt gzip"),
    (b"17", "not a trace"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, content, needle):
    path = tmp_path / "input.json"
    if content is not None:
        path.write_bytes(content)
    result = run_cli("ingest", str(path), "-o", str(tmp_path / "out"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_empty_directory_is_a_clear_error(tmp_path):
    result = run_cli("ingest", str(tmp_path), "-o", str(tmp_path / "out"))
    assert result.returncode == 2 and "no trace files" in result.stderr


def test_dataset_round_trip_is_partitioned_by_rank(tmp_path):
    dlrm = shared_trace("multirank/dlrm_8ranks_v100")
    result = run_cli("ingest", str(dlrm), "-o", str(tmp_path / "ds"))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "ds" / "events").iterdir()) == [f"rank={r}" for r in range(8)]
    original = tracekit.load(dlrm)
    back = tracekit.load(tmp_path / "ds")
    for name in ("events", "flows", "ranks", "threads"):
        a = original.polars(name).sort("rank", *schema.TABLES[name].key[1:])
        b = back.polars(name).sort("rank", *schema.TABLES[name].key[1:])
        assert a.equals(b), name
    import duckdb
    n = duckdb.sql(f"select count(*) from read_parquet('{tmp_path}/ds/events/*/*.parquet', hive_partitioning=true)").fetchall()[0][0]
    assert n == original.events.num_rows


def test_partitions_refuse_rows_not_grouped_by_rank(tmp_path):
    """A rank split over two slices would write its file twice, the second over the first: refused, not lost."""
    import pyarrow as pa

    from tracekit.output.dataset import write_partitions

    table = pa.table({"rank": pa.array([0, 1, 0], pa.int32()), "id": pa.array([1, 2, 3], pa.int64())})
    with pytest.raises(ValueError, match="not grouped by rank"):
        write_partitions("events", table, tmp_path / "events")
    assert write_partitions("events", table.take([0, 2, 1]), tmp_path / "events")[-1].parent.name == "rank=1"


def test_schema_doc_is_generated_from_schema_module():
    assert (REPO / "docs" / "schema.md").read_text() == schema.markdown()


def test_dropped_entry_without_any_args_problem(tmp_path):
    """A dropped entry in a file whose args all decode cleanly (the notes path with no args problems)."""
    entries = [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 70, "dur": 20},
               {"ph": "Q", "name": "-unknown phase", "pid": 1, "tid": 1, "ts": 75}]
    path = tmp_path / "one_drop.json"
    path.write_text(json.dumps({"traceEvents": entries}))
    tables = tracekit.load(path)
    assert tables.polars("diagnostics").filter(pl.col("dropped"))["position"].to_list() == [1]
    assert accounted_entries(tables) == len(entries)
