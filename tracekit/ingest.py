"""Kineto trace files → Arrow tables.

A file is read as a stream: gunzipped block by block and cut into chunks of whole `traceEvents` entries, so the
decompressed text is never held at once and each chunk's Python objects are gone before the next chunk is read
(peak memory ≈ the output tables plus one chunk). A cut is trusted only because the chunk then decodes as one JSON
array: a cut anywhere but between two entries makes it invalid JSON. Anything unusual sends the file down the
whole-file path instead, which also words every error.

Speed comes from msgspec: entries decode into typed Structs with `args`, `ts` and `dur` kept as raw JSON text, so
the arguments stay byte-exact and timestamps are parsed from their decimal text without float rounding; columns
are transposed in C and stay in Arrow.

Reading a file needs no other file; ranks are applied afterwards (`rank_tables`), so files can be read in worker
processes. Every entry of `traceEvents` ends up as a row of some table or as a diagnostic with `dropped = true`
(the nothing-lost invariant).
"""

from __future__ import annotations

import gc
import gzip
import re
import zlib
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import get_args

import msgspec
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from . import schema
from .errors import InputError

# --------------------------------------------------------------------------- decoding


class Entry(msgspec.Struct, gc=False):  # gc=False: holds only atoms, so it is never part of a reference cycle
    """One `traceEvents` entry, decoded only as far as tables need."""

    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: msgspec.Raw = msgspec.Raw(b"")
    dur: msgspec.Raw = msgspec.Raw(b"")
    id: int | str | None = None
    bp: str | None = None
    s: str | None = None
    args: msgspec.Raw = msgspec.Raw(b"")


def _f(json_name: str):
    return msgspec.field(name=json_name, default=None)


class Args(msgspec.Struct, gc=False):
    """The `args` keys that become typed columns of `events` (legacy spellings included)."""

    device: int | None = None
    stream: int | None = None
    correlation: int | None = None
    external_id: int | None = _f("External id")
    external_id_legacy: int | None = _f("external id")
    record_function_id: int | None = _f("Record function id")
    sequence_number: int | None = _f("Sequence number")
    fwd_thread_id: int | None = _f("Fwd thread id")
    input_dims: msgspec.Raw = _f("Input Dims")
    input_dims_legacy: msgspec.Raw = _f("Input dims")
    input_type: msgspec.Raw = _f("Input type")
    input_strides: msgspec.Raw = _f("Input Strides")
    concrete_inputs: msgspec.Raw = _f("Concrete Inputs")
    grid: list[int] | None = None
    block: list[int] | None = None
    bytes: int | None = None
    collective_name: str | None = _f("Collective name")
    in_msg_nelems: int | None = _f("In msg nelems")
    out_msg_nelems: int | None = _f("Out msg nelems")
    dtype: str | None = None
    group_size: int | None = _f("Group size")
    process_group_name: str | None = _f("Process Group Name")
    process_group_desc: str | None = _f("Process Group Description")
    process_group_ranks: msgspec.Raw = _f("Process Group Ranks")
    sync_kind: str | None = _f("cuda_sync_kind")
    wait_on_stream: int | None = None
    wait_on_event_correlation: int | None = _f("wait_on_cuda_event_record_corr_id")
    rank: int | None = None


ARGS_FIELDS = Args.__struct_fields__
RAW_ARGS_FIELDS = {f.name for f in msgspec.structs.fields(Args) if f.type is msgspec.Raw}  # kept as JSON text
ARG_TYPES = {f.name: pa.string() if f.name in RAW_ARGS_FIELDS or str in get_args(f.type)
             else pa.list_(pa.int64()) if f.name in ("grid", "block") else pa.int64()
             for f in msgspec.structs.fields(Args)}
_ENTRIES = msgspec.json.Decoder(list[Entry])
_ARGS_LIST = msgspec.json.Decoder(list[Args | None], strict=False)
_ARGS_ONE = msgspec.json.Decoder(Args | None, strict=False)
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_RAW_VALUE = msgspec.json.Decoder(msgspec.Raw)  # checks that a text is exactly one JSON value, building nothing
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY = msgspec.json.Decoder()

CATEGORY_KINDS = {
    "cpu_op": "cpu_op", "operator": "cpu_op",
    "user_annotation": "user_annotation",
    "python_function": "python_function",
    "cuda_runtime": "runtime", "runtime": "runtime", "hip_runtime": "runtime", "mtia_runtime": "runtime",
    "cuda_driver": "driver", "driver": "driver", "hip_driver": "driver",
    "kernel": "kernel", "mtia_ccp_events": "kernel",
    "gpu_memcpy": "memcpy", "memcpy": "memcpy",
    "gpu_memset": "memset", "memset": "memset",
    "gpu_user_annotation": "gpu_annotation",
    "cuda_sync": "sync",
    "trace": "trace",
    "overhead": "overhead",
}

RANK_FILE_PATTERN = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


def read_bytes(path: Path) -> bytes:
    """The file's JSON bytes, gunzipped when it is gzip (by magic number, not by name)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    if not data:
        raise InputError(f"{path}: empty file (0 bytes)")
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"{path}: corrupt gzip data ({exc})") from None
        if not data:
            raise InputError(f"{path}: empty once gunzipped (0 bytes of JSON)")
    return data


@dataclass(frozen=True)
class ParsedFile:
    """A trace file split into its parts, nothing interpreted yet."""

    path: Path
    top: dict[str, msgspec.Raw]  # top-level keys other than traceEvents (empty for bare-list files)
    entries: bytes | msgspec.Raw  # the traceEvents JSON array (the `nodes` array of an Execution Trace)
    is_execution_trace: bool = False


def parse_file(path: Path) -> ParsedFile:
    data = read_bytes(path)
    start = data[:64].lstrip()[:1]
    try:
        if start == b"[":
            return ParsedFile(path, {}, data)
        top = _TOP.decode(data)
    except msgspec.ValidationError:
        raise InputError(f"{path}: JSON but not a trace (top level is neither an object nor a list)") from None
    except msgspec.DecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    if "traceEvents" not in top:
        if "nodes" in top and "schema" in top:
            return ParsedFile(path, {k: v for k, v in top.items() if k != "nodes"}, top["nodes"], True)
        raise InputError(f"{path}: JSON but not a Kineto trace (no traceEvents)")
    return ParsedFile(path, {k: v for k, v in top.items() if k != "traceEvents"}, top["traceEvents"])


def decode_entries(path: Path, entries: bytes | msgspec.Raw) -> tuple[list[Entry | None], list[bytes] | None]:
    """Decode every entry of a JSON array; an entry that is not an object becomes None (its raw text is returned)."""
    try:
        return _ENTRIES.decode(entries), None
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    try:
        raws = _RAW_LIST.decode(entries)
    except msgspec.ValidationError:
        raise InputError(f"{path}: traceEvents is not a list") from None
    except msgspec.DecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    one = msgspec.json.Decoder(Entry)
    decoded: list[Entry | None] = []
    for raw in raws:
        try:
            decoded.append(one.decode(raw))
        except msgspec.ValidationError:
            decoded.append(_lenient_entry(raw))
    return decoded, [bytes(r) for r in raws]


def _lenient_entry(raw: msgspec.Raw) -> Entry | None:
    """An entry whose fields have unexpected types: coerce what can be coerced."""
    value = _ANY.decode(raw)
    if not isinstance(value, dict):
        return None

    def text(key):
        v = value.get(key)
        return None if v is None else v if isinstance(v, str) else msgspec.json.encode(v).decode()

    def raw_of(key):
        return msgspec.Raw(msgspec.json.encode(value[key])) if key in value else msgspec.Raw(b"")

    return Entry(
        ph=text("ph"), cat=text("cat"), name=text("name"), pid=text("pid"), tid=text("tid"),
        ts=raw_of("ts"), dur=raw_of("dur"), id=text("id"), bp=text("bp"), s=text("s"), args=raw_of("args"),
    )


def decode_args(raws: Sequence[msgspec.Raw], all_present: bool = False) -> tuple[list[Args], list[tuple[int, str]]]:
    """Typed args for each raw args text (empty: no args); returns (args, [(row, problem)]) for fields that did not
    fit. `all_present` says no text is empty."""
    blob = b"[" + b",".join(raws if all_present else [r or b"null" for r in raws]) + b"]"
    empty = Args()
    try:
        return [a or empty for a in _ARGS_LIST.decode(blob)], []
    except (msgspec.ValidationError, msgspec.DecodeError):
        pass
    out, problems = [], []
    for row, raw in enumerate(raws):
        if not len(raw):
            out.append(empty)
            continue
        try:
            out.append(_ARGS_ONE.decode(raw) or empty)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            out.append(_lenient_args(raw))
            problems.append((row, str(exc)))
    return out, problems


def _lenient_args(raw: msgspec.Raw) -> Args:
    value = _ANY.decode(raw)
    if not isinstance(value, dict):
        return Args()
    fields = {}
    for field in msgspec.structs.fields(Args):
        if field.encode_name not in value:
            continue
        v = value[field.encode_name]
        if field.name in RAW_ARGS_FIELDS:
            fields[field.name] = msgspec.Raw(msgspec.json.encode(v))
            continue
        try:
            fields[field.name] = msgspec.convert(v, field.type, strict=False)
        except msgspec.ValidationError:
            pass
    return Args(**fields)


# --------------------------------------------------------------------------- streaming

CHUNK_BYTES = 2 << 20  # decompressed JSON decoded per step: bounds the working set (2 MiB measured fastest)
READ_BYTES = 1 << 20  # compressed bytes read per step
MIN_BLOCK_BYTES = 64 << 10  # decompressed bytes per step, when chunks are smaller (tests)
HEADER_LIMIT = 64 << 20  # top-level keys before traceEvents are small: past this, stop looking
GZIP_MAGIC = b"\x1f\x8b"
JSON_SPACE = b" \t\r\n"
LEADING_SPACE = re.compile(rb"[ \t\r\n]*")
TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"[ \t\r\n]*:[ \t\r\n]*')


def _entry_end(first_keys: bytes) -> re.Pattern:
    space = rb"[ \t\r\n]*"
    return re.compile(rb"\}" + space + rb",(?=" + space + rb"\{" + space + rb'"(?:' + first_keys + rb')")')


# Where a chunk may end: an entry's closing brace, a comma, then an object that starts with "ph" (as profilers write
# entries; objects inside args rarely do), else with any entry field. A wrong cut fails to decode.
ENTRY_ENDS = (_entry_end(b"ph"), _entry_end(b"ph|cat|name|pid|tid|ts|dur|id|bp|s|args"))


class NotStreamable(Exception):
    """The streaming reader met something unusual; the whole-file path reads (or rejects) the file instead."""


def decompressed_blocks(path: Path, block_bytes: int) -> Iterator[bytes]:
    """The file's bytes in blocks of at most `block_bytes`, gunzipped when it is gzip (by magic number)."""
    try:
        fh = path.open("rb")
    except OSError:
        raise NotStreamable from None
    with fh:
        first = fh.read(READ_BYTES)
        if first[:2] != GZIP_MAGIC:
            while first:
                yield first
                first = fh.read(block_bytes)
            return
        yield from _gunzip(fh, first, block_bytes)


def read_ahead(blocks: Iterator[bytes]) -> Iterator[bytes]:
    """The same blocks, the next one read in a thread meanwhile: gunzip releases the GIL, so it overlaps decoding."""
    with ThreadPoolExecutor(1) as reader:
        block = reader.submit(next, blocks, None)
        while (ready := block.result()) is not None:
            block = reader.submit(next, blocks, None)
            yield ready


def _gunzip(fh, data: bytes, block_bytes: int) -> Iterator[bytes]:
    inflater = zlib.decompressobj(wbits=31)
    while True:
        if inflater.eof:  # end of a gzip member: another one may follow
            data = inflater.unused_data or fh.read(READ_BYTES)
            if not data:
                return
            inflater = zlib.decompressobj(wbits=31)
        elif not data:
            data = fh.read(READ_BYTES)
            if not data:
                rest = inflater.flush()
                if rest:
                    yield rest
                if not inflater.eof:
                    raise NotStreamable  # truncated
                return
        try:
            block = inflater.decompress(data, block_bytes)
        except zlib.error:
            raise NotStreamable from None
        if block:
            yield block
        data = inflater.unconsumed_tail


def trace_event_chunks(blocks: Iterator[bytes], chunk_bytes: int) -> Generator[bytes, None, dict[str, bytes]]:
    """Cut a trace's text into JSON arrays of consecutive `traceEvents` entries of about `chunk_bytes` each;
    returns the other top-level keys."""
    top, text, in_object = _split_header(blocks)
    pieces, size = [text], len(text)
    for block in blocks:
        pieces.append(block)
        size += len(block)
        if size >= chunk_bytes:
            text = b"".join(pieces)
            begin = yield from _cut(text, len(text), chunk_bytes)
            pieces, size = [text[begin:]], len(text) - begin
    text = b"".join(pieces)
    del pieces
    close, trailer = _array_end(text, in_object)
    begin = yield from _cut(text, close, chunk_bytes)
    yield b"".join((b"[", memoryview(text)[begin:close + 1]))
    return {**top, **trailer}


def _cut(text: bytes, limit: int, chunk_bytes: int) -> Generator[bytes, None, int]:
    """Chunks of whole entries from text[:limit] while `chunk_bytes` are left; returns where the rest begins."""
    begin = 0
    while limit - begin >= chunk_bytes:
        found = (_last_match(ENTRY_ENDS[0], text, begin, begin + chunk_bytes)
                 or _last_match(ENTRY_ENDS[1], text, begin, begin + chunk_bytes)
                 or ENTRY_ENDS[1].search(text, begin + chunk_bytes, limit))  # an entry longer than a chunk
        if found is None:  # and it goes on past what is here: read on
            break
        yield b"".join((b"[", memoryview(text)[begin:found.start() + 1], b"]"))
        begin = found.end()
    return begin


def _last_match(pattern: re.Pattern, text: bytes, begin: int, end: int) -> re.Match | None:
    """The last match of `pattern` starting in text[begin:end], looked for in growing windows from the end."""
    span = 1 << 16
    while True:
        start = max(begin, end - span)
        last = None
        for match in pattern.finditer(text, start, end + 256):  # room for the separator after a brace just before end
            if match.start() >= end:
                break
            last = match
        if last or start == begin:
            return last
        span <<= 4


def _split_header(blocks: Iterator[bytes]) -> tuple[dict[str, bytes], bytes, bool]:
    """Read up to the '[' that opens the entries: (top-level keys before it, the text after it, top is an object)."""
    text = b""
    for block in blocks:
        text += block
        start = LEADING_SPACE.match(text).end()
        first = text[start:start + 1]
        if first == b"[":
            return {}, text[start + 1:], False
        if first not in (b"{", b""):
            raise NotStreamable
        for match in TRACE_EVENTS_KEY.finditer(text):
            if match.end() == len(text):  # the value has not arrived yet
                break
            try:  # a top-level key only if the text before it is the start of an object
                head = _TOP.decode(text[:match.start()] + b'"traceEvents":null}')
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            if text[match.end():match.end() + 1] != b"[":
                raise NotStreamable
            return {k: bytes(v) for k, v in head.items() if k != "traceEvents"}, text[match.end() + 1:], True
        if len(text) > HEADER_LIMIT:  # not a Kineto header (an Execution Trace, say)
            break
    raise NotStreamable


def _array_end(text: bytes, in_object: bool) -> tuple[int, dict[str, bytes]]:
    """In the last text, where the entries' array closes, and the top-level keys after it.

    Looked for from the right, as keys after the array (TraceLens files put deviceProperties there) may hold ']'
    too. Unlike the other cuts, this one is checked here: a wrong one could still decode.
    """
    close = len(text)
    while (close := text.rfind(b"]", 0, close)) >= 0:
        after = text[close + 1:].strip(JSON_SPACE)
        if not in_object:
            if after:
                raise NotStreamable
            trailer = {}
        elif after == b"}":
            trailer = {}
        elif after[:1] == b",":
            try:
                trailer = _TOP.decode(b"{" + after[1:])
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            if not trailer or "traceEvents" in trailer:
                raise NotStreamable  # a trailing comma, or a second traceEvents
        else:
            continue
        try:
            _RAW_VALUE.decode(b"".join((b"[", memoryview(text)[:close + 1])))
        except msgspec.DecodeError:
            continue
        return close, {k: bytes(v) for k, v in trailer.items()}
    raise NotStreamable


# --------------------------------------------------------------------------- columns


def raw_text(values, nullable: bool = True) -> pa.Array:
    """JSON texts (msgspec.Raw, bytes, or None where `nullable`) → a string array from one buffer (empty → null)."""
    if nullable:
        if not any(values):
            return pa.nulls(len(values), pa.string())
        values = [v or b"" for v in values]
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    valid = pa.py_buffer(np.packbits(lengths > 0, bitorder="little"))
    data = pa.py_buffer(b"".join(values))
    if offsets[-1] < 2**31:
        return pa.StringArray.from_buffers(len(values), pa.py_buffer(offsets.astype(np.int32)), data, valid)
    return pa.LargeStringArray.from_buffers(len(values), pa.py_buffer(offsets), data, valid).cast(pa.string())


def id_text(values) -> pa.Array:
    """pid / tid values (int or text) → text, integers in decimal."""
    try:
        return pa.array(values, type=pa.int64()).cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        pass
    text = {v: v if v.__class__ is str else None if v is None else str(v) for v in set(values)}  # few distinct ids
    return pa.array(list(map(text.__getitem__, values)), type=pa.string())


INT64_MAX = 2**63 - 1
NS_PER_UNIT = np.array([1000, 100, 10, 1], np.int64)  # by count of decimals
LARGEST_DIGITS = np.array([INT64_MAX // 10 ** (3 - d) for d in range(4)], np.int64)  # that still scale into int64


def microseconds_to_ns(text: pa.Array) -> pa.Array:
    """Decimal microseconds text → int64 nanoseconds, exactly.

    Numbers with at most 3 decimals (what profilers write) are their digits without the dot, scaled: the dots are
    dropped from the text buffer in numpy and the rest is one integer cast. Anything else (more decimals,
    exponents, not a number) goes through exact_ns.
    """
    text = pa.concat_arrays([text.cast(pa.string())]) if text.offset or text.type != pa.string() else text
    n = len(text)
    validity, offsets, data = text.buffers()
    offsets = np.frombuffer(offsets, np.int32, n + 1)
    data = np.frombuffer(data, np.uint8, offsets[-1]) if data is not None else np.zeros(0, np.uint8)
    dots = np.flatnonzero(data == ord("."))
    rows = np.searchsorted(offsets, dots, side="right") - 1
    decimals = np.zeros(n, np.int64)
    decimals[rows] = offsets[rows + 1] - dots - 1
    undotted = pa.StringArray.from_buffers(n, pa.py_buffer((offsets - np.searchsorted(dots, offsets)).astype(np.int32)),
                                           pa.py_buffer(np.delete(data, dots)), validity, text.null_count)
    digits = pl.from_arrow(undotted).cast(pl.Int64, strict=False)
    values = digits.fill_null(0).to_numpy()
    unit = np.minimum(decimals, 3)
    largest = LARGEST_DIGITS[unit]
    fits = digits.is_not_null().to_numpy() & (decimals <= 3) & (values <= largest) & (values >= -largest)
    ns = pa.array(values * NS_PER_UNIT[unit], mask=~fits)
    other = ~fits & text.is_valid().to_numpy(zero_copy_only=False)
    if not other.any():
        return ns
    exact = pl.DataFrame({"text": pl.from_arrow(text.filter(other))}).select(exact_ns(pl.col("text"))).to_series()
    return pc.replace_with_mask(ns, pa.array(other), exact.to_arrow().cast(pa.int64()))


def exact_ns(text: pl.Expr) -> pl.Expr:
    """Decimal microseconds text → int64 nanoseconds, exactly (rounded half up past the ns digit).

    Plain decimals are parsed digit by digit; anything else (exponent notation) goes through float64.
    """
    negative = text.str.starts_with("-")
    parts = text.str.strip_prefix("-").str.split_exact(".", 1)
    whole = parts.struct.field("field_0").cast(pl.Int64, strict=False)
    frac = parts.struct.field("field_1").fill_null("").str.pad_end(4, "0").str.slice(0, 4)
    frac = pl.when(frac.str.contains(r"^\d{4}$")).then(frac.cast(pl.Int64, strict=False))
    ns = whole * 1000 + (frac + 5) // 10
    ns = pl.when(negative).then(-ns).otherwise(ns)
    plain = pl.when(text.str.contains("[eE]").not_()).then(ns)
    return pl.coalesce(plain, (text.cast(pl.Float64, strict=False) * 1000).round(0).cast(pl.Int64, strict=False))


def kinds(categories: pa.Array) -> pa.Array:
    """Category → normalised kind, looked up once per distinct category."""
    encoded = pc.dictionary_encode(categories)
    names = [CATEGORY_KINDS.get(c.lower(), "other") for c in encoded.dictionary.to_pylist()]
    return pc.fill_null(pa.array(names, pa.string()).take(encoded.indices), "other")


@contextmanager
def gc_paused():
    """The cycle collector off while millions of short-lived acyclic objects are made (it would only rescan them,
    30-40% of the time); restored afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# --------------------------------------------------------------------------- entries → rank-free tables

METADATA_KEYS = {  # metadata entry name → (table, column, args key)
    "thread_name": ("threads", "thread_name", "name"),
    "thread_sort_index": ("threads", "sort_index", "sort_index"),
    "process_name": ("processes", "process_name", "name"),
    "process_labels": ("processes", "labels", "labels"),
    "process_sort_index": ("processes", "sort_index", "sort_index"),
}


NOTES_SCHEMA = pa.schema([("group", pa.int8()), ("position", pa.int64()), ("pid", pa.string()),
                          ("args_rank", pa.int64()), ("reason", pa.string()), ("detail", pa.string()),
                          ("dropped", pa.bool_()), ("raw", pa.string())])
METADATA_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("pid", pa.string()), ("tid", pa.string()),
                             ("args", pa.string())])
# Notes are ordered by group, then position: arg type problems, bad timestamps, dropped entries.
ARGS_TYPE, BAD_TIMESTAMP, DROPPED = 0, 1, 2


@dataclass(frozen=True)
class EntryTables:
    """What a run of consecutive entries gives, before ranks are known (a rank can depend on the whole file)."""

    entry_count: int
    events: pa.Table  # `events` columns but rank, plus args_rank (`args.rank`); ts without baseTimeNanoseconds
    instants: pa.Table  # `instants` columns but rank
    flows: pa.Table  # `flows` columns but rank
    metadata: pa.Table  # ph M entries whose name tracekit keeps (METADATA_SCHEMA)
    notes: pa.Table  # diagnostics to be (NOTES_SCHEMA)

    @staticmethod
    def concat(parts: list[EntryTables]) -> EntryTables:
        tables = ("events", "instants", "flows", "metadata", "notes")
        return EntryTables(sum(p.entry_count for p in parts),
                           *(pa.concat_tables([getattr(p, name) for p in parts]) for name in tables))


ENTRY_FIELDS = Entry.__struct_fields__
PLACEHOLDER = Entry()
INSTANT_PHASES = pa.array(["i", "I"])
FLOW_PHASES = pa.array(["s", "f", "t"])
KNOWN_PHASES = ["X", "i", "I", "s", "f", "t", "M"]
METADATA_NAMES = pa.array(list(METADATA_KEYS))


def entry_tables(path: Path, text, first_id: int) -> EntryTables:
    """A JSON array of consecutive entries (the first at position `first_id`) → rank-free tables.

    Columns are transposed in C (astuple + zip) and converted to Arrow once for the whole chunk, and each table
    takes its rows from them; only args, the bulk of the bytes, go straight into each table's own buffer.
    """
    entries, raws = decode_entries(path, text)
    n = len(entries)
    rows = entries if raws is None else [PLACEHOLDER if e is None else e for e in entries]
    cols = dict(zip(ENTRY_FIELDS, zip(*map(msgspec.structs.astuple, rows)))) if n else {f: () for f in ENTRY_FIELDS}
    is_object = pa.array([e is not None for e in entries], type=pa.bool_()) if raws else pa.repeat(True, n)
    del rows, entries
    ph = pa.array(cols["ph"], type=pa.string())
    is_x, is_instant, is_flow = (pc.fill_null(mask, False) for mask in (
        pc.equal(ph, "X"), pc.is_in(ph, INSTANT_PHASES), pc.is_in(ph, FLOW_PHASES)))
    is_other = pc.invert(pc.or_(pc.or_(is_x, is_instant), is_flow))  # metadata, unknown phases, not objects
    x_rows, instant_rows, flow_rows, other_rows = (np.flatnonzero(mask.to_numpy(zero_copy_only=False))
                                                   for mask in (is_x, is_instant, is_flow, is_other))
    flow_id, flow_id_text = _flow_ids(cols["id"])
    table = pa.table({
        "id": np.arange(first_id, first_id + n, dtype=np.int64),
        "ph": ph,
        "cat": pa.array(cols["cat"], type=pa.string()),
        "name": pa.array(cols["name"], type=pa.string()),
        "pid": id_text(cols["pid"]),
        "tid": id_text(cols["tid"]),
        "ts": microseconds_to_ns(raw_text(cols["ts"], nullable=False)),
        "dur": microseconds_to_ns(raw_text(cols["dur"], nullable=False)),
        "flow_id": flow_id,
        "flow_id_text": flow_id_text,
        "binding_point": pa.array(cols["bp"], type=pa.string()),
        "scope": pa.array(cols["s"], type=pa.string()),
        "is_object": is_object,
    })

    def rows_of(columns: list[str], rows: np.ndarray, args: tuple) -> pa.Table:
        return table.select(columns).take(rows).append_column("args", raw_text(args, nullable=False))

    x_args = pick(cols["args"], x_rows)
    events, arg_problems = _events(rows_of(["id", "cat", "name", "pid", "tid", "ts", "dur"], x_rows, x_args), x_args)
    del x_args
    instants = rows_of(["id", "cat", "name", "pid", "tid", "ts", "scope"], instant_rows,
                       pick(cols["args"], instant_rows))
    flow_table = rows_of(["id", "ph", "cat", "name", "pid", "tid", "ts", "binding_point", "flow_id", "flow_id_text"],
                         flow_rows, pick(cols["args"], flow_rows))
    others = rows_of(["id", "ph", "name", "pid", "tid", "is_object"], other_rows, pick(cols["args"], other_rows))
    del table, cols
    has_flow_id = pc.is_valid(flow_table.column("flow_id"))
    flows = flow_table.drop_columns(["flow_id_text"]).rename_columns({"ph": "phase"})
    flows = flows.filter(has_flow_id) if flows.column("flow_id").null_count else flows
    kept = pc.and_(pc.equal(others.column("ph"), "M"), pc.is_in(others.column("name"), METADATA_NAMES))
    metadata = others.filter(pc.fill_null(kept, False)).select(METADATA_SCHEMA.names)
    if flows.num_rows < flow_table.num_rows or others.num_rows > metadata.num_rows:
        bad_flows = flow_table.select(["id", "pid", "flow_id_text"]).filter(pc.invert(has_flow_id))
        dropped = _dropped(pl.from_arrow(bad_flows), pl.from_arrow(others))
        raws = raws or [bytes(r) for r in _RAW_LIST.decode(text)]
        dropped = dropped.with_columns(raw=pl.Series(
            [raws[p - first_id].decode(errors="replace") for p in dropped["id"]], dtype=pl.String))
    else:
        dropped = None
    return EntryTables(n, events, instants, flows, metadata, _notes(events, arg_problems, dropped))


def pick(values: tuple | list, rows: np.ndarray) -> tuple:
    """values[r] for each row, picked in C (itemgetter)."""
    if len(rows) > 1:
        return itemgetter(*rows.tolist())(values)
    return tuple(values[r] for r in rows.tolist())


def _flow_ids(values) -> tuple[pa.Array, pa.Array]:
    """Flow entries' `id`s → (flow id, the id as text for diagnostics); a text id holds an integer, or is bad."""
    try:
        return pa.array(values, type=pa.int64()), pa.nulls(len(values), pa.string())  # text only matters when null
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        text = id_text(values)
        return pl.from_arrow(text).cast(pl.Int64, strict=False).to_arrow(), text


def _dropped(bad_flows: pl.DataFrame, others: pl.DataFrame) -> pl.DataFrame:
    """Entries that become no row, with the reason: (id, pid, reason, detail), by id."""
    meta = others.filter(pl.col("ph") == "M")
    return pl.concat([
        bad_flows.select(
            "id", "pid", reason=pl.lit("bad_flow_id"),
            detail=pl.format("flow entry with non-integer id {}", "flow_id_text")),
        others.filter(~pl.col("is_object")).select(
            "id", "pid", reason=pl.lit("not_an_object"), detail=pl.lit("traceEvents entry is not a JSON object")),
        others.filter(pl.col("is_object") & ~pl.col("ph").is_in(KNOWN_PHASES).fill_null(False)).select(
            "id", "pid", reason=pl.lit("unknown_phase"),
            detail=pl.format("phase {} is not one tracekit turns into rows", pl.col("ph").fill_null("(none)"))),
        meta.filter(~pl.col("name").is_in(list(METADATA_KEYS)).fill_null(False)).select(
            "id", "pid", reason=pl.lit("unknown_metadata"),
            detail=pl.format("metadata {} is not one tracekit keeps", pl.col("name").fill_null("(none)"))),
    ]).sort("id")


def _events(x: pa.Table, x_args: tuple[msgspec.Raw, ...]) -> tuple[pa.Table, list[tuple[int, str]]]:
    """The ph X rows' table: their columns, typed args columns and kind."""
    args, problems = decode_args(x_args, all_present=x.column("args").null_count == 0)
    arg_cols = (dict(zip(ARGS_FIELDS, zip(*map(msgspec.structs.astuple, args)))) if args
                else {f: () for f in ARGS_FIELDS})
    del args
    n = len(x_args)
    zeros = pa.py_buffer(bytes(8 * (n + 1)))  # calloc'd: costs no memory until read
    typed = {f: null_array(ARG_TYPES[f], n, zeros) if not any(arg_cols[f]) and arg_cols[f].count(None) == n
             else raw_text(arg_cols[f]) if f in RAW_ARGS_FIELDS else pa.array(arg_cols[f], type=ARG_TYPES[f])
             for f in ARGS_FIELDS}
    typed["external_id"] = pc.coalesce(typed.pop("external_id"), typed.pop("external_id_legacy"))
    typed["input_dims"] = pc.coalesce(typed.pop("input_dims"), typed.pop("input_dims_legacy"))
    typed["args_rank"] = typed.pop("rank")
    typed["kind"] = kinds(x.column("cat").combine_chunks())
    return pa.table({**dict(zip(x.column_names, x.columns)), **typed}), problems


def null_array(type_: pa.DataType, n: int, zeros: pa.Buffer) -> pa.Array:
    """n nulls of a primitive, string or list type, every buffer a view of one shared zero-filled buffer: the many
    args columns a chunk never fills cost nothing each."""
    if pa.types.is_list(type_):
        return pa.Array.from_buffers(type_, n, [zeros, zeros], null_count=n, children=[pa.array([], type_.value_type)])
    if pa.types.is_string(type_):
        return pa.Array.from_buffers(type_, n, [zeros, zeros, zeros.slice(0, 0)], null_count=n)
    return pa.Array.from_buffers(type_, n, [zeros, zeros], null_count=n)


def _notes(events: pa.Table, arg_problems: list[tuple[int, str]], dropped: pl.DataFrame | None) -> pa.Table:
    """Diagnostics of these entries, ranks still to come."""
    if not arg_problems and not events.column("ts").null_count and dropped is None:
        return NOTES_SCHEMA.empty_table()
    rows = [r for r, _ in arg_problems]
    arg_notes = pl.from_arrow(events.select(["id", "pid", "args_rank"]).take(pa.array(rows, pa.int64()))).select(
        group=pl.lit(ARGS_TYPE, dtype=pl.Int8), position="id", pid="pid", args_rank="args_rank",
        reason=pl.lit("args_type"),
        detail=pl.Series([f"an args field has an unexpected type and was left null: {p}" for _, p in arg_problems],
                         dtype=pl.String))
    no_ts = pl.from_arrow(events.select(["id", "pid", "args_rank"]).filter(pc.is_null(events.column("ts"))))
    ts_notes = no_ts.select(group=pl.lit(BAD_TIMESTAMP, dtype=pl.Int8), position="id", pid="pid", args_rank="args_rank",
                            reason=pl.lit("bad_timestamp"),
                            detail=pl.lit("ts is missing or not a number; the event is kept with a null ts"))
    notes = pl.concat([arg_notes, ts_notes]).with_columns(dropped=pl.lit(False), raw=pl.lit(None, pl.String))
    if dropped is not None:
        notes = pl.concat([notes, dropped.select(
            group=pl.lit(DROPPED, dtype=pl.Int8), position="id", pid="pid", args_rank=pl.lit(None, dtype=pl.Int64),
            reason="reason", detail="detail", dropped=pl.lit(True), raw="raw")])
    return notes.to_arrow().cast(NOTES_SCHEMA)


# --------------------------------------------------------------------------- one file


@dataclass(frozen=True)
class TraceParts:
    """One trace file read, ranks not yet applied (picklable: files can be read in worker processes)."""

    path: Path
    top: dict[str, bytes]  # top-level keys other than traceEvents, as JSON text
    entries: EntryTables | None  # None for an Execution Trace (not read yet)

    @property
    def is_execution_trace(self) -> bool:
        return self.entries is None


def read_trace(path: Path, chunk_bytes: int = CHUNK_BYTES) -> TraceParts:
    """Read one trace file, streaming it in chunks; whole when streaming meets anything unusual."""
    with gc_paused():
        try:
            return _read_streamed(path, chunk_bytes)
        except NotStreamable:
            pass
        parsed = parse_file(path)
        top = {k: bytes(v) for k, v in parsed.top.items()}
        if parsed.is_execution_trace:
            return TraceParts(path, top, None)
        return TraceParts(path, top, entry_tables(path, parsed.entries, 0))


def _read_streamed(path: Path, chunk_bytes: int) -> TraceParts:
    chunks = trace_event_chunks(read_ahead(decompressed_blocks(path, max(chunk_bytes, MIN_BLOCK_BYTES))), chunk_bytes)
    parts: list[EntryTables] = []
    first_id = 0
    try:
        while True:
            part = entry_tables(path, next(chunks), first_id)
            parts.append(part)
            first_id += part.entry_count
    except StopIteration as done:
        top = done.value
    except InputError:  # a chunk that is not valid JSON: let the whole-file path say what is wrong with the file
        raise NotStreamable from None
    return TraceParts(path, top, EntryTables.concat(parts))


def _top_json(parts: TraceParts, key: str) -> str | None:
    raw = parts.top.get(key)
    return raw.decode() if raw is not None else None


def _top_value(parts: TraceParts, key: str):
    raw = parts.top.get(key)
    if raw is None:
        return None
    try:
        return _ANY.decode(raw)
    except msgspec.DecodeError:
        return None


def file_rank(path: Path, parts: TraceParts, rank_option: int | None) -> tuple[int | None, str]:
    """The rank of a whole file (per-event `args.rank` may still override it in merged files)."""
    if rank_option is not None:
        return rank_option, "option"
    info = _top_value(parts, "distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"], "distributedInfo"
    match = RANK_FILE_PATTERN.search(path.name)
    if match:
        return int(match.group(1)), "file_name"
    return None, "file_order"


@dataclass(frozen=True)
class FileTables:
    """What one file contributes (one or several ranks)."""

    tables: dict[str, pa.Table]
    entry_count: int


def rank_tables(parts: TraceParts, rank: int, rank_source: str) -> FileTables:
    """The file's tables with ranks: `args.rank` (files merged by TraceFuse), else the rank of the entry's pid, else
    the file's rank."""
    entries = parts.entries
    source = str(parts.path)
    with_ranks = entries.events.filter(pc.is_valid(entries.events.column("args_rank")))
    pid_rank = pl.from_arrow(with_ranks.select(["pid", "args_rank"])).unique("pid", keep="first", maintain_order=True)
    pid_rank = dict(zip(pid_rank["pid"].to_list(), pid_rank["args_rank"].to_list()))

    def rank_of_pid(table: pa.Table) -> pa.Array:
        if not pid_rank:
            return pa.array(np.full(table.num_rows, rank, dtype=np.int32))
        ranks = pl.from_arrow(table.column("pid")).replace_strict(pid_rank, default=rank, return_dtype=pl.Int32)
        return ranks.to_arrow()

    def with_rank(table: pa.Table, name: str) -> pa.Table:
        ranks = rank_of_pid(table)
        if "args_rank" in table.column_names:
            ranks = pc.coalesce(table.column("args_rank").cast(pa.int32()), ranks)
        table = table.append_column("rank", ranks)
        return schema.conform(name, table) if name else table

    base_ns = _top_value(parts, "baseTimeNanoseconds")
    base_ns = base_ns if isinstance(base_ns, int) else 0

    def shifted(table: pa.Table) -> pa.Table:
        if not base_ns:
            return table
        return table.set_column(table.column_names.index("ts"), "ts", pc.add(table.column("ts"), base_ns))

    events = with_rank(shifted(entries.events), "events")
    notes = entries.notes.sort_by([("group", "ascending"), ("position", "ascending")])
    notes = with_rank(notes, "").append_column("source_file", pa.repeat(pa.scalar(source), notes.num_rows)) \
        .append_column("stage", pa.repeat(pa.scalar("ingest"), notes.num_rows))
    threads, processes = _metadata_tables(with_rank(entries.metadata, ""))
    tables = {
        "events": events,
        "instants": with_rank(shifted(entries.instants), "instants"),
        "flows": with_rank(shifted(entries.flows), "flows"),
        "threads": threads,
        "processes": processes,
        "diagnostics": schema.conform("diagnostics", notes),
        "ranks": _ranks_table(parts, source, rank, rank_source, entries.entry_count, events),
    }
    return FileTables(tables, entries.entry_count)


def _metadata_tables(meta: pa.Table) -> tuple[pa.Table, pa.Table]:
    """`ph: M` entries tracekit keeps → threads and processes (one row per thread / process)."""
    values = [None if a is None else _ANY.decode(a) for a in meta.column("args").to_pylist()]
    records = {"threads": {}, "processes": {}}
    for name, r, pid, tid, value in zip(*(meta.column(c).to_pylist() for c in ("name", "rank", "pid", "tid")), values):
        table, column, key = METADATA_KEYS[name]
        row_key = (r, pid, tid) if table == "threads" else (r, pid)
        row = records[table].setdefault(row_key, dict(zip(schema.TABLES[table].key, row_key), source_entries=0))
        row[column] = value.get(key) if isinstance(value, dict) else None
        row["source_entries"] += 1
    threads, processes = (
        schema.conform(t, pa.Table.from_pylist(list(records[t].values()))) if records[t] else schema.empty(t)
        for t in ("threads", "processes")
    )
    return threads, processes


TOP_LEVEL_COLUMNS = ("traceEvents", "deviceProperties", "distributedInfo", "baseTimeNanoseconds", "schemaVersion")


def _ranks_table(parts: TraceParts, source: str, rank: int, rank_source: str, n: int, events: pa.Table) -> pa.Table:
    info = _top_value(parts, "distributedInfo")
    info = info if isinstance(info, dict) else {}
    devices = _top_value(parts, "deviceProperties")
    base = _top_value(parts, "baseTimeNanoseconds")
    rest = [(k, v) for k, v in parts.top.items() if k not in TOP_LEVEL_COLUMNS]
    metadata = "{" + ",".join(msgspec.json.encode(k).decode() + ":" + v.decode() for k, v in rest) + "}"
    gpu = pl.from_arrow(events.select(["rank", "kind", "device"])).filter(
        pl.col("kind").is_in(list(schema.GPU_KINDS)) & pl.col("device").is_not_null())
    ranks = pl.from_arrow(events.column("rank")).unique().sort().to_list() or [rank]  # no events: the file's rank
    rows = []
    for r in ranks:
        used = gpu.filter(pl.col("rank") == r)["device"].mode().sort().to_list()
        rows.append(dict(
            rank=r, source_file=source, rank_source="event_args" if len(ranks) > 1 else rank_source,
            world_size=info.get("world_size") if isinstance(info.get("world_size"), int) else None,
            backend=info.get("backend") if isinstance(info.get("backend"), str) else None,
            pg_config=msgspec.json.encode(info["pg_config"]).decode() if "pg_config" in info else None,
            device_name=_device_name(devices, used[0] if used else None),
            device_properties=_top_json(parts, "deviceProperties"),
            base_time_ns=base if isinstance(base, int) else 0,
            schema_version=str(v) if (v := _top_value(parts, "schemaVersion")) is not None else None,
            trace_metadata=metadata, trace_entries=n,
        ))
    return pa.Table.from_pylist(rows, schema=schema.RANKS.arrow_schema)


def _device_name(devices, device: int | None) -> str | None:
    if not isinstance(devices, list):
        return None
    named = [d for d in devices if isinstance(d, dict) and "name" in d]
    for d in named:
        if device is not None and d.get("id") == device:
            return d["name"]
    return named[0]["name"] if named else None
