"""Streaming ingest: cutting a file into chunks, exact timestamps, worker processes — checked against whole-file
decoding (msgspec parsing the document at once), Python's json module and decimal arithmetic."""

from __future__ import annotations

import gzip
import json
import random
import re
import zlib
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import msgspec
import polars as pl
import pyarrow as pa
import pytest

import tracekit
from tests.conftest import shared_trace
from tests.support import raw_trace
from tracekit import schema
from tracekit.read.columns import TraceParts, entry_tables, microseconds_to_ns
from tracekit.read.kineto import _read_streamed
from tracekit.read.ranks import file_rank, rank_tables
from tracekit.read.text import NotStreamable, decompressed_blocks, parse_file, read_bytes, trace_event_chunks


def whole_file_tables(path: Path) -> dict[str, pa.Table]:
    """The tables from decoding the whole document at once (no cutting), ranked as load() ranks a lone file."""
    parsed = parse_file(path)
    trace = TraceParts(path, {k: bytes(v) for k, v in parsed.top.items()},
                       entry_tables(path, parsed.entries, 0))
    rank, source = file_rank(path, trace, None)
    return rank_tables(trace, 0 if rank is None else rank, "file_order" if rank is None else source).tables


def streamed_tables(path: Path, chunk_bytes: int) -> dict[str, pa.Table]:
    trace = _read_streamed(path, chunk_bytes)  # raises NotStreamable rather than falling back
    rank, source = file_rank(path, trace, None)
    return rank_tables(trace, 0 if rank is None else rank, "file_order" if rank is None else source).tables


def chunk_count(path: Path, chunk_bytes: int) -> int:
    chunks = trace_event_chunks(decompressed_blocks(path, 1 << 16), chunk_bytes)
    return sum(1 for _ in chunks)


def assert_same_tables(a: dict[str, pa.Table], b: dict[str, pa.Table]):
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].combine_chunks().equals(b[name].combine_chunks()), name


def json_entries(path: Path) -> list:
    data = path.read_bytes()
    doc = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    return doc if isinstance(doc, list) else doc["traceEvents"]


@pytest.mark.parametrize("relative", [
    "nvidia/h100_bert-small.json.gz",  # keys after traceEvents, deviceProperties among them (holds ']' and '}, {')
    "legacy/kineto_cuda_sync_before_fix.json",
    "nvidia/a100_event_sync.json.gz",
    "amd/mi250_minitoy_train.json.gz",
])
def test_small_chunks_give_the_whole_file_tables(relative):
    path = shared_trace(relative)
    chunk_bytes = len(read_bytes(path)) // 16
    assert chunk_count(path, chunk_bytes) >= 8
    assert_same_tables(streamed_tables(path, chunk_bytes), whole_file_tables(path))


def test_bare_list_in_chunks(tmp_path):
    source = json_entries(shared_trace("legacy/resnet50_2020-12_bare_list.pt.trace.json.gz"))[:3000]
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(source, indent=1) + "\n\n")
    assert chunk_count(path, 8192) > 20
    tables = streamed_tables(path, 8192)
    assert_same_tables(tables, whole_file_tables(path))
    assert tables["events"].num_rows == sum(1 for e in source if e.get("ph") == "X")


def write_trace(path: Path, doc, **dumps) -> Path:
    text = json.dumps(doc, **dumps).encode()
    path.write_bytes(gzip.compress(text) if path.name.endswith(".gz") else text)
    return path


def tricky_entries(count: int) -> list:
    """Entries whose args hold what a naive cutter would take for entry boundaries or for the end of the array."""
    out = []
    for i in range(count):
        out.append({"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 1000 + i, "dur": 1.5,
                    "args": {"External id": i,
                             "nested": [{"name": "looks like an entry", "ph": "X"}, {"ts": 1}, {"args": {}}],
                             "text": '}, {"ph": "X"}], "traceEvents": [ {', "Input Dims": [[2, 3], []]}})
        out.append({"ph": "f", "id": i, "pid": 1, "tid": 1, "ts": 1000 + i, "cat": "ac2g", "name": "flow", "bp": "e"})
    return out


@pytest.mark.parametrize("layout", ["compact", "indented", "spaced"])
def test_tricky_entries_in_chunks(tmp_path, layout):
    dumps = {"compact": dict(separators=(",", ":")), "indented": dict(indent=2), "spaced": {}}[layout]
    doc = {"schemaVersion": 1, "note": '"traceEvents": [ {"ph": "X"} ]', "traceEvents": tricky_entries(300),
           "deviceProperties": [{"id": 0, "name": "GPU ]}"}, {"id": 1, "name": "GPU"}], "trailer": {"x": [1, [2]]}}
    path = write_trace(tmp_path / "tricky.json.gz", doc, **dumps)
    tables = tracekit.load(path, edges=False)
    whole = whole_file_tables(path)
    assert_same_tables({name: getattr(tables, name) for name in whole}, whole)
    for chunk_bytes in (512, 4096, 1 << 20):
        try:
            streamed = streamed_tables(path, chunk_bytes)
        except NotStreamable:  # a cut inside args failed to decode: the whole-file path takes over
            continue
        assert_same_tables(streamed, whole)
    events = tables.polars("events")
    assert events.height == 300 and tables.flows.num_rows == 300
    assert events["external_id"].to_list() == list(range(300))
    assert json.loads(events["args"][7])["nested"][0]["name"] == "looks like an entry"
    assert json.loads(tables.polars("ranks")["trace_metadata"][0]) == {"note": doc["note"], "trailer": doc["trailer"]}
    assert tables.polars("ranks")["device_name"][0] == "GPU ]}"


def test_multi_member_gzip_and_trailing_whitespace(tmp_path):
    text = json.dumps({"traceEvents": tricky_entries(200), "baseTimeNanoseconds": 5}).encode() + b"\n  \n"
    path = tmp_path / "members.json.gz"
    path.write_bytes(gzip.compress(text[:5000]) + gzip.compress(text[5000:]))
    assert_same_tables(streamed_tables(path, 2048), whole_file_tables(path))
    events = tracekit.load(path, edges=False).polars("events")
    assert events["ts"].to_list()[:2] == [1_000_005, 1_001_005]


def test_truncated_gzip_keeps_the_entries_before_the_cut(tmp_path):
    """Half a gzip file: the entries whose text gunzipped completely are read (tests/test_reliability_ingest.py
    cuts real traces everywhere)."""
    entries = tricky_entries(500)
    data = gzip.compress(json.dumps({"traceEvents": entries}).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    text = zlib.decompressobj(wbits=31).decompress(path.read_bytes())
    complete = len(raw_trace.complete_entries(text))
    assert 0 < complete < len(entries)
    tables = tracekit.load(path, edges=False)
    assert tables.events.num_rows + tables.flows.num_rows == complete
    note = tables.polars("diagnostics").filter(pl.col("reason") == "truncated").row(0, named=True)
    assert note["detail"].startswith(f"truncated at byte {len(text)} (of the decompressed text); {complete} complete")


def test_invalid_json_late_in_the_file_is_reported(tmp_path):
    text = json.dumps({"traceEvents": tricky_entries(2000)})
    path = tmp_path / "broken.json"
    path.write_text(text[:-200] + "@@" + text[-198:])
    with pytest.raises(tracekit.InputError, match="not valid JSON"):
        tracekit.load(path)


def test_duplicate_trace_events_key_keeps_the_last_like_a_json_parser(tmp_path):
    first = json.dumps({"traceEvents": tricky_entries(50)})[:-1]
    second = json.dumps(tricky_entries(3))
    path = tmp_path / "twice.json"
    path.write_text(f'{first}, "traceEvents": {second}}}')
    last = json.loads(path.read_text())["traceEvents"]
    assert tracekit.load(path, edges=False).events.num_rows == sum(1 for e in last if e["ph"] == "X") == 3


def exact_ns_oracle(text: str) -> int:
    """Microseconds text → nanoseconds by decimal arithmetic, rounded half away from zero."""
    return int((Decimal(text) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def test_microseconds_to_ns_is_exact_against_decimal_arithmetic():
    rng = random.Random(7)
    texts = []
    for _ in range(5000):
        whole = str(rng.choice([0, 1, 7, 12_345, 1_712_195_495_519_689, 9_000_000_000_000_000]) + rng.randint(0, 999))
        decimals = rng.choice([0, 0, 1, 2, 3, 3, 3, 4, 6, 9])
        text = whole + ("." + "".join(rng.choice("0123456789") for _ in range(decimals)) if decimals else "")
        texts.append(("-" if rng.random() < 0.2 else "") + text)
    texts += ["1.2345e-05", "2.5E+3", "-7.125e1", "1.0005", "-1.0005", "0.0004999", "-0"]
    got = microseconds_to_ns(pa.array(texts, pa.string())).to_pylist()
    assert got == [exact_ns_oracle(t) for t in texts]
    assert microseconds_to_ns(pa.array(['"12"', "null", "true", "[1]", None], pa.string())).null_count == 5
    mixed = ["10", None, "1.5", '"bad"', "-1.00051", "7", None]  # integers, decimals, and the rare forms together
    assert microseconds_to_ns(pa.array(mixed, pa.string())).to_pylist() == [
        None if t is None or t.startswith('"') else exact_ns_oracle(t) for t in mixed]


@pytest.mark.parametrize("texts", [
    ["0", "17", "-3", "", "9223372036854775", "-9223372036854775", "123456789012345678", ""],  # integers and empty: one cast
    ["12", "-", "", "7"],  # a sign alone
    ["12", "1-2", "7"],  # a minus after a digit
    ["5", "0x10"],  # Arrow's cast reads hex; JSON has none, and neither does the regex
    ["5", "1234567890123456789", "-123456789012345678"],  # 19 digits, and 18 with a sign: µs beyond int64 ns
    # epoch µs to the ns (HTA's ns-resolution traces): 19 digits once the dot is dropped, int64's ends among them
    ["1712195495519689.047", "1712195495519695.812", "9223372036854775.807", "-9223372036854775.808", "0.001"],
    ["1712195495519689.047", "9223372036854775.808", "12"],  # one beyond int64: the column leaves the one cast
    ["", ""],
    ["12", "1.2.3"],  # two dots: its digits are an integer, the text is no number
    # int64's ends, and one ns beyond each, with more decimals than the one cast takes
    ["9223372036854775.8070", "9223372036854775.8080", "-9223372036854775.8080", "-9223372036854775.8090", "-0.0005"],
])
def test_integer_microseconds_with_and_without_the_one_cast(texts):
    """Columns that take the cast of integer text (and those that must not) against decimal arithmetic, up to
    int64's ends; a slice, as the chunks' columns can be."""
    def expected(t: str) -> int | None:  # null: not a number, or beyond int64 ns
        ns = exact_ns_oracle(t) if re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", t) and t.count(".") < 2 else None
        return ns if ns is not None and -2**63 <= ns < 2**63 else None

    assert microseconds_to_ns(pa.array(texts, pa.string())).to_pylist() == list(map(expected, texts))
    sliced = pa.array(["x", *texts, "y"], pa.string()).slice(1, len(texts))
    assert microseconds_to_ns(sliced).to_pylist() == list(map(expected, texts))


def test_worker_processes_give_the_same_tables():
    dlrm = shared_trace("multirank/dlrm_8ranks_v100")
    in_process = tracekit.load(dlrm, edges=False, workers=1)
    in_workers = tracekit.load(dlrm, edges=False, workers=2)
    for name in tracekit.TraceTables.names():  # by key: the Execution Trace stage does not fix its edges' order
        key = list(schema.TABLES[name].key)
        assert in_process.polars(name).sort(key, maintain_order=True).equals(
            in_workers.polars(name).sort(key, maintain_order=True)), name
    assert in_workers.rank_list == list(range(8))


def header_doc() -> dict:
    """A Kineto document whose header holds the keys the reader looks for where they are not the entries: inside a
    string, in a key after an escaped quote, nested in an object (after a key ending in a backslash) and in an
    array."""
    return {"schemaVersion": 1, "note": '"traceEvents": [1], "nodes": [2]', "meta": {"nodes": [], "traceEvents": 3},
            '"traceEvents': 4, "ends\\": {"traceEvents": 5}, "list": [{"traceEvents": [6]}],
            "nodes": [{"id": 1}], "traceEvents": tricky_entries(20), "trailer": {"x": 1}}


@pytest.mark.parametrize("block_bytes", [1, 2, 3, 5, 13, 64, 1 << 20])
def test_the_header_is_found_wherever_the_blocks_split_it(block_bytes):
    """The keys are looked for in the new text only: a key split between blocks at any byte, or followed by blanks
    up to a block's end, is found as in one block; and the top-level keys are those json.loads sees."""
    doc = header_doc()
    text = json.dumps(doc, indent=1).replace('"traceEvents":', '"traceEvents"  \n :  ').encode()

    def chunks_of(blocks):
        gen = trace_event_chunks(iter(blocks), 4096)
        out = []
        try:
            while True:
                out.append(next(gen))
        except StopIteration as stop:
            return out, stop.value

    split = [text[i:i + block_bytes] for i in range(0, len(text), block_bytes)]
    chunks, (top, cut) = chunks_of(split)
    assert (chunks, (top, cut)) == chunks_of([text])
    assert cut is None and {k: json.loads(v) for k, v in top.items()} == {
        k: v for k, v in doc.items() if k != "traceEvents"}
    assert [e for chunk in chunks for e in json.loads(chunk)] == doc["traceEvents"]


def test_an_execution_trace_is_told_from_its_first_block():
    """An Execution Trace (top-level `nodes` after `schema`) is left to the whole-file path after one block, not read
    to the header's limit first; a Kineto trace whose header has a top-level `nodes` without `schema` streams."""
    nodes = [{"name": f"aten::op{i}", "id": i, "parent": 1, "inputs": [[i]]} for i in range(20000)]
    et = json.dumps({"schema": "1.0.1", "pid": 7, "nodes": nodes, "finish_ts": 9}, indent=2).encode()
    blocks = [et[i:i + 4096] for i in range(0, len(et), 4096)]
    taken = []

    def counted():
        for block in blocks:
            taken.append(block)
            yield block

    with pytest.raises(NotStreamable):
        next(trace_event_chunks(counted(), 1 << 20))
    assert len(blocks) > 100 and len(taken) == 1
    kineto = json.dumps({"nodes": [1], "traceEvents": tricky_entries(3)}).encode()
    assert json.loads(next(trace_event_chunks(iter([kineto]), 1 << 20))) == tricky_entries(3)


def test_a_cut_value_is_told_from_its_last_bytes_as_from_the_whole_text():
    """`value_state` looks for a cut number or NaN/Infinity in the text's last bytes only; the oracle applies the
    same patterns to the whole text, as it did before: every cut of a text full of such tokens agrees."""
    from tracekit.read import jsontext

    def whole_text_state(text: bytes) -> str:
        text = jsontext.CUT_NON_FINITE.sub(b"", text)
        if jsontext.CUT_NUMBER.search(text):
            text += b"0"
        try:
            jsontext._VALUE.decode(text)
        except msgspec.DecodeError as exc:
            if str(exc) == jsontext.CUT_OFF:
                return "cut"
            repaired, _ = jsontext.repaired_json(text)
            return whole_text_state(repaired) if repaired != text else "malformed"
        return "complete"

    text = (b'{"a": [1.5e-3, -2, NaN, -Infinity, Infinity, nan, -inf, "x-In", 12E+4, -0.25], '
            b'"in": "-Inf", "b": {"c": -1e5, "d": [Infinity]}, "e": -7}')
    states = [(jsontext.value_state(text[:i]), whole_text_state(text[:i])) for i in range(1, len(text) + 1)]
    assert [i for i, (new, old) in enumerate(states, 1) if new != old] == []
    assert {new for new, _ in states} == {"cut", "complete"}


def test_nested_nodes_keys_are_not_each_looked_at(monkeypatch):
    """Looking at each `nodes` key (a decode of the text before it) made a 193 kB JSON tree of 8000 nested ones take
    3 minutes. A header holding 500 of them is read without decoding any (none is a top-level key), and still streams
    its entries."""
    from tracekit.read import text as text_module

    looked = []
    header_keys = text_module._header_keys
    monkeypatch.setattr(text_module, "_header_keys", lambda head: looked.append(head) or header_keys(head))
    tree = [{"id": i, "nodes": [{"id": i, "nodes": []}]} for i in range(250)]
    doc = {"schemaVersion": 1, "graph": {"nodes": tree}, "traceEvents": tricky_entries(3)}
    chunks = list(trace_event_chunks(iter([json.dumps(doc).encode()]), 1 << 20))
    assert [e for chunk in chunks for e in json.loads(chunk)] == doc["traceEvents"]
    assert len(looked) == 1  # traceEvents: the nested `nodes` keys are told apart by the depth scan


def test_nested_trace_events_keys_are_not_each_decoded(monkeypatch):
    """A `traceEvents` key is decoded with the text before it only at the top level: a 175 kB file of 8000 nested
    ones took 97 s (a decode and a repair each). A header holding 500 of them, nested and after escaped quotes, is
    read with one decode, in blocks of any size, and streams its entries."""
    from tracekit.read import text as text_module

    looked = []
    header_keys = text_module._header_keys
    monkeypatch.setattr(text_module, "_header_keys", lambda head: looked.append(head) or header_keys(head))
    doc = {"meta": [{"traceEvents": i, '"traceEvents': [i]} for i in range(500)], "traceEvents": tricky_entries(3)}
    text = json.dumps(doc).encode()
    for block_bytes in (7, 4096, 1 << 20):
        looked.clear()
        blocks = [text[i:i + block_bytes] for i in range(0, len(text), block_bytes)]
        chunks = list(trace_event_chunks(iter(blocks), 1 << 20))
        assert [e for chunk in chunks for e in json.loads(chunk)] == doc["traceEvents"]
        assert [json.loads(head + b'"traceEvents": 0}') for head in looked] == [{"meta": doc["meta"], "traceEvents": 0}]
    # a top-level key whose text before it does not decode: no later key of its name is decoded (its text holds it)
    looked.clear()
    malformed = b'{"a": [1 2], ' + b'"traceEvents": 0, ' * 300 + b'"traceEvents": [' + text[text.index(b"[{"):]
    with pytest.raises(NotStreamable):
        list(trace_event_chunks(iter([malformed]), 1 << 20))
    assert len(looked) == 1


def string_depths_by_hand(text: bytes) -> dict[int, int | None]:
    """The oracle: each quote byte of TEXT → the nesting depth there if it opens a string, else None; one byte at a
    time, as JSON reads it."""
    depths, depth, in_string, escaped = {}, 0, False, False
    for at, byte in enumerate(text):
        char = chr(byte)
        if in_string:
            if char == '"' and not escaped:
                depths[at] = None
                in_string = False
            elif char == '"':
                depths[at] = None
            escaped = char == "\\" and not escaped
        elif char == '"':
            depths[at] = depth
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
    return depths


def test_the_depth_scan_agrees_with_reading_by_hand():
    """`PrefixDepth` asked at every quote of a text with escapes, backslash runs, nested objects and arrays, one at a
    time in order (each question scans on from the last), out of order, and in batches, answers as the byte-by-byte
    oracle."""
    from tracekit.read.jsontext import PrefixDepth

    doc = {"a": ['x"y', "back\\", {"b": {"c": ["\\\"", 1, {"d": "}]{["}]}}], 'k"': {"\\": [[], {}]},
           "traceEvents": [{"name": "q\\\\", "args": {"s": "\\\"}"}}]}
    text = json.dumps(doc).encode()
    expected = string_depths_by_hand(text)
    assert sum(d is not None for d in expected.values()) > 10 and None in expected.values()
    scan = PrefixDepth()
    for at in sorted(expected):  # one question at a time, each scanning on from the last
        assert scan.string_depths(text, [at]) == [expected[at]], at
    for at in sorted(expected, reverse=True)[::3]:  # out of order: scanned again
        assert scan.string_depths(text, [at]) == [expected[at]], at
    offsets, batches = sorted(expected), PrefixDepth()  # in two batches, as the blocks of a text bring keys
    assert batches.string_depths(text, offsets[:7]) + batches.string_depths(text, offsets[7:]) == [
        expected[at] for at in offsets]
