"""Kineto trace files → Arrow tables.

A file is read as a stream: gunzipped block by block and cut into chunks of whole `traceEvents` entries, so the
decompressed text is never held at once and each chunk's Python objects are gone before the next chunk is read
(peak memory ≈ the output tables plus one chunk). A cut is trusted only because the chunk then decodes as one JSON
array: a cut anywhere but between two entries makes it invalid JSON. Anything unusual sends the file down the
whole-file path instead, which also words every error.

A file that stops early (a killed job, a full disk, a cut gzip stream) keeps every entry complete before the cut:
the end of the text is found from its structure (tracekit.jsontext), and a `truncated` diagnostic says where it
stopped. Gunzipping is bounded (text_limit). Entries that are not quite JSON (NaN, lone surrogates, bytes that are
not UTF-8) are repaired one by one, and the file's timed entries are screened for exact duplicates and times that
cannot be real (`screened`).

Speed comes from msgspec: entries decode into typed Structs with `args`, `ts` and `dur` kept as raw JSON text, so
the arguments stay byte-exact and timestamps are parsed from their decimal text without float rounding; columns
are transposed in C and stay in Arrow.

Reading a file needs no other file; ranks are applied afterwards (`rank_tables`), so files can be read in worker
processes. Every entry of `traceEvents` ends up as a row of some table or as a diagnostic with `dropped = true`
(the nothing-lost invariant).
"""

from __future__ import annotations

import gc
import os
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

from tracekit import schema
from tracekit.errors import InputError
from tracekit.read import jsontext

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
INT32_ARGS = ("device", "group_size")  # int32 columns of `events`
ARG_TYPES = {f.name: pa.string() if f.name in RAW_ARGS_FIELDS or str in get_args(f.type)
             else pa.list_(pa.int64()) if f.name in ("grid", "block")
             else pa.int32() if f.name in INT32_ARGS else pa.int64()
             for f in msgspec.structs.fields(Args)}
_ENTRIES = msgspec.json.Decoder(list[Entry])
_ARGS_LIST = msgspec.json.Decoder(list[Args | None], strict=False)
_ARGS_ONE = msgspec.json.Decoder(Args | None, strict=False)
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
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


@dataclass(frozen=True)
class ParsedFile:
    """A trace file split into its parts, nothing interpreted yet."""

    path: Path
    top: dict[str, msgspec.Raw]  # top-level keys other than traceEvents (empty for bare-list files)
    entries: bytes | msgspec.Raw  # the traceEvents JSON array (the `nodes` array of an Execution Trace)
    is_execution_trace: bool = False


def parse_file(path: Path) -> ParsedFile:
    return parse_text(path, read_bytes(path))


def empty_reason(path: Path, data: bytes) -> str:
    """What kind of empty a file with no JSON in it is."""
    try:
        size = path.stat().st_size
    except OSError:
        size = None
    if size == 0:
        return "empty file (0 bytes)"
    if not data:
        return "empty once gunzipped (0 bytes of JSON)"
    return "empty file (only white space)"


def parse_text(path: Path, data: bytes) -> ParsedFile:
    if not data.strip(JSON_SPACE):
        raise InputError(f"{path}: {empty_reason(path, data)}")
    start = data[:64].lstrip()[:1]
    try:
        if start == b"[":
            return ParsedFile(path, {}, data)
        top = _TOP.decode(data)
    except msgspec.ValidationError:
        raise InputError(f"{path}: JSON but not a trace (top level is neither an object nor a list)") from None
    except msgspec.DecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    except UnicodeDecodeError:  # in a top-level key
        raise InputError(f"{path}: not valid JSON (a top-level key is not UTF-8)") from None
    if "traceEvents" not in top:
        if "nodes" in top and "schema" in top:
            return ParsedFile(path, {k: v for k, v in top.items() if k != "nodes"}, top["nodes"], True)
        raise InputError(f"{path}: JSON but not a Kineto trace (no traceEvents)")
    return ParsedFile(path, {k: v for k, v in top.items() if k != "traceEvents"}, top["traceEvents"])


@dataclass(frozen=True)
class Repair:
    """An entry that needed its text repaired before it would decode."""

    index: int  # within the array decoded
    reason: str  # bad_utf8, non_finite_number, lone_surrogate
    pid: str | None


REPAIR_DETAILS = {
    "bad_utf8": "bytes that are not UTF-8 were replaced by U+FFFD",
    "non_finite_number": "NaN / Infinity (not JSON) were read as the strings \"NaN\" / \"Infinity\"",
    "lone_surrogate": "an unpaired UTF-16 surrogate escape was replaced by \\ufffd",
}


def decode_entries(path: Path, entries: bytes | msgspec.Raw
                   ) -> tuple[list[Entry | None], list[bytes] | None, list[Repair]]:
    """Decode every entry of a JSON array; an entry that is not an object becomes None. Where the fast decode
    fails, each entry is decoded alone (and repaired where needed): the raw texts and the repairs are returned."""
    if jsontext.valid_utf8(entries if isinstance(entries, bytes) else bytes(entries)):
        try:
            return _ENTRIES.decode(entries), None, []
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
    try:
        raws = [bytes(r) for r in _RAW_LIST.decode(entries)]
    except msgspec.ValidationError:
        raise InputError(f"{path}: traceEvents is not a list") from None
    except msgspec.DecodeError as exc:
        raws = jsontext.split_array(bytes(entries))
        if raws is None:
            raise InputError(f"{path}: not valid JSON ({exc})") from None
    decoded: list[Entry | None] = []
    repairs: list[Repair] = []
    for index, raw in enumerate(raws):
        entry, raws[index], reasons = _decoded_entry(path, raw)
        decoded.append(entry)
        repairs += [Repair(index, reason, None if entry is None else _pid_text(entry.pid)) for reason in reasons]
    return decoded, raws, repairs


def _decoded_entry(path: Path, raw: bytes) -> tuple[Entry | None, bytes, list[str]]:
    """One entry, its text (repaired where needed) and the repairs made."""
    reasons = []
    if not jsontext.valid_utf8(raw):
        raw = jsontext.utf8_repaired(raw)
        reasons.append("bad_utf8")
    while True:
        try:
            try:
                return _ENTRY.decode(raw), raw, reasons
            except msgspec.ValidationError:  # a field of another type, maybe not-quite-JSON further on
                return _lenient_entry(raw), raw, reasons
        except msgspec.DecodeError as exc:
            repaired, more = jsontext.repaired_json(raw)
            if not more or repaired == raw:
                raise InputError(f"{path}: not valid JSON ({exc})") from None
            raw, reasons = repaired, reasons + more


def _pid_text(pid) -> str | None:
    return None if pid is None else pid if isinstance(pid, str) else str(pid)


class RawEntry(msgspec.Struct, gc=False):
    """An entry's fields as JSON text: for an entry whose fields have unexpected types."""

    ph: msgspec.Raw = msgspec.Raw(b"")
    cat: msgspec.Raw = msgspec.Raw(b"")
    name: msgspec.Raw = msgspec.Raw(b"")
    pid: msgspec.Raw = msgspec.Raw(b"")
    tid: msgspec.Raw = msgspec.Raw(b"")
    ts: msgspec.Raw = msgspec.Raw(b"")
    dur: msgspec.Raw = msgspec.Raw(b"")
    id: msgspec.Raw = msgspec.Raw(b"")
    bp: msgspec.Raw = msgspec.Raw(b"")
    s: msgspec.Raw = msgspec.Raw(b"")
    args: msgspec.Raw = msgspec.Raw(b"")


_ENTRY = msgspec.json.Decoder(Entry)
_RAW_ENTRY = msgspec.json.Decoder(RawEntry)
_TEXT = msgspec.json.Decoder(str | None)
_ID = msgspec.json.Decoder(int | str | None)


def _lenient_entry(raw: bytes) -> Entry | None:
    """An entry whose fields have unexpected types: a field that should be text and is not becomes its JSON text;
    ts, dur and args stay as their exact text (the table columns say what they could not use). None when the entry
    is not a JSON object."""
    try:
        fields = _RAW_ENTRY.decode(raw)
    except msgspec.ValidationError:
        return None

    def text(value: msgspec.Raw, decoder=_TEXT):
        if not len(value):
            return None
        try:
            return decoder.decode(value)
        except msgspec.ValidationError:
            return bytes(value).decode()

    return Entry(
        ph=text(fields.ph), cat=text(fields.cat), name=text(fields.name), pid=text(fields.pid, _ID),
        tid=text(fields.tid, _ID), ts=fields.ts, dur=fields.dur, id=text(fields.id, _ID), bp=text(fields.bp),
        s=text(fields.s), args=fields.args,
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


RawArgs = msgspec.defstruct("RawArgs", [(f.name, msgspec.Raw, msgspec.field(name=f.encode_name, default=msgspec.Raw(b"")))
                                        for f in msgspec.structs.fields(Args)], gc=False)
_RAW_ARGS = msgspec.json.Decoder(RawArgs)
_ARG_DECODERS = {f.name: msgspec.json.Decoder(f.type, strict=False) for f in msgspec.structs.fields(Args)}


def _lenient_args(raw: msgspec.Raw) -> Args:
    """The args fields that fit their type; the others left null."""
    try:
        fields = _RAW_ARGS.decode(raw)
    except msgspec.ValidationError:
        return Args()
    typed = {}
    for name in ARGS_FIELDS:
        value = getattr(fields, name)
        if not len(value):
            continue
        if name in RAW_ARGS_FIELDS:
            typed[name] = value
            continue
        try:
            typed[name] = _ARG_DECODERS[name].decode(value)
        except msgspec.ValidationError:
            pass
    return Args(**typed)


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


class StreamCut(Exception):
    """The gzip stream ends before its end-of-stream marker: the file was cut (raised after the last block)."""


class NothingToSalvage(Exception):
    """The text stops before the first complete entry; args: the decompressed bytes read, whether the gzip stream
    was cut."""


# --------------------------------------------------------------------------- decompression, bounded

TEXT_LIMIT_VARIABLE = "TRACEKIT_MAX_TRACE_BYTES"
GZIP_RATIO_LIMIT = 100  # the shared real traces gunzip to 7-21× their size; a gzip bomb to 1000×
MIN_TEXT_LIMIT = 256 << 20  # a small file may still gunzip to this much
BYTE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def text_limit(compressed_bytes: int) -> int:
    """How many decompressed bytes a gzip file may give: TRACEKIT_MAX_TRACE_BYTES when set (bytes, or with a K, M,
    G or T suffix), else 100× the file's size and at least 256 MiB."""
    setting = os.environ.get(TEXT_LIMIT_VARIABLE, "").strip()
    if not setting:
        return max(GZIP_RATIO_LIMIT * compressed_bytes, MIN_TEXT_LIMIT)
    match = re.fullmatch(r"(\d+)\s*([KMGT]?)(?:i?B)?", setting, re.IGNORECASE)
    if not match:
        raise InputError(f"{TEXT_LIMIT_VARIABLE}={setting}: not a byte count (say 68719476736 or 64G)")
    return int(match.group(1)) * BYTE_UNITS[match.group(2).upper()]


def _too_large(path: Path, limit: int, compressed_bytes: int) -> InputError:
    if os.environ.get(TEXT_LIMIT_VARIABLE, "").strip():
        why = f"the limit {TEXT_LIMIT_VARIABLE} sets"
    else:
        why = (f"the limit for a {compressed_bytes:,}-byte file ({GZIP_RATIO_LIMIT}× its size, at least "
               f"{MIN_TEXT_LIMIT >> 20} MiB; real traces gunzip to 7-21×): it may be a gzip bomb")
    return InputError(f"{path}: gunzips to more than {limit:,} bytes, {why}; set {TEXT_LIMIT_VARIABLE} "
                      f"(e.g. {TEXT_LIMIT_VARIABLE}=64G) to read it")


def decompressed_blocks(path: Path, block_bytes: int) -> Iterator[bytes]:
    """The file's bytes in blocks of at most `block_bytes`, gunzipped when it is gzip (by magic number); for a
    cut gzip stream, StreamCut after the last block. At most `text_limit` bytes gunzipped (else InputError)."""
    try:
        fh = path.open("rb")
        size = path.stat().st_size
    except OSError:
        raise NotStreamable from None
    with fh:
        first = fh.read(READ_BYTES)
        if first[:2] != GZIP_MAGIC:
            while first:
                yield first
                first = fh.read(block_bytes)
            return
        limit = text_limit(size)
        total = 0
        for block in _gunzip(fh, first, block_bytes):
            total += len(block)
            if total > limit:
                raise _too_large(path, limit, size)
            yield block


def read_ahead(blocks: Iterator[bytes]) -> Iterator[bytes]:
    """The same blocks, the next one read in a thread meanwhile: gunzip releases the GIL, so it overlaps decoding.
    An exception the blocks raise is raised here, in turn."""
    with ThreadPoolExecutor(1) as reader:
        block = reader.submit(next, blocks, None)
        while (ready := block.result()) is not None:
            block = reader.submit(next, blocks, None)
            yield ready


def _gunzip(fh, data: bytes, block_bytes: int) -> Iterator[bytes]:
    inflater = zlib.decompressobj(wbits=31)
    while True:
        if inflater.eof:  # end of a gzip member: another one may follow, or zero padding
            data = inflater.unused_data or fh.read(READ_BYTES)
            if not data:
                return
            if data[:2] != GZIP_MAGIC and not data.strip(b"\0"):
                if any(block.strip(b"\0") for block in iter(lambda: fh.read(READ_BYTES), b"")):
                    raise NotStreamable("corrupt gzip data (bytes after the last member)")
                return
            inflater = zlib.decompressobj(wbits=31)
        elif not data:
            data = fh.read(READ_BYTES)
            if not data:
                rest = inflater.flush()
                if rest:
                    yield rest
                if not inflater.eof:
                    raise StreamCut
                return
        try:
            block = inflater.decompress(data, block_bytes)
        except zlib.error as exc:
            raise NotStreamable(f"corrupt gzip data ({exc})") from None
        if block:
            yield block
        data = inflater.unconsumed_tail


def read_text(path: Path) -> tuple[bytes, bool]:
    """The file's JSON bytes, gunzipped when it is gzip (by magic number, not by name), and whether the gzip stream
    was cut short."""
    if path.is_dir():
        raise InputError(f"{path}: is a directory")
    try:
        path.open("rb").close()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror})") from None
    blocks = []
    try:
        blocks.extend(decompressed_blocks(path, 64 << 20))
    except StreamCut:
        return b"".join(blocks), True
    except NotStreamable as exc:
        raise InputError(f"{path}: {exc or 'cannot be read'}") from None
    return b"".join(blocks), False


def read_bytes(path: Path) -> bytes:
    """The file's JSON bytes, gunzipped when it is gzip; a cut gzip stream is an error here."""
    data, cut = read_text(path)
    if cut:
        raise InputError(f"{path}: corrupt gzip data (the stream ends early: the file is cut)")
    return data


# --------------------------------------------------------------------------- cutting text into chunks


def trace_event_chunks(blocks: Iterator[bytes], chunk_bytes: int
                       ) -> Generator[bytes, None, tuple[dict[str, bytes], Cut | None]]:
    """Cut a trace's text into JSON arrays of consecutive `traceEvents` entries of about `chunk_bytes` each;
    returns the other top-level keys, and where the text stops if it was cut (the complete entries before a cut
    are yielded; NothingToSalvage if there are none)."""
    top, text, in_object, read = _split_header(blocks)
    pieces, size, wanted = [text], len(text), chunk_bytes
    gzip_cut = False
    try:
        for block in blocks:
            pieces.append(block)
            size += len(block)
            read += len(block)
            if size >= wanted:
                text = b"".join(pieces)
                begin = yield from _cut(text, len(text), chunk_bytes)
                pieces, size = [text[begin:]], len(text) - begin
                # No entry ended in all that text: look again once it has doubled (linear, not quadratic, time).
                wanted = chunk_bytes if begin else 2 * size
    except StreamCut:
        gzip_cut = True
    text = b"".join(pieces)
    del pieces
    end = _text_end(text, in_object, read, gzip_cut)
    begin = yield from _cut(text, end.entries_end, chunk_bytes)
    yield b"".join((b"[", memoryview(text)[begin:end.entries_end], b"]"))
    return {**top, **end.trailer}, end.cut


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


def _split_header(blocks: Iterator[bytes]) -> tuple[dict[str, bytes], bytes, bool, int]:
    """Read up to the '[' that opens the entries: (top-level keys before it, the text after it, top is an object,
    bytes read)."""
    text = b""
    try:
        for block in blocks:
            text += block
            start = LEADING_SPACE.match(text).end()
            first = text[start:start + 1]
            if first == b"[":
                return {}, text[start + 1:], False, len(text)
            if first not in (b"{", b""):
                raise NotStreamable
            for match in TRACE_EVENTS_KEY.finditer(text):
                if match.end() == len(text):  # the value has not arrived yet
                    break
                head = _header_keys(text[:match.start()])
                if head is None:  # not a top-level key
                    continue
                if text[match.end():match.end() + 1] != b"[":
                    raise NotStreamable
                return head, text[match.end() + 1:], True, len(text)
            if len(text) > HEADER_LIMIT:  # not a Kineto header (an Execution Trace, say)
                raise NotStreamable
    except StreamCut:
        raise NothingToSalvage(len(text), True) from None
    if text.strip(JSON_SPACE) and jsontext.value_state(text) == "cut":
        raise NothingToSalvage(len(text), False)
    raise NotStreamable


def _header_keys(head: bytes) -> dict[str, bytes] | None:
    """The top-level keys before traceEvents, if `head` is the start of an object up to a key."""
    for text in (head, jsontext.repaired_json(head)[0]):
        try:  # a top-level key only if the text before it is the start of an object
            keys = _TOP.decode(text + b'"traceEvents":null}')
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
            continue
        return {k: bytes(v) for k, v in keys.items() if k != "traceEvents"}
    return None


@dataclass(frozen=True)
class Cut:
    """Where the text of a cut file stops."""

    text_bytes: int  # decompressed bytes read: the text stops there
    partial: bytes  # the start of the entry the cut fell in (empty: it fell between or after entries)
    partial_at: int  # where that entry begins
    gzip_cut: bool  # the gzip stream ended early
    after_entries: bool  # the entries' array had closed: the cut fell in the top-level keys after it
    in_object: bool  # the entries are traceEvents of an object (not a bare list)
    zero_bytes: int  # zero bytes after the text (a crash or a full disk leaves them)


@dataclass(frozen=True)
class TextEnd:
    entries_end: int  # the entries are text[:entries_end]
    trailer: dict[str, bytes]  # top-level keys after the entries
    cut: Cut | None


def _text_end(text: bytes, in_object: bool, read: int, gzip_cut: bool) -> TextEnd:
    """In the last text (it starts between two entries), where the entries' array ends and the top-level keys after
    it; for a cut text, the complete entries. Found from the text's structure (brackets and commas outside
    strings), so keys after the array (TraceLens files put deviceProperties there) may hold anything."""
    body = text.rstrip(b"\0")
    zeros = len(text) - len(body)
    read -= zeros
    start = read - len(body)  # where `body` begins in the decompressed text
    if not gzip_cut and not zeros:
        complete = _complete_end(body, in_object)
        if complete is not None:
            return complete
    found = jsontext.structure(body)
    array_close = np.flatnonzero(found.depth == -1)
    if not len(array_close):  # the text stops inside the entries
        return _cut_in_entries(body, found, start, read, gzip_cut, in_object, zeros)
    close = int(found.positions[array_close[0]])
    if found.chars[array_close[0]] != ord("]"):
        raise NotStreamable
    if not in_object:
        if body[close + 1:].strip(JSON_SPACE):
            raise NotStreamable
        cut = Cut(read, b"", read, gzip_cut, True, in_object, zeros) if gzip_cut or zeros else None
        return TextEnd(close, {}, cut)
    object_close = np.flatnonzero(found.depth == -2)
    if len(object_close):
        end = int(found.positions[object_close[0]])
        if found.chars[object_close[0]] != ord("}") or body[end + 1:].strip(JSON_SPACE):
            raise NotStreamable
        trailer = _trailer(body[close + 1:end])
        if trailer is None:
            raise NotStreamable
        cut = Cut(read, b"", read, gzip_cut, True, in_object, zeros) if gzip_cut or zeros else None
        return TextEnd(close, trailer, cut)
    # Cut in the keys after the entries: keep those complete before the last comma between keys.
    keys_text = body[close + 1:]
    commas = found.at_depth(-1, b",") - (close + 1)
    last_comma = int(commas[commas >= 0].max()) if (commas >= 0).any() else 0
    trailer = _trailer(keys_text[:last_comma]) if last_comma else {}
    rest = keys_text[last_comma:].lstrip(JSON_SPACE + b",")
    if trailer is None or (rest and jsontext.value_state(b"{" + rest) != "cut"):
        raise NotStreamable
    return TextEnd(close, trailer, Cut(read, b"", read, gzip_cut, True, in_object, zeros))


_VALUE = msgspec.json.Decoder(msgspec.Raw)  # checks that a text is exactly one JSON value, building nothing


def _complete_end(body: bytes, in_object: bool) -> TextEnd | None:
    """The usual end, found fast: the entries' array closes at one of the last few ']', the keys after it decode,
    and the entries before it are one JSON array (a ']' in a key's string could pass the other checks). None
    otherwise: the structure scan decides."""
    close = len(body)
    for _ in range(8):
        close = body.rfind(b"]", max(0, len(body) - (1 << 20)), close)
        if close < 0:
            return None
        after = body[close + 1:].strip(JSON_SPACE)
        if not in_object:
            trailer = {} if not after else None
        elif after[-1:] == b"}":
            trailer = _trailer(after[:-1])
        else:
            continue
        if trailer is None:
            continue
        try:
            _VALUE.decode(b"".join((b"[", memoryview(body)[:close + 1])))
        except msgspec.DecodeError:
            continue
        return TextEnd(close, trailer, None)
    return None


def _trailer(keys: bytes) -> dict[str, bytes] | None:
    """The keys after the entries' array (the text from after its ']' up to the object's '}' or a comma between
    keys), or None if malformed (a trailing comma, or a second traceEvents: the whole-file path decides)."""
    keys = keys.strip(JSON_SPACE)
    if not keys:
        return {}
    if keys[:1] != b",":
        return None
    for text in (keys[1:], jsontext.repaired_json(keys[1:])[0]):
        try:
            trailer = _TOP.decode(b"{" + text + b"}")
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
            continue
        return {k: bytes(v) for k, v in trailer.items()} if trailer and "traceEvents" not in trailer else None
    return None


def _cut_in_entries(body: bytes, found: jsontext.Structure, start: int, read: int, gzip_cut: bool,
                    in_object: bool, zeros: int) -> TextEnd:
    """The text stops inside the entries: they end at the last entry that closed or the last comma between
    entries, whichever is later; what follows must be the start of an entry (else the file is malformed)."""
    if found.depth.size and found.depth.min() < 0:
        raise NotStreamable
    closed = found.at_depth(0, b"}]")
    commas = found.at_depth(0, b",")
    closed_end = int(closed[-1]) + 1 if len(closed) else 0
    comma = int(commas[-1]) if len(commas) else 0
    entries_end = max(closed_end, comma)
    partial_at = len(body) - len(body[entries_end:].lstrip(JSON_SPACE + b","))
    partial = body[partial_at:]
    if partial and jsontext.value_state(partial) == "malformed":
        raise NotStreamable
    return TextEnd(entries_end, {}, Cut(read, partial, start + partial_at, gzip_cut, False, in_object, zeros))


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
# Notes are ordered by group, then position.
ARGS_TYPE, BAD_TIMESTAMP, BAD_DURATION, MISSING_THREAD, REPAIRED, DROPPED, DUPLICATE, TRUNCATED = range(8)


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

    def with_cut(self, cut: Cut) -> EntryTables:
        """These entries of a cut file: the entry cut short counts as read, and is dropped with the `truncated`
        note."""
        return EntryTables(self.entry_count + bool(cut.partial), self.events, self.instants, self.flows,
                           self.metadata, pa.concat_tables([self.notes, cut_note(cut, self.entry_count)]))


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
    entries, raws, repairs = decode_entries(path, text)
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
    return EntryTables(n, events, instants, flows, metadata,
                       _notes(events, instants, flows, arg_problems, dropped, repairs, first_id))


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
             else raw_text(arg_cols[f]) if f in RAW_ARGS_FIELDS else _int_column(f, arg_cols[f], problems)
             for f in ARGS_FIELDS}
    typed["external_id"] = pc.coalesce(typed.pop("external_id"), typed.pop("external_id_legacy"))
    typed["input_dims"] = pc.coalesce(typed.pop("input_dims"), typed.pop("input_dims_legacy"))
    typed["args_rank"] = _rank_column(typed.pop("rank"), problems)
    typed["kind"] = kinds(x.column("cat").combine_chunks())
    return pa.table({**dict(zip(x.column_names, x.columns)), **typed}), sorted(problems)


ARG_JSON_NAMES = {f.name: f.encode_name for f in msgspec.structs.fields(Args)}


def _int_column(field: str, values: tuple, problems: list[tuple[int, str]]) -> pa.Array:
    """An integer (or integer list, or text) args column; integers beyond its type become null, each noted."""
    type_ = ARG_TYPES[field]
    try:
        return pa.array(values, type=type_)
    except (OverflowError, pa.ArrowInvalid, pa.ArrowTypeError):
        pass

    bits = type_.value_type.bit_width if pa.types.is_list(type_) else type_.bit_width
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def fits(v) -> bool:
        return all(low <= i <= high for i in v) if isinstance(v, list) else low <= v <= high

    kept = [v if v is None or fits(v) else None for v in values]
    problems += [(row, f"args.{ARG_JSON_NAMES[field]} is beyond the int{bits} range")
                 for row, (v, k) in enumerate(zip(values, kept)) if v is not None and k is None]
    return pa.array(kept, type=type_)


RANK_LIMIT = 2**31  # ranks are int32


def _rank_column(ranks: pa.Array, problems: list[tuple[int, str]]) -> pa.Array:
    """`args.rank`, where it can be a rank (0 ≤ rank < 2^31); other values become null, each noted."""
    if ranks.null_count == len(ranks):
        return ranks
    bad = pc.fill_null(pc.or_(pc.less(ranks, 0), pc.greater_equal(ranks, RANK_LIMIT)), False)
    if not pc.any(bad).as_py():
        return ranks
    rows = np.flatnonzero(bad.to_numpy(zero_copy_only=False))
    problems += [(int(row), f"args.rank {ranks[int(row)]} is not a rank (0 to 2^31-1)") for row in rows]
    return pc.if_else(bad, pa.nulls(len(ranks), ranks.type), ranks)


def null_array(type_: pa.DataType, n: int, zeros: pa.Buffer) -> pa.Array:
    """n nulls of a primitive, string or list type, every buffer a view of one shared zero-filled buffer: the many
    args columns a chunk never fills cost nothing each."""
    if pa.types.is_list(type_):
        return pa.Array.from_buffers(type_, n, [zeros, zeros], null_count=n, children=[pa.array([], type_.value_type)])
    if pa.types.is_string(type_):
        return pa.Array.from_buffers(type_, n, [zeros, zeros, zeros.slice(0, 0)], null_count=n)
    return pa.Array.from_buffers(type_, n, [zeros, zeros], null_count=n)


def _notes(events: pa.Table, instants: pa.Table, flows: pa.Table, arg_problems: list[tuple[int, str]],
           dropped: pl.DataFrame | None, repairs: list[Repair], first_id: int) -> pa.Table:
    """Diagnostics of these entries, ranks still to come."""
    timed = (events, instants, flows)
    if (not arg_problems and dropped is None and not repairs and not any(t.column("ts").null_count for t in timed)
            and not any(events.column(c).null_count for c in ("dur", "pid", "tid"))):
        return NOTES_SCHEMA.empty_table()
    columns = ["id", "pid", "args_rank"]
    rows = [r for r, _ in arg_problems]
    arg_notes = pl.from_arrow(events.select(columns).take(pa.array(rows, pa.int64()))).select(
        group=pl.lit(ARGS_TYPE, dtype=pl.Int8), position="id", pid="pid", args_rank="args_rank",
        reason=pl.lit("args_type"),
        detail=pl.Series([f"an args field has an unexpected type and was left null: {p}" for _, p in arg_problems],
                         dtype=pl.String))

    def noted(table: pa.Table, mask: pa.Array, group: int, reason: str, detail: str) -> pl.DataFrame:
        picked = table.filter(mask)
        args_rank = picked.column("args_rank") if "args_rank" in picked.column_names else pa.nulls(len(picked))
        return pl.from_arrow(picked.select(["id", "pid"])).select(
            group=pl.lit(group, dtype=pl.Int8), position="id", pid="pid",
            args_rank=pl.from_arrow(args_rank).cast(pl.Int64), reason=pl.lit(reason), detail=pl.lit(detail))

    no_thread = pc.or_(pc.is_null(events.column("pid")), pc.is_null(events.column("tid")))
    notes = pl.concat([
        arg_notes,
        *(noted(t, pc.is_null(t.column("ts")), BAD_TIMESTAMP, "bad_timestamp",
                f"ts is missing, not a number or beyond int64 ns; the {what} is kept with a null ts")
          for t, what in zip(timed, ("event", "instant", "flow endpoint"))),
        noted(events, pc.is_null(events.column("dur")), BAD_DURATION, "bad_duration",
              "dur is missing, not a number or beyond int64 ns; the event is kept with a null dur"),
        noted(events, no_thread, MISSING_THREAD, "missing_pid_tid",
              "pid or tid is missing; the event is kept with a null pid / tid"),
        pl.DataFrame({"group": [REPAIRED] * len(repairs), "position": [first_id + r.index for r in repairs],
                      "pid": [r.pid for r in repairs], "args_rank": [None] * len(repairs),
                      "reason": [r.reason for r in repairs], "detail": [REPAIR_DETAILS[r.reason] for r in repairs]},
                     schema={"group": pl.Int8, "position": pl.Int64, "pid": pl.String, "args_rank": pl.Int64,
                             "reason": pl.String, "detail": pl.String}),
    ]).with_columns(dropped=pl.lit(False), raw=pl.lit(None, pl.String))
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
    """Read one trace file, streaming it in chunks; whole when streaming meets anything unusual. A cut file gives
    the entries complete before the cut (and a `truncated` note); then duplicates and impossible times are
    screened out (`screened`)."""
    with gc_paused():
        try:
            parts = _read_streamed(path, chunk_bytes)
        except NotStreamable:
            parts = _read_whole(path)
        return parts if parts.is_execution_trace else screened(parts)


def _read_streamed(path: Path, chunk_bytes: int) -> TraceParts:
    blocks = read_ahead(decompressed_blocks(path, max(chunk_bytes, MIN_BLOCK_BYTES)))
    return _read_chunks(path, blocks, chunk_bytes)


def _read_whole(path: Path) -> TraceParts:
    """The whole-file path: decode the document at once. A cut file (or one that does not decode) is then read as
    one chunk, which keeps the entries before a cut; failing that, the decoder's error is the user's."""
    data, gzip_cut = read_text(path)
    try:
        parsed = parse_text(path, data)
    except InputError as error:
        failure = error
    else:
        if not gzip_cut:
            top = {k: bytes(v) for k, v in parsed.top.items()}
            if parsed.is_execution_trace:
                return TraceParts(path, top, None)
            return TraceParts(path, top, entry_tables(path, parsed.entries, 0))
        failure = InputError(f"{path}: corrupt gzip data (the stream ends early: the file is cut)")
    try:
        return _read_chunks(path, _replayed(data, gzip_cut), len(data) + 1)
    except NotStreamable:
        raise failure from None


def _replayed(data: bytes, gzip_cut: bool) -> Iterator[bytes]:
    yield data
    if gzip_cut:
        raise StreamCut


def _read_chunks(path: Path, blocks: Iterator[bytes], chunk_bytes: int) -> TraceParts:
    chunks = trace_event_chunks(blocks, chunk_bytes)
    parts: list[EntryTables] = []
    first_id = 0
    while True:
        try:
            chunk = next(chunks)
        except StopIteration as done:
            top, cut = done.value
            break
        except NothingToSalvage as nothing:
            raise _nothing_to_salvage(path, *nothing.args) from None
        try:
            part = entry_tables(path, chunk, first_id)
        except InputError:  # a chunk that is not valid JSON: let the whole-file path say what is wrong with the file
            raise NotStreamable from None
        parts.append(part)
        first_id += part.entry_count
    entries = EntryTables.concat(parts)
    if cut is None:
        return TraceParts(path, top, entries)
    if not entries.entry_count:
        raise _nothing_to_salvage(path, cut.text_bytes, cut.gzip_cut)
    return TraceParts(path, top, entries.with_cut(cut))


def _nothing_to_salvage(path: Path, text_bytes: int, gzip_cut: bool) -> InputError:
    if gzip_cut and not text_bytes:
        return InputError(f"{path}: corrupt gzip data (the stream ends before any text: the file is cut)")
    return InputError(f"{path}: truncated at byte {text_bytes} (of the decompressed text) before the first complete "
                      f"trace entry: nothing to salvage" + ("; the gzip stream ends early" if gzip_cut else ""))


RAW_LIMIT = 1 << 16  # characters of a cut entry kept in its diagnostic


def cut_note(cut: Cut, complete: int) -> pa.Table:
    """The `truncated` diagnostic of a cut file (NOTES_SCHEMA): the CLI's warning line is its detail."""
    detail = f"truncated at byte {cut.text_bytes} (of the decompressed text); {complete} complete entries recovered"
    if cut.partial:
        detail += f"; the entry cut short (from byte {cut.partial_at}) is dropped"
    elif cut.after_entries:
        detail += "; the cut falls after the last entry" + (", in the top-level keys that follow the entries"
                                                              if cut.in_object else "")
    else:
        detail += "; the cut falls between two entries"
    if cut.in_object and not cut.after_entries:
        detail += "; top-level keys written after traceEvents (if any) are lost"
    if cut.zero_bytes:
        detail += f"; {cut.zero_bytes} zero bytes follow the text (as a crash or a full disk leaves)"
    if cut.gzip_cut:
        detail += "; the gzip stream ends early"
    return pa.table({
        "group": pa.array([TRUNCATED], pa.int8()), "position": pa.array([complete if cut.partial else None], pa.int64()),
        "pid": pa.nulls(1, pa.string()), "args_rank": pa.nulls(1, pa.int64()), "reason": ["truncated"],
        "detail": [detail], "dropped": [bool(cut.partial)],
        "raw": [cut.partial[:RAW_LIMIT].decode(errors="replace") if cut.partial else None],
    }, schema=NOTES_SCHEMA)


# --------------------------------------------------------------------------- screening a file's entries

GPU_OP_KINDS = ("kernel", "memcpy", "memset")
MAX_DURATION_NS = 86_400 * 10**9  # one day: longer than any profiler window (the shared traces' longest event: 43 s)
# A GPU op ending this long after the next op on its stream (stream work runs in order) has a corrupt dur (TraceLens
# #669: ROCm completions flushed late, ms to s; legitimate overlaps, programmatic dependent launch, are µs: 3.7 µs
# at most in the shared traces).
STREAM_OVERRUN_NS = 100_000
TS_RANGE_NS = (-(2**61), 2**62)  # ±73 / 146 years around the epoch: sums and differences stay within int64
EVENT_KEY = ["cat", "name", "pid", "tid", "ts", "dur", "args"]
INSTANT_KEY = ["cat", "name", "pid", "tid", "ts", "scope", "args"]
FLOW_KEY = ["phase", "cat", "name", "pid", "tid", "ts", "binding_point", "flow_id", "args"]


def screened(parts: TraceParts) -> TraceParts:
    """The file's timed entries with exact duplicates dropped (the first kept), and timestamps and durations that
    cannot be real nulled: out-of-range timestamps, negative durations, durations over a day, and GPU ops that run
    past the start of the next op on their stream by more than STREAM_OVERRUN_NS. Each is a diagnostic."""
    entries = parts.entries
    base = base_time_ns(parts)
    tables, duplicates, other_notes = {}, [], []
    for name, key in (("events", EVENT_KEY), ("instants", INSTANT_KEY), ("flows", FLOW_KEY)):
        table, dropped = _without_duplicates(getattr(entries, name), key)
        tables[name], out_of_range = _timestamps_in_range(table, base, name)
        duplicates.append(dropped)
        other_notes.append(out_of_range)
    tables["events"], bad_durations = _possible_durations(tables["events"])
    other_notes.append(bad_durations)
    if "baseTimeNanoseconds" in parts.top and base != _top_value(parts, "baseTimeNanoseconds"):
        other_notes.append(_file_note(BAD_TIMESTAMP, "bad_base_time", "baseTimeNanoseconds "
                                      f"{_top_json(parts, 'baseTimeNanoseconds')[:100]} is not an integer within "
                                      "±2^62 ns; timestamps are read without it"))
    if not any(n.num_rows for n in duplicates + other_notes):
        return parts
    dropped_positions = pa.concat_tables(duplicates).column("position")
    notes = entries.notes.filter(pc.invert(pc.is_in(entries.notes.column("position"), dropped_positions)))
    screened_entries = EntryTables(entries.entry_count, tables["events"], tables["instants"], tables["flows"],
                                   entries.metadata, pa.concat_tables([notes, *duplicates, *other_notes]))
    return TraceParts(parts.path, parts.top, screened_entries)


def _without_duplicates(table: pa.Table, key: list[str]) -> tuple[pa.Table, pa.Table]:
    """The table without rows identical in every column read from the entry but the position (timed rows only),
    and their notes."""
    if table.num_rows < 2:
        return table, NOTES_SCHEMA.empty_table()
    candidates = _same_times(table, ["ts", "dur"] if "dur" in key else ["ts"], ["name", "args"])
    if not candidates.any():
        return table, NOTES_SCHEMA.empty_table()
    rows = np.flatnonzero(candidates)
    extra = ["args_rank"] if "args_rank" in table.column_names else []
    # filter, not take: take would first join the chunks of every column (the args text: the bulk of the file)
    same = pl.from_arrow(table.select(["id", *key, *extra]).filter(pa.array(candidates))).with_row_index(
        "row").with_columns(first=pl.col("id").min().over(key)).filter(pl.col("id") != pl.col("first"))
    if not same.height:
        return table, NOTES_SCHEMA.empty_table()
    drop = np.zeros(table.num_rows, dtype=bool)
    drop[rows[same["row"].to_numpy()]] = True
    notes = same.select(
        group=pl.lit(DUPLICATE, dtype=pl.Int8), position="id", pid="pid",
        args_rank=pl.col("args_rank") if extra else pl.lit(None, dtype=pl.Int64), reason=pl.lit("duplicate_entry"),
        detail=pl.format("identical to entry {} (kept): a duplicate is dropped", "first"), dropped=pl.lit(True),
        raw=pl.lit(None, dtype=pl.String))
    return table.filter(pa.array(~drop)), notes.to_arrow().cast(NOTES_SCHEMA)


def _same_times(table: pa.Table, columns: list[str], texts: list[str]) -> np.ndarray:
    """Rows whose times (none null) and lengths of `texts` hash like another row's: the only rows that can be
    duplicates. By sorting a hash in numpy: a fraction of the memory a hash table over the columns takes."""
    valid = np.ones(table.num_rows, dtype=bool)
    hashed = np.zeros(table.num_rows, dtype=np.int64)
    for column in columns:
        values = table.column(column)
        valid &= ~values.is_null().to_numpy(zero_copy_only=False)
        hashed = hashed * np.int64(1_000_003) ^ pc.fill_null(values, 0).to_numpy()  # wraps: a hash
    for column in texts:
        lengths = pc.fill_null(pc.binary_length(table.column(column)), -1).cast(pa.int64())
        hashed = hashed * np.int64(1_000_003) ^ lengths.to_numpy()
    order = np.argsort(hashed)
    repeated = np.flatnonzero(hashed[order[1:]] == hashed[order[:-1]])
    same = np.zeros(table.num_rows, dtype=bool)
    same[order[repeated]] = same[order[repeated + 1]] = True
    return same & valid


def _timestamps_in_range(table: pa.Table, base: int, name: str) -> tuple[pa.Table, pa.Table]:
    """ts nulled where it would lie outside TS_RANGE_NS once baseTimeNanoseconds is added; notes for those."""
    low = max(TS_RANGE_NS[0] - base, -INT64_MAX - 1)
    high = min(TS_RANGE_NS[1] - base, INT64_MAX)
    ts = table.column("ts")
    outside = pc.fill_null(pc.or_(pc.less(ts, low), pc.greater(ts, high)), False)
    if not pc.any(outside).as_py():
        return table, NOTES_SCHEMA.empty_table()
    what = {"events": "event", "instants": "instant", "flows": "flow endpoint"}[name]
    notes = _row_notes(table.filter(outside), BAD_TIMESTAMP, "bad_timestamp", pl.format(
        "ts {} ns (baseTimeNanoseconds not added) is out of range (more than 2^61 ns before or 2^62 ns after the "
        "epoch); the {} is kept with a null ts", pl.col("ts"), pl.lit(what)))
    return table.set_column(table.column_names.index("ts"), "ts", pc.if_else(outside, pa.scalar(None, pa.int64()), ts)), notes


def _possible_durations(events: pa.Table) -> tuple[pa.Table, pa.Table]:
    """dur nulled where negative, over MAX_DURATION_NS, or running over the next GPU op on its stream; notes."""
    dur = events.column("dur")
    impossible = pc.fill_null(pc.or_(pc.less(dur, 0), pc.greater(dur, MAX_DURATION_NS)), False)
    notes = []
    if pc.any(impossible).as_py():
        notes.append(_row_notes(events.filter(impossible), BAD_DURATION, "bad_duration", pl.format(
            "dur {} ns is {}; the event is kept with a null dur", pl.col("dur"),
            pl.when(pl.col("dur") < 0).then(pl.lit("negative")).otherwise(pl.lit("longer than a day")))))
        dur = pc.if_else(impossible, pa.scalar(None, pa.int64()), dur)
    timed_gpu_op = pc.and_(pc.is_in(events.column("kind"), pa.array(GPU_OP_KINDS)),
                           pc.and_(pc.is_valid(events.column("ts")), pc.is_valid(dur)))
    rows = np.flatnonzero(timed_gpu_op.to_numpy(zero_copy_only=False))
    gpu = pl.from_arrow(events.select(["id", "args_rank", "pid", "tid", "ts"]).filter(timed_gpu_op)).with_columns(
        dur=pl.from_arrow(pc.filter(dur, timed_gpu_op)), row=pl.Series(rows)
    ).sort(["args_rank", "pid", "tid", "ts", "id"], nulls_last=True)
    stream = ["args_rank", "pid", "tid"]
    overrun = gpu.with_columns(
        next_ts=pl.col("ts").shift(-1), next_id=pl.col("id").shift(-1),
        same_stream=pl.all_horizontal(pl.col(c).eq_missing(pl.col(c).shift(-1)) for c in stream),
    ).filter(pl.col("same_stream") & (pl.col("ts") + pl.col("dur") - pl.col("next_ts") > STREAM_OVERRUN_NS))
    if overrun.height:
        over = np.zeros(events.num_rows, dtype=bool)
        over[overrun["row"].to_numpy()] = True
        notes.append(_row_notes(events.filter(pa.array(over)).set_column(
            events.column_names.index("dur"), "dur", pc.filter(dur, pa.array(over))), BAD_DURATION, "bad_duration",
            pl.format("dur {} ns runs {} ns past the start of the next op on its stream, entry {} (work on a stream "
                      "runs in order: a corrupt dur); the event is kept with a null dur", pl.col("dur"),
                      pl.col("overrun"), pl.col("next_id")),
            extra=overrun.select("id", overrun=pl.col("ts") + pl.col("dur") - pl.col("next_ts"), next_id="next_id")))
        dur = pc.if_else(pa.array(over), pa.scalar(None, pa.int64()), dur)
    if not notes:
        return events, NOTES_SCHEMA.empty_table()
    return events.set_column(events.column_names.index("dur"), "dur", dur), pa.concat_tables(notes)


def _file_note(group: int, reason: str, detail: str) -> pa.Table:
    return pa.table({"group": pa.array([group], pa.int8()), "position": pa.nulls(1, pa.int64()),
                     "pid": pa.nulls(1, pa.string()), "args_rank": pa.nulls(1, pa.int64()), "reason": [reason],
                     "detail": [detail], "dropped": [False], "raw": pa.nulls(1, pa.string())}, schema=NOTES_SCHEMA)


def _row_notes(rows: pa.Table, group: int, reason: str, detail: pl.Expr, extra: pl.DataFrame | None = None
               ) -> pa.Table:
    """Notes (NOTES_SCHEMA) on these rows of a timed table: kept rows, so not dropped."""
    frame = pl.from_arrow(rows.select([c for c in ("id", "pid", "args_rank", "ts", "dur") if c in rows.column_names]))
    if extra is not None:
        frame = frame.join(extra, on="id", how="left")
    return frame.select(
        group=pl.lit(group, dtype=pl.Int8), position="id", pid="pid",
        args_rank=pl.col("args_rank") if "args_rank" in frame.columns else pl.lit(None, dtype=pl.Int64),
        reason=pl.lit(reason), detail=detail, dropped=pl.lit(False), raw=pl.lit(None, dtype=pl.String),
    ).to_arrow().cast(NOTES_SCHEMA)


def _top_json(parts: TraceParts, key: str) -> str | None:
    raw = parts.top.get(key)
    return raw.decode(errors="replace") if raw is not None else None


def _top_value(parts: TraceParts, key: str):
    raw = parts.top.get(key)
    if raw is None:
        return None
    try:
        return _ANY.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
        return None


BASE_TIME_LIMIT = 2**62


def base_time_ns(parts: TraceParts) -> int:
    """`baseTimeNanoseconds`, or 0 when absent (or not an integer within ±2^62, which no clock gives)."""
    base = _top_value(parts, "baseTimeNanoseconds")
    return base if isinstance(base, int) and not isinstance(base, bool) and abs(base) <= BASE_TIME_LIMIT else 0


def file_rank(path: Path, parts: TraceParts, rank_option: int | None) -> tuple[int | None, str]:
    """The rank of a whole file (per-event `args.rank` may still override it in merged files)."""
    if rank_option is not None:
        return rank_option, "option"
    info = _top_value(parts, "distributedInfo")
    if isinstance(info, dict) and is_rank(info.get("rank")):
        return info["rank"], "distributedInfo"
    match = RANK_FILE_PATTERN.search(path.name)
    if match:
        return int(match.group(1)), "file_name"
    return None, "file_order"


def is_rank(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < RANK_LIMIT


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

    base_ns = base_time_ns(parts)

    def shifted(table: pa.Table) -> pa.Table:
        if not base_ns:
            return table
        return table.set_column(table.column_names.index("ts"), "ts", pc.add(table.column("ts"), base_ns))

    events = with_rank(shifted(entries.events), "events")
    notes = entries.notes.sort_by([("group", "ascending"), ("position", "ascending")])
    notes = with_rank(notes, "").append_column("source_file", pa.repeat(pa.scalar(source), notes.num_rows)) \
        .append_column("stage", pa.repeat(pa.scalar("ingest"), notes.num_rows))
    threads, processes, problems = _metadata_tables(with_rank(entries.metadata, ""))
    if problems:
        entry, ranks, pids, details = zip(*problems)
        notes = pa.concat_tables([notes, pa.table({
            "group": pa.repeat(pa.scalar(ARGS_TYPE, pa.int8()), len(problems)), "position": pa.array(entry, pa.int64()),
            "pid": pa.array(pids, pa.string()), "args_rank": pa.nulls(len(problems), pa.int64()),
            "reason": pa.repeat(pa.scalar("args_type"), len(problems)), "detail": pa.array(details, pa.string()),
            "dropped": pa.repeat(pa.scalar(False), len(problems)), "raw": pa.nulls(len(problems), pa.string()),
            "rank": pa.array(ranks, pa.int32()), "source_file": pa.repeat(pa.scalar(source), len(problems)),
            "stage": pa.repeat(pa.scalar("ingest"), len(problems))}, schema=notes.schema)])
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


_METADATA_ARGS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_INT64 = msgspec.json.Decoder(int)
_STR = msgspec.json.Decoder(str)


def _metadata_tables(meta: pa.Table) -> tuple[pa.Table, pa.Table, list[tuple[int, int, str, str]]]:
    """`ph: M` entries tracekit keeps → threads and processes (one row per thread / process), and problems with
    their values: (entry, rank, pid, detail). A name that is not a string is kept as its JSON text; a sort index
    that is not an integer becomes null."""
    records = {"threads": {}, "processes": {}}
    problems = []
    for entry, name, r, pid, tid, args in zip(*(meta.column(c).to_pylist()
                                                 for c in ("id", "name", "rank", "pid", "tid", "args"))):
        table, column, key = METADATA_KEYS[name]
        value, problem = _metadata_value(args, key, integer=column == "sort_index")
        if problem:
            problems.append((entry, r, pid, f"{name}: {problem}; left null"))
        row_key = (r, pid, tid) if table == "threads" else (r, pid)
        row = records[table].setdefault(row_key, dict(zip(schema.TABLES[table].key, row_key), source_entries=0))
        row[column] = value
        row["source_entries"] += 1
    threads, processes = (
        pa.Table.from_pylist(list(records[t].values()), schema=schema.TABLES[t].arrow_schema)
        for t in ("threads", "processes")
    )
    return threads, processes, problems


def _metadata_value(args: str | None, key: str, integer: bool) -> tuple[str | int | None, str | None]:
    """A metadata entry's args[key] as the column wants it, or (None, the problem)."""
    try:
        raw = _METADATA_ARGS.decode(args).get(key) if args else None
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None, "args is not a JSON object"
    if raw is None:
        return None, None
    if not integer:
        try:
            return _STR.decode(raw), None
        except msgspec.ValidationError:
            return bytes(raw).decode(), None  # not a string: its JSON text
    try:
        value = _INT64.decode(raw)
    except msgspec.ValidationError:
        return None, f"args.{key} {bytes(raw).decode()[:40]} is not an integer"
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        return None, f"args.{key} {value} is beyond the int64 range"
    return value, None


TOP_LEVEL_COLUMNS = ("traceEvents", "deviceProperties", "distributedInfo", "baseTimeNanoseconds", "schemaVersion")


def _ranks_table(parts: TraceParts, source: str, rank: int, rank_source: str, n: int, events: pa.Table) -> pa.Table:
    info = _top_value(parts, "distributedInfo")
    info = info if isinstance(info, dict) else {}
    devices = _top_value(parts, "deviceProperties")
    rest = [(k, v) for k, v in parts.top.items() if k not in TOP_LEVEL_COLUMNS]
    metadata = "{" + ",".join(msgspec.json.encode(k).decode() + ":" + v.decode() for k, v in rest) + "}"
    gpu = pl.from_arrow(events.select(["rank", "kind", "device"])).filter(
        pl.col("kind").is_in(list(schema.GPU_KINDS)) & pl.col("device").is_not_null())
    ranks = pl.from_arrow(events.column("rank")).unique().sort().to_list() or [rank]  # no events: the file's rank
    rows = []
    for r in ranks:
        used = gpu.filter(pl.col("rank").eq_missing(r))["device"].mode().sort().to_list()
        rows.append(dict(
            rank=r, source_file=source, rank_source="event_args" if len(ranks) > 1 else rank_source,
            world_size=info.get("world_size") if is_rank(info.get("world_size")) else None,
            backend=info.get("backend") if isinstance(info.get("backend"), str) else None,
            pg_config=msgspec.json.encode(info["pg_config"]).decode() if "pg_config" in info else None,
            device_name=_device_name(devices, used[0] if used else None),
            device_properties=_top_json(parts, "deviceProperties"),
            base_time_ns=base_time_ns(parts),
            schema_version=str(v) if (v := _top_value(parts, "schemaVersion")) is not None else None,
            trace_metadata=metadata, trace_entries=n,
        ))
    return pa.Table.from_pylist(rows, schema=schema.RANKS.arrow_schema)


def _device_name(devices, device: int | None) -> str | None:
    if not isinstance(devices, list):
        return None
    named = [d for d in devices if isinstance(d, dict) and isinstance(d.get("name"), str)]
    for d in named:
        if device is not None and d.get("id") == device:
            return d["name"]
    return named[0]["name"] if named else None
