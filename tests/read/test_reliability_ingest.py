"""Damaged traces: cut files keep their complete entries, malformed values are noted (not fatal), exact duplicates
are dropped, order does not matter, gzip bombs are refused. Expectations come from the json module (tests/raw_trace.py)
or from how each test builds its input, never from tracekit's own output."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
import zlib
from pathlib import Path

import polars as pl
import pytest

import tracekit
from tests.conftest import REPO, shared_trace
from tests.support import raw_trace
from tests.support.invariants import accounted_entries, assert_graph_invariants
from tracekit.query import analyses
from tracekit.read.kineto import _read_streamed, read_trace
from tracekit.read.text import NotStreamable, read_text, text_limit


def gunzipped(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def relative_events(tables: tracekit.TraceTables) -> pl.DataFrame:
    """Events with baseTimeNanoseconds taken off (a cut file may lose it: TraceLens writes it after traceEvents)."""
    base = tables.polars("ranks")["base_time_ns"][0]
    return tables.polars("events").with_columns(pl.col("ts") - base)


def truncated_note(tables: tracekit.TraceTables) -> dict:
    notes = tables.polars("diagnostics").filter(pl.col("reason") == "truncated")
    assert notes.height == 1
    return notes.row(0, named=True)


# --------------------------------------------------------------------------- cut files


def cut_points(text: bytes) -> dict[str, int]:
    """One cut of each kind, found in the text itself: inside a name string, inside a ts number, inside an args
    object, right after an entry's closing brace, right after the comma between entries, in the keys after
    traceEvents."""
    middle = len(text) // 2
    name = text.index(b'"name": "', middle) + len(b'"name": "') + 2
    ts = text.index(b'"ts": ', middle) + len(b'"ts": ') + 4
    args = text.index(b'"args": {', middle) + len(b'"args": {') + 5
    entry_end = text.index(b"},", middle) + 1
    close = text.rindex(b"]")
    return {"in_string": name, "in_number": ts, "in_args": args, "after_brace": entry_end,
            "after_comma": entry_end + 1, "in_trailer": close + 40}


@pytest.fixture(scope="module")
def bert():
    path = shared_trace("nvidia/h100_bert-small.json.gz")  # keys after traceEvents: baseTimeNanoseconds, ...
    return path, gunzipped(path), relative_events(tracekit.load(path, edges=False))


@pytest.mark.parametrize("where", ["in_string", "in_number", "in_args", "after_brace", "after_comma", "in_trailer"])
@pytest.mark.parametrize("compressed", [False, True])
def test_cut_file_keeps_every_complete_entry(tmp_path, bert, where, compressed):
    _, text, full_events = bert
    at = cut_points(text)[where]
    cut = tmp_path / ("cut.json.gz" if compressed else "cut.json")
    # A gzip stream that stops early: the compressor's output up to the point that holds text[:at], unflushed.
    compressor = zlib.compressobj(wbits=31)
    cut.write_bytes(compressor.compress(text[:at]) + compressor.flush(zlib.Z_SYNC_FLUSH) if compressed else text[:at])
    complete = raw_trace.complete_entries(text[:at])
    partial = raw_trace.has_partial_entry(text[:at], complete)
    assert partial == (where not in ("after_brace", "after_comma", "in_trailer"))
    tables = tracekit.load(cut)
    assert accounted_entries(tables) == len(complete) + partial
    assert tables.polars("ranks")["trace_entries"][0] == len(complete) + partial
    assert relative_events(tables).equals(full_events.filter(pl.col("id") < len(complete)))
    note = truncated_note(tables)
    assert note["detail"].startswith(f"truncated at byte {at} (of the decompressed text); {len(complete)} complete "
                                     f"entries recovered")
    assert note["dropped"] == partial and (note["raw"] == text[complete[-1][1]:at].decode().lstrip(" \n,")
                                           if partial else note["raw"] is None)
    assert ("gzip stream ends early" in note["detail"]) == compressed
    assert_graph_invariants(tables)


def test_cut_in_the_keys_after_the_entries_keeps_the_complete_ones(tmp_path):
    entries = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(5)]
    text = json.dumps({"traceEvents": entries, "first": {"a": [1, 2]}, "baseTimeNanoseconds": 1000,
                       "deviceProperties": [{"id": 0, "name": "GPU"}]}).encode()
    path = tmp_path / "cut.json"
    path.write_bytes(text[:text.index(b'"deviceProperties"') + 10])
    tables = tracekit.load(path)
    assert tables.events.num_rows == 5 and accounted_entries(tables) == 5
    assert json.loads(tables.polars("ranks")["trace_metadata"][0]) == {"first": {"a": [1, 2]}}
    assert tables.polars("events")["ts"].to_list() == [1000 + 1000 * i for i in range(5)]  # the base was read
    assert "in the top-level keys that follow the entries" in truncated_note(tables)["detail"]


def test_cut_before_the_first_entry_is_an_error(tmp_path):
    path = tmp_path / "cut.json"
    path.write_bytes(b'{"schemaVersion": 1, "deviceProperties": [{"id": 0, "na')
    with pytest.raises(tracekit.InputError, match="before the first complete trace entry: nothing to salvage"):
        tracekit.load(path)
    path.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1')
    with pytest.raises(tracekit.InputError, match="truncated at byte 50 .* nothing to salvage"):
        tracekit.load(path)


def test_zero_bytes_after_a_cut(tmp_path):
    """A crash or a full disk can leave the file's tail as zero bytes."""
    entries = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(9)]
    text = json.dumps({"traceEvents": entries}).encode()
    at = text.index(b'"op7"')
    path = tmp_path / "padded.json"
    path.write_bytes(text[:at] + b"\0" * 4096)
    tables = tracekit.load(path)
    assert tables.events.num_rows == 7 and accounted_entries(tables) == 8
    detail = truncated_note(tables)["detail"]
    assert detail.startswith(f"truncated at byte {at} ") and "4096 zero bytes follow" in detail


def test_cut_inside_a_later_gzip_member(tmp_path):
    entries = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
               for i in range(3000)]
    text = json.dumps({"traceEvents": entries}).encode()
    members = gzip.compress(text[:50_000]) + gzip.compress(text[50_000:])
    path = tmp_path / "members.json.gz"
    path.write_bytes(members[:len(members) - 2000])
    gunzipped_text = zlib.decompressobj(wbits=31).decompress(members[:len(gzip.compress(text[:50_000]))])
    second = zlib.decompressobj(wbits=31).decompress(members[len(gzip.compress(text[:50_000])):len(members) - 2000])
    complete = raw_trace.complete_entries(gunzipped_text + second)
    tables = tracekit.load(path)
    assert read_text(path) == (gunzipped_text + second, True)
    assert 50_000 < len(gunzipped_text + second) < len(text)
    assert tables.events.num_rows == len(complete) and accounted_entries(tables) == len(complete) + 1
    assert tables.polars("events")["name"].to_list() == [f"op{i}" for i in range(len(complete))]


def test_cut_file_read_whole_when_a_chunk_fails(tmp_path):
    """Args that look like entry boundaries make a chunk cut fail to decode: the file is then read whole, and a cut
    one still keeps its complete entries."""
    entries = [{"name": f"op{i}", "ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": i, "dur": 1,
                "args": {"nested": [{"a": 1}, {"ts": 1}]}} for i in range(400)]  # `}, {"ts"` inside args
    text = json.dumps({"traceEvents": entries}).encode()
    at = len(text) * 2 // 3
    path = tmp_path / "tricky.json"
    path.write_bytes(text[:at])
    with pytest.raises(NotStreamable):
        _read_streamed(path, 512)
    parts = read_trace(path, chunk_bytes=512)
    complete = raw_trace.complete_entries(text[:at])
    assert parts.entries.entry_count == len(complete) + 1
    assert parts.entries.events.column("name").to_pylist() == [e["name"] for e, _ in complete if e["ph"] == "X"]
    assert parts.entries.notes.column("reason").to_pylist() == ["truncated"]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracekit.cli", *args], capture_output=True, text=True, cwd=REPO,
                          check=False)


def test_cli_warns_about_a_cut_file_and_exits_3(tmp_path):
    entries = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(9)]
    text = json.dumps({"traceEvents": entries}).encode()
    at = text.index(b'"op5"') + 2
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[:at])
    result = run_cli("ingest", str(cut), "-o", str(tmp_path / "ds"))
    assert result.returncode == 3, result.stderr
    warning = (f"tracekit: warning: {cut}: truncated at byte {at} (of the decompressed text); 5 complete entries "
               f"recovered; the entry cut short (from byte {text.index(b'{', at - 40)}) is dropped; top-level keys "
               f"written after traceEvents (if any) are lost")
    assert result.stderr.splitlines() == [warning]
    assert tracekit.load(tmp_path / "ds").events.num_rows == 5  # the work was done
    result = run_cli("sql", "select count(*) as n from events", str(tmp_path / "ds"))
    assert result.returncode == 3 and "tracekit: warning:" in result.stderr and "5" in result.stdout
    whole = tmp_path / "whole.json"
    whole.write_bytes(text)
    result = run_cli("sql", "select count(*) as n from events", str(whole))
    assert result.returncode == 0 and not result.stderr
    header_only = tmp_path / "header.json"
    header_only.write_bytes(text[:10])
    result = run_cli("sql", "select 1", str(header_only))
    assert result.returncode == 2 and "nothing to salvage" in result.stderr


# --------------------------------------------------------------------------- malformed values


def kernel(i: int, **fields) -> dict:
    return {"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 1000 + 10 * i, "dur": 5,
            "args": {"correlation": i, "stream": 7, "device": 0}, **fields}


def launch(i: int) -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 990 + 10 * i,
            "dur": 2, "args": {"correlation": i}}


def op(name: str, **fields) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 5, "dur": 3, **fields}


MALFORMED = [  # (entry, reasons its position gets in diagnostics)
    (launch(0), set()), (kernel(0), set()),
    (launch(1), set()), (kernel(1, dur=-3), {"bad_duration"}),
    (launch(2), set()), (kernel(2, dur=1e12), {"bad_duration"}),  # 11.6 days
    (launch(3), set()), (kernel(3, dur=200), {"bad_duration"}),  # runs 190 µs into k4 on the same stream
    (launch(4), set()), (kernel(4), set()), (kernel(4), {"duplicate_entry"}), (kernel(4), {"duplicate_entry"}),
    ({k: v for k, v in op("no_ts").items() if k != "ts"}, {"bad_timestamp"}),
    (op("text_ts", ts="1234"), {"bad_timestamp"}),
    (op("nan", ts=float("nan"), dur=float("inf")), {"non_finite_number", "bad_timestamp", "bad_duration"}),
    ({k: v for k, v in op("no_pid BADBYTE").items() if k != "pid"}, {"missing_pid_tid", "bad_utf8"}),
    (op("huge", ts=1e20, args={"External id": 2**70, "rank": 2**40, "device": 2**31}), {"bad_timestamp", "args_type"}),
    ({"ph": "Q", "name": "unknown phase"}, {"unknown_phase"}),
    (op("lone \ud800 surrogate"), {"lone_surrogate"}),
    ({"ph": "i", "name": "mark", "pid": 1, "tid": 1, "ts": 5, "s": "t"}, set()),
    ({"ph": "i", "name": "mark", "pid": 1, "tid": 1, "ts": 5, "s": "t"}, {"duplicate_entry"}),
    (op("far_future", ts=5e15), {"bad_timestamp"}),  # 5e18 ns: past 2^62
    (op("text_dur", dur="5"), {"bad_duration"}),
    ({"ph": "s", "id": 3, "pid": 1, "tid": 1, "ts": 6, "cat": "fwdbwd", "name": "fb"}, set()),
    ({"ph": "s", "id": 3, "pid": 1, "tid": 1, "ts": 6, "cat": "fwdbwd", "name": "fb"}, {"duplicate_entry"}),
    (42, {"not_an_object"}),
    ({"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}, set()),
    ({"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}, set()),  # merged, not dropped
    (op("float_pid_then_nan", pid=1.5, dur=float("nan")), {"non_finite_number", "bad_duration"}),  # found by fuzzing
]
DROPPED_REASONS = {"duplicate_entry", "unknown_phase", "not_an_object"}


@pytest.fixture(scope="module")
def malformed(tmp_path_factory) -> tracekit.TraceTables:
    text = json.dumps({"traceEvents": [entry for entry, _ in MALFORMED]}).encode()  # NaN / Infinity as Python writes
    path = tmp_path_factory.mktemp("malformed") / "malformed.json"
    path.write_bytes(text.replace(b"BADBYTE", b"\xff\xfe"))
    return tracekit.load(path)


def test_each_malformed_value_is_noted_with_its_reason(malformed):
    notes = malformed.polars("diagnostics").filter(pl.col("stage") == "ingest")
    got = {p: set(r) for p, r in notes.group_by("position").agg(pl.col("reason").unique()).iter_rows()}
    want = {p: reasons for p, (_, reasons) in enumerate(MALFORMED) if reasons}
    assert got == want
    dropped = notes.filter(pl.col("dropped"))
    assert set(dropped["position"]) == {p for p, (_, r) in enumerate(MALFORMED) if r & DROPPED_REASONS}
    assert accounted_entries(malformed) == len(MALFORMED)
    assert_graph_invariants(malformed)


def test_unusable_times_are_null_and_the_rest_kept(malformed):
    events = {row["id"]: row for row in malformed.polars("events").iter_rows(named=True)}
    null_dur = {p for p, (_, r) in enumerate(MALFORMED) if "bad_duration" in r}
    null_ts = {p for p, (_, r) in enumerate(MALFORMED) if "bad_timestamp" in r}
    assert {i for i, e in events.items() if e["dur"] is None} == null_dur
    assert {i for i, e in events.items() if e["ts"] is None} == null_ts
    assert events[15]["name"] == "no_pid \ufffd\ufffd" and events[15]["pid"] is None
    assert events[18]["name"] == "lone \ufffd surrogate"
    assert events[16]["external_id"] is None and events[16]["rank"] == 0  # args.rank 2^40 is no rank
    # The kernels whose dur was unusable still have their launch edge.
    launched = set(malformed.polars("edges").filter(pl.col("kind") == "launch")["dst"])
    assert {1, 3, 5, 7, 9} <= launched


def test_metadata_of_odd_types(tmp_path):
    """A name that is not a string is kept as its JSON text; a sort index that is no integer becomes null, noted;
    processes with different metadata keys each keep theirs."""
    entries = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": [1, 2]}},
        {"ph": "M", "name": "process_sort_index", "pid": 2, "args": {"sort_index": "x"}},
        {"ph": "M", "name": "process_labels", "pid": 3, "args": {"labels": 12}},
        {"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": 1, "args": {"sort_index": 2**70}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": "not an object"},
    ]
    path = tmp_path / "meta.json"
    path.write_text(json.dumps({"traceEvents": entries}))
    tables = tracekit.load(path, require_events=False)  # metadata only: the reader's tables, not a command's input
    processes = {row["pid"]: row for row in tables.polars("processes").iter_rows(named=True)}
    assert processes["1"]["process_name"] == "[1, 2]" and processes["3"]["labels"] == "12"
    assert processes["2"]["sort_index"] is None
    threads = tables.polars("threads").row(0, named=True)
    assert threads["sort_index"] is None and threads["thread_name"] is None and threads["source_entries"] == 2
    notes = tables.polars("diagnostics").filter(pl.col("reason") == "args_type")
    assert notes["position"].sort().to_list() == [1, 3, 4]
    assert accounted_entries(tables) == len(entries)


def test_non_utf8_entry_after_a_bracket(tmp_path):
    """A lone surrogate written raw (invalid UTF-8) in an entry after a ']': a place to look for the array's end
    that must not be taken for one (found by the fuzz tests)."""
    path = tmp_path / "raw_surrogate.json"
    path.write_bytes(json.dumps({"traceEvents": [[], "\ud800"]}, ensure_ascii=False).encode(errors="surrogatepass"))
    tables = tracekit.load(path, require_events=False)  # no usable entry: the reader's diagnostics are the point
    notes = tables.polars("diagnostics")
    assert sorted(notes["reason"]) == ["bad_utf8", "not_an_object", "not_an_object"]
    dropped = notes.filter(pl.col("position") == 1, pl.col("dropped"))
    assert json.loads(dropped["raw"][0]) == "\ufffd\ufffd\ufffd"


def test_analyses_leave_unusable_durations_out(malformed):
    kernels = analyses.run(malformed, "kernel_summary")
    assert kernels["count"].sum() == 5  # k0..k4: the duplicates of k4 are gone
    assert kernels["total_us"].sum() == pytest.approx(10.0)  # k0 and k4 only: 5 µs each


def test_entry_order_does_not_matter(tmp_path):
    """The same entries shuffled: the same events and edges, once ids are mapped through the shuffle."""
    source = shared_trace("nvidia/a100_event_sync_multi_stream.json.gz")
    doc = json.loads(gunzipped(source))
    order = list(range(len(doc["traceEvents"])))
    random.Random(5).shuffle(order)
    shuffled = {**doc, "traceEvents": [doc["traceEvents"][i] for i in order]}
    (tmp_path / "original.json").write_text(json.dumps(doc))  # the same layout: args text compares equal
    (tmp_path / "shuffled.json").write_text(json.dumps(shuffled))
    original, again = tracekit.load(tmp_path / "original.json"), tracekit.load(tmp_path / "shuffled.json")
    old_id = pl.DataFrame({"id": range(len(order)), "old": order}, schema={"id": pl.Int64, "old": pl.Int64})

    def mapped(frame: pl.DataFrame, *columns: str) -> pl.DataFrame:
        for column in columns:
            frame = frame.join(old_id.rename({"id": column, "old": f"{column}_old"}), on=column).drop(column)
        return frame.rename({f"{c}_old": c for c in columns})

    events = mapped(again.polars("events"), "id")
    assert events.sort("id").select(original.polars("events").columns).equals(original.polars("events").sort("id"))
    key = ["rank", "kind", "src", "dst", "subkind", "lag"]
    assert mapped(again.polars("edges"), "src", "dst").select(key).sort(key).equals(
        original.polars("edges").select(key).sort(key))


# --------------------------------------------------------------------------- gzip bombs


def bomb(path: Path, gigabytes: float) -> Path:
    """A gzip file of a trace's opening and then spaces: ~1000× its size."""
    member = gzip.compress(b" " * (64 << 20), 9)
    path.write_bytes(gzip.compress(b'{"traceEvents": [') + member * int(gigabytes * 16))
    return path


def test_gzip_bomb_is_refused_by_default(tmp_path):
    path = bomb(tmp_path / "bomb.json.gz", 0.5)  # 512 MiB of text from a file of ~500 KB
    with pytest.raises(tracekit.InputError, match=r"gunzips to more than 268,435,456 bytes, .* gzip bomb; set "
                                                  r"TRACEKIT_MAX_TRACE_BYTES"):
        tracekit.load(path)


def test_gzip_limit_is_set_by_environment(tmp_path, monkeypatch):
    entries = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
               for i in range(2000)]
    path = tmp_path / "trace.json.gz"
    text = json.dumps({"traceEvents": entries}).encode()
    path.write_bytes(gzip.compress(text))
    monkeypatch.setenv("TRACEKIT_MAX_TRACE_BYTES", "64K")
    with pytest.raises(tracekit.InputError, match=f"{path}: gunzips to more than 65,536 bytes, the limit "
                                                  "TRACEKIT_MAX_TRACE_BYTES sets"):
        tracekit.load(path)
    with pytest.raises(tracekit.InputError, match="more than 65,536 bytes"):
        read_text(path)  # the whole-file reader is bounded too
    monkeypatch.setenv("TRACEKIT_MAX_TRACE_BYTES", str(len(text)))
    assert tracekit.load(path).events.num_rows == 2000
    monkeypatch.setenv("TRACEKIT_MAX_TRACE_BYTES", "lots")
    with pytest.raises(tracekit.InputError, match="TRACEKIT_MAX_TRACE_BYTES=lots: not a byte count"):
        tracekit.load(path)


def test_default_gzip_limit_follows_file_size(monkeypatch):
    monkeypatch.delenv("TRACEKIT_MAX_TRACE_BYTES", raising=False)
    assert text_limit(1000) == 256 << 20
    assert text_limit(10 << 30) == 1000 << 30
    monkeypatch.setenv("TRACEKIT_MAX_TRACE_BYTES", "2G")
    assert text_limit(10 << 30) == 2 << 30
