"""Nothing lost, as a property, on inputs nobody wrote by hand: real traces cut at many offsets (inside strings,
numbers, args objects, between entries, inside a gzip member), real traces mutated (fields deleted or of the wrong
type, NaN and Infinity, huge numbers, duplicates, entries moved out of order, junk entries, bytes that are not
UTF-8, unpaired surrogates, odd top-level keys, then maybe gzipped and cut), and traces generated from scratch.

For every input: nothing is raised but InputError, and that only where the json module finds no complete entry;
rows across the tables plus dropped diagnostics equal the entries read (counted by the json module, tests/raw_trace.py);
ids are unique per rank, every GPU op whose correlation has a launcher has exactly one launch edge, and the graph is
acyclic (tests/invariants.py).

The budget is TRACEKIT_FUZZ_EXAMPLES (default 25): hypothesis examples per test, and cut points per trace. What was
tried is counted and, when TRACEKIT_FUZZ_REPORT names a file, written there as JSON at the end of the module.
"""

from __future__ import annotations

import collections
import gzip
import json
import os
import random
import re
import zlib
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracekit
from tests.conftest import TRACES, shared_trace
from tests.support import raw_trace
from tests.support.invariants import accounted_entries, assert_graph_invariants
from tracekit.read.kineto import read_trace

EXAMPLES = int(os.environ.get("TRACEKIT_FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TRIED: collections.Counter = collections.Counter()  # what this module tried, for the report

SMALL_TRACES = [  # real traces small enough to load hundreds of times
    "nvidia/a100_event_sync.json.gz",
    "nvidia/a100_event_sync_multi_stream.json.gz",
    "amd/mi250_minitoy_train.json.gz",
    "nvidia/h100_kineto_cuda_sync_unit.json",
    "et_pairs/a100_simple_add/kineto.json.gz",
    "legacy/resnet50_2020-12_bare_list.pt.trace.json.gz",  # a bare list: cut within its first CUT_SPAN bytes
]
CUT_SPAN = 400_000  # cuts fall in the first CUT_SPAN bytes of a trace's text (files that large load in ms)
CHUNK_BYTES = 4096  # to read a trace in many chunks


@pytest.fixture(scope="module", autouse=True)
def report_what_was_tried():
    yield
    if os.environ.get("TRACEKIT_FUZZ_REPORT"):
        Path(os.environ["TRACEKIT_FUZZ_REPORT"]).write_text(json.dumps({"examples": EXAMPLES, **TRIED}, indent=1))


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def gunzipped(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def check_load(path: Path, text: bytes, complete: list | None = None) -> tracekit.TraceTables | None:
    """Load `path`, whose (decompressed, maybe cut) text is `text`, and check the properties against the json
    module's reading of that text (its `complete` entries, when the caller has them). None when the load was
    rightly refused."""
    complete = raw_trace.complete_entries(text) if complete is None else complete
    try:
        tables = tracekit.load(path, require_events=False)  # the reader's property: entries with no events count too
    except tracekit.InputError as error:
        assert not complete, f"{error} (the json module finds {len(complete)} complete entries)"
        TRIED["refused_nothing_to_salvage"] += 1
        return None
    entries_read = len(complete) + raw_trace.has_partial_entry(text, complete)
    assert accounted_entries(tables) == entries_read
    assert tables.polars("ranks")["trace_entries"].unique().to_list() == [entries_read]
    assert_graph_invariants(tables)
    assert_chunking_changes_nothing(path)
    for reason in tables.polars("diagnostics")["reason"].unique():
        TRIED[f"inputs_with_reason:{reason}"] += 1
    return tables


def assert_chunking_changes_nothing(path: Path) -> None:
    """Read in chunks of a few KB (cuts between entries found by pattern, checked by decoding; a wrong one sends
    the file down the whole-file path): the same tables as in one chunk."""
    whole, chunked = read_trace(path), read_trace(path, chunk_bytes=CHUNK_BYTES)
    for name in ("events", "instants", "flows", "metadata"):
        assert getattr(chunked.entries, name).equals(getattr(whole.entries, name)), name
    order = [(c, "ascending") for c in ("group", "position", "reason", "detail")]
    assert chunked.entries.notes.sort_by(order).equals(whole.entries.notes.sort_by(order))
    assert chunked.entries.entry_count == whole.entries.entry_count and chunked.top == whole.top


def relative_events(tables: tracekit.TraceTables) -> pl.DataFrame:
    base = tables.polars("ranks")["base_time_ns"][0]
    return tables.polars("events").with_columns(pl.col("ts") - base)


# --------------------------------------------------------------------------- cuts of real traces


def cut_offsets(text: bytes, count: int, rng: random.Random) -> dict[str, list[int]]:
    """Offsets to cut at, by kind: inside a string, inside a number, inside an args object, just after an entry's
    closing brace or the comma after it, anywhere; within the first CUT_SPAN bytes."""
    span = text[:CUT_SPAN]

    def inside(pattern: bytes, width: int) -> list[int]:
        starts = [m.end() for m in re.finditer(pattern, span)]
        return [s + rng.randrange(1, width) for s in rng.sample(starts, min(count, len(starts)))]

    boundaries = [m.start() + 1 for m in re.finditer(rb"\}\s*,", span)]
    return {
        "string": inside(rb'"name": "', 8),
        "number": inside(rb'"ts": ', 12),
        "args": inside(rb'"args": \{', 40),
        "boundary": [b + rng.randrange(2) for b in rng.sample(boundaries, min(count, len(boundaries)))],
        "anywhere": [rng.randrange(1, len(span)) for _ in range(count)],
    }


@pytest.mark.parametrize("relative", SMALL_TRACES)
def test_real_trace_cut_anywhere_keeps_its_complete_entries(relative, scratch):
    source = shared_trace(relative)
    text = gunzipped(source)
    full = relative_events(tracekit.load(source))
    rng = random.Random(relative)
    path = scratch / "cut.json"
    for kind, offsets in cut_offsets(text, max(2, EXAMPLES // 5), rng).items():
        for at in offsets:
            path.write_bytes(text[:at])
            complete = raw_trace.complete_entries(text[:at])
            tables = check_load(path, text[:at], complete)
            TRIED["cuts"] += 1
            TRIED[f"cuts_{kind}"] += 1
            if tables is not None:  # the entries before the cut are the whole file's first entries
                assert relative_events(tables).equals(full.filter(pl.col("id") < len(complete))), at


@pytest.mark.parametrize("relative", SMALL_TRACES[:3])
def test_real_trace_cut_inside_its_gzip_stream(relative, scratch):
    source = shared_trace(relative)
    data = source.read_bytes()
    rng = random.Random(relative)
    path = scratch / "cut.json.gz"
    for at in [rng.randrange(20, len(data)) for _ in range(max(2, EXAMPLES // 2))]:
        path.write_bytes(data[:at])
        check_load(path, zlib.decompressobj(wbits=31).decompress(data[:at]))
        TRIED["gzip_cuts"] += 1


# --------------------------------------------------------------------------- mutations of real traces

ODD_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.sampled_from([0, -1, 2**31, 2**63, -(2**63) - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e300, -0.0, 1e-300, 5e15]),
    st.text(max_size=8), st.sampled_from(["", "12", "1.5", "0x7", "NaN", "\ud800", "\udc00x"]),
    st.lists(st.integers(-5, 5), max_size=3), st.dictionaries(st.sampled_from(["a", "ts"]), st.integers(), max_size=2),
)
ENTRY_FIELDS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bp", "s", "args"]
ARG_KEYS = ["correlation", "stream", "device", "External id", "Record function id", "rank", "Input Dims", "grid",
            "cuda_sync_kind", "wait_on_stream", "wait_on_cuda_event_record_corr_id", "Collective name",
            "name", "sort_index", "labels"]  # the last three: what metadata entries hold
TOP_KEYS = ["baseTimeNanoseconds", "distributedInfo", "deviceProperties", "schemaVersion"]

MUTATION = st.one_of(
    st.tuples(st.just("delete"), st.integers(0), st.sampled_from(ENTRY_FIELDS)),
    st.tuples(st.just("set"), st.integers(0), st.sampled_from(ENTRY_FIELDS), ODD_VALUES),
    st.tuples(st.just("set_arg"), st.integers(0), st.sampled_from(ARG_KEYS), ODD_VALUES),
    st.tuples(st.just("duplicate"), st.integers(0), st.integers(0)),
    st.tuples(st.just("move"), st.integers(0), st.integers(0)),
    st.tuples(st.just("insert_junk"), st.integers(0), ODD_VALUES),
    st.tuples(st.just("unknown_phase"), st.integers(0), st.sampled_from(["B", "E", "C", "b", "Q", ""])),
    st.tuples(st.just("bad_bytes"), st.integers(0)),
    st.tuples(st.just("top"), st.sampled_from(TOP_KEYS), ODD_VALUES),
)
BAD_BYTES = "\u0391BADBYTES\u0391"  # put into a name, then its UTF-8 replaced by bytes that are not UTF-8


def mutated(doc, mutations) -> tuple[object, list]:
    """The document with the mutations applied (indexes taken modulo the entry count); its entries."""
    doc = json.loads(json.dumps(doc))
    entries = doc if isinstance(doc, list) else doc["traceEvents"]
    for mutation in mutations:
        kind, where = mutation[0], mutation[1]
        if kind == "top":
            if isinstance(doc, dict):
                doc[where] = mutation[2]
            continue
        if not entries:
            break
        i = where % len(entries)
        entry = entries[i]
        if kind == "delete" and isinstance(entry, dict):
            entry.pop(mutation[2], None)
        elif kind == "set" and isinstance(entry, dict):
            entry[mutation[2]] = mutation[3]
        elif kind == "set_arg" and isinstance(entry, dict):
            if not isinstance(entry.get("args"), dict):
                entry["args"] = {}
            entry["args"][mutation[2]] = mutation[3]
        elif kind == "duplicate":
            entries.insert(mutation[2] % (len(entries) + 1), json.loads(json.dumps(entry)))
        elif kind == "move":
            entries.insert(mutation[2] % len(entries), entries.pop(i))
        elif kind == "insert_junk":
            entries.insert(i, mutation[2])
        elif kind == "unknown_phase" and isinstance(entry, dict):
            entry["ph"] = mutation[2]
        elif kind == "bad_bytes" and isinstance(entry, dict):
            entry["name"] = f"{entry.get('name')}{BAD_BYTES}"
    return doc, entries


def encoded(doc, ascii_only: bool) -> bytes:
    """JSON as Python writes it (NaN and Infinity included; lone surrogates as \\ud800 escapes when `ascii_only`,
    else as their invalid UTF-8 bytes), with the BAD_BYTES markers made invalid UTF-8."""
    text = json.dumps(doc, ensure_ascii=ascii_only).encode("utf-8", errors="surrogatepass")
    return text.replace(BAD_BYTES.encode(), b"\xff\xfe\xc3(\xed\xa0\x80")


@st.composite
def mutated_traces(draw):
    relative = draw(st.sampled_from(SMALL_TRACES[:5]))
    mutations = draw(st.lists(MUTATION, min_size=1, max_size=12))
    compress, ascii_only = draw(st.booleans()), draw(st.booleans())
    cut = draw(st.one_of(st.none(), st.floats(0.02, 1.0)))
    return relative, mutations, compress, ascii_only, cut


@FUZZ
@given(case=mutated_traces())
def test_mutated_real_trace_loses_nothing(case, scratch):
    relative, mutations, compress, ascii_only, cut = case
    source = shared_trace(relative)
    doc, entries = mutated(json.loads(gunzipped(source)), mutations)
    text = encoded(doc, ascii_only)
    if cut is not None:
        text = text[:max(1, int(len(text) * cut))]
    path = scratch / ("mutated.json.gz" if compress else "mutated.json")
    path.write_bytes(gzip.compress(text, 1) if compress else text)
    tables = check_load(path, text)
    if cut is None:
        assert tables is not None and accounted_entries(tables) == len(entries)
    TRIED["mutated_traces"] += 1
    TRIED["mutations"] += len(mutations)
    TRIED["mutated_traces_cut"] += cut is not None


# --------------------------------------------------------------------------- traces generated from scratch

NAMES = ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamWaitEvent", "cudaEventRecord", "cudaStreamSynchronize",
         "aten::mm", "aten::add", "ProfilerStep#1", "ProfilerStep#2", "ncclDevKernel_AllReduce", "gemm_kernel",
         "Memcpy HtoD", "Event Sync", "Stream Wait Event", "autograd::engine"]
CATEGORIES = ["kernel", "cuda_runtime", "cuda_driver", "cpu_op", "gpu_memcpy", "gpu_memset", "user_annotation",
              "cuda_sync", "python_function", "gpu_user_annotation", "ac2g", "fwdbwd", "Kernel", "Runtime", "odd"]
TIMES = st.one_of(st.integers(0, 2000), st.integers(0, 2000).map(lambda t: t + 0.125), st.just(None),
                  st.sampled_from([-5, 10**13, 2**63, "7", float("inf")]))
ARGS = st.fixed_dictionaries({}, optional={
    "correlation": st.integers(0, 12), "stream": st.integers(0, 3), "device": st.integers(0, 1),
    "External id": st.integers(0, 30), "rank": st.one_of(st.integers(0, 2), st.sampled_from([-1, 2**40])),
    "cuda_sync_kind": st.sampled_from(["Event Sync", "Stream Wait Event", "Stream Sync", "Context Sync"]),
    "wait_on_stream": st.integers(-1, 3), "wait_on_cuda_event_record_corr_id": st.integers(-1, 12),
    "Input Dims": st.lists(st.lists(st.integers(0, 64), max_size=3), max_size=3),
})
ENTRY = st.one_of(
    st.fixed_dictionaries(
        {"ph": st.sampled_from(["X", "X", "X", "X", "i", "s", "f", "t", "M"]),
         "name": st.one_of(st.sampled_from(NAMES), st.text(max_size=6))},
        optional={"cat": st.sampled_from(CATEGORIES), "pid": st.one_of(st.integers(0, 2), st.sampled_from(["p", 1.5])),
                  "tid": st.integers(0, 3), "ts": TIMES, "dur": TIMES, "args": ARGS,
                  "id": st.one_of(st.integers(0, 6), st.sampled_from(["3", "x", 2**70])),
                  "bp": st.sampled_from(["e", "s"]), "s": st.sampled_from(["t", "p", "g"])}),
    ODD_VALUES,
)


LAUNCHED_KERNEL = st.tuples(st.integers(0, 12), st.integers(0, 2), st.integers(0, 3), st.integers(0, 2000),
                            st.integers(-2, 300), st.integers(0, 50))  # correlation, pid, stream, ts, dur, delay


def launch_and_kernel(correlation: int, pid: int, stream: int, ts: int, dur: int, delay: int) -> list[dict]:
    """A launch call and its kernel (ids that link; times that may be odd), for a graph with many edges."""
    return [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": 1, "ts": ts, "dur": 3,
             "args": {"correlation": correlation}},
            {"ph": "X", "cat": "kernel", "name": f"kernel{stream}", "pid": 0, "tid": stream, "ts": ts + delay,
             "dur": dur, "args": {"correlation": correlation, "stream": stream, "device": 0}}]


@st.composite
def generated_traces(draw):
    entries = draw(st.lists(ENTRY, min_size=1, max_size=60))
    entries += [e for k in draw(st.lists(LAUNCHED_KERNEL, max_size=30)) for e in launch_and_kernel(*k)]
    entries = draw(st.permutations(entries))
    if entries and draw(st.booleans()):  # exact duplicates, as seen in real traces
        entries += draw(st.lists(st.sampled_from(entries), max_size=5))
    top = draw(st.fixed_dictionaries({}, optional={
        "baseTimeNanoseconds": st.one_of(st.integers(0, 2**61), ODD_VALUES),
        "distributedInfo": st.one_of(st.fixed_dictionaries({"rank": st.integers(0, 3)}), ODD_VALUES)}))
    doc = {"traceEvents": entries, **top} if draw(st.booleans()) else entries
    return doc, draw(st.booleans())


@FUZZ
@given(case=generated_traces())
def test_generated_trace_loses_nothing(case, scratch):
    doc, ascii_only = case
    text = encoded(doc, ascii_only)
    path = scratch / "generated.json"
    path.write_bytes(text)
    entries = doc["traceEvents"] if isinstance(doc, dict) else doc
    tables = check_load(path, text)
    assert tables is not None and accounted_entries(tables) == len(entries)
    TRIED["generated_traces"] += 1
    TRIED["generated_entries"] += len(entries)


def test_shared_folder_is_used():
    if not TRACES.is_dir():
        pytest.skip(f"shared traces folder {TRACES} not found (set TRACEKIT_TRACES)")
    assert all((TRACES / relative).exists() for relative in SMALL_TRACES)
