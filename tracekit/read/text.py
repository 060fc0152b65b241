"""A trace file's text: gunzipped within bounds, cut into chunks of whole `traceEvents` entries, and, for a file cut
short, where its text stops.

A file is read as a stream: gunzipped block by block and cut into chunks of whole entries, so the decompressed text
is never held at once. A cut is trusted only because the chunk then decodes as one JSON array: a cut anywhere but
between two entries makes it invalid JSON. Anything unusual raises NotStreamable, and the whole-file path
(`parse_text`) reads the file instead, which also words every error.

A file that stops early (a killed job, a full disk, a cut gzip stream) keeps every entry complete before the cut:
the end of the text is found from its structure (tracekit.read.jsontext), and a `Cut` says where it stopped.
Gunzipping is bounded (text_limit).
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import msgspec
import numpy as np

from tracekit import storage
from tracekit.errors import InputError
from tracekit.read import jsontext
from tracekit.storage import GZIP_MAGIC, Location

# The gzip inflater: zlib-ng's gives zlib's bytes, errors and cut-stream ends (tests/read/test_inflating.py) in 34-43%
# of its time (OWLv2's 52 MB: 87 -> 37 ms; bench/RESULTS.md); the standard library's where it is not installed (PyPy)
try:
    from zlib_ng import zlib_ng as inflating
except ImportError:
    import zlib as inflating

_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])


@dataclass(frozen=True)
class ParsedFile:
    """A trace file split into its parts, nothing interpreted yet."""

    path: Location  # a local path or a URL (tracekit.storage)
    top: dict[str, msgspec.Raw]  # top-level keys other than traceEvents (empty for bare-list files)
    entries: bytes | msgspec.Raw  # the traceEvents JSON array (the `nodes` array of an Execution Trace)
    is_execution_trace: bool = False


def parse_file(path: Location) -> ParsedFile:
    return parse_text(path, read_bytes(path))


def empty_reason(path: Location, data: bytes) -> str:
    """What kind of empty a file with no JSON in it is."""
    try:
        size = storage.size(path)
    except OSError:
        size = None
    if size == 0:
        return "empty file (0 bytes)"
    if not data:
        return "empty once gunzipped (0 bytes of JSON)"
    return "empty file (only white space)"


def parse_text(path: Location, data: bytes) -> ParsedFile:
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


# --------------------------------------------------------------------------- streaming

CHUNK_BYTES = 1 << 20  # decompressed JSON decoded per step: bounds the working set (1 MiB: as fast as 2, ~15 MB less)
READ_BYTES = 1 << 20  # compressed bytes read per step
MIN_BLOCK_BYTES = 64 << 10  # decompressed bytes per step, when chunks are smaller (tests)
HEADER_LIMIT = 64 << 20  # top-level keys before traceEvents are small: past this, stop looking
JSON_SPACE = b" \t\r\n"
LEADING_SPACE = re.compile(rb"[ \t\r\n]*")
# the keys the header is read up to: traceEvents (a Kineto trace's entries) and nodes (an Execution Trace's); one
# followed by blanks up to the text's end (\Z) waits for more text; a key's name is not cut where these start
HEADER_KEYS = re.compile(rb'"(traceEvents|nodes)"[ \t\r\n]*(?::[ \t\r\n]*|\Z)')
HEADER_KEY_BYTES = len(b'"traceEvents"')


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


def _too_large(path: Location, limit: int, compressed_bytes: int) -> InputError:
    if os.environ.get(TEXT_LIMIT_VARIABLE, "").strip():
        why = f"the limit {TEXT_LIMIT_VARIABLE} sets"
    else:
        why = (f"the limit for a {compressed_bytes:,}-byte file ({GZIP_RATIO_LIMIT}× its size, at least "
               f"{MIN_TEXT_LIMIT >> 20} MiB; real traces gunzip to 7-21×): it may be a gzip bomb")
    return InputError(f"{path}: gunzips to more than {limit:,} bytes, {why}; set {TEXT_LIMIT_VARIABLE} "
                      f"(e.g. {TEXT_LIMIT_VARIABLE}=64G) to read it")


def decompressed_blocks(path: Location, block_bytes: int) -> Iterator[bytes]:
    """The file's bytes in blocks of at most `block_bytes`, gunzipped when it is gzip (by magic number); for a
    cut gzip stream, StreamCut after the last block. At most `text_limit` bytes gunzipped (else InputError)."""
    try:
        fh = storage.open_binary(path)
        size = storage.size(path)
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


def text_chunks(path: Location, chunk_bytes: int) -> Generator[bytes, None, tuple[dict[str, bytes], Cut | None]]:
    """A file's text streamed in chunks (`trace_event_chunks`), gunzipped in a thread meanwhile: the cuts the
    reader makes, and a head start's helper (tracekit/read/chunk_workers.py) makes the same."""
    return trace_event_chunks(read_ahead(decompressed_blocks(path, max(chunk_bytes, MIN_BLOCK_BYTES))), chunk_bytes)


def read_ahead(blocks: Iterator[bytes]) -> Iterator[bytes]:
    """The same blocks, the next one read in a thread meanwhile: gunzip releases the GIL, so it overlaps decoding.
    An exception the blocks raise is raised here, in turn.

    Left unfinished (a bad file), this generator ends without waiting for its thread, which ends by itself after the
    block it is reading: the garbage collector may close it in any thread, even one inside the threading module's
    own lock, where joining a thread deadlocks (a CI run hung there)."""
    reader = ThreadPoolExecutor(1, thread_name_prefix="tracekit-gunzip")
    try:
        block = reader.submit(next, blocks, None)
        while (ready := block.result()) is not None:
            block = reader.submit(next, blocks, None)
            yield ready
    finally:
        reader.shutdown(wait=False, cancel_futures=True)


def _gunzip(fh, data: bytes, block_bytes: int) -> Iterator[bytes]:
    try:  # every error of the inflater, whichever it is, is the reader's NotStreamable (its callers catch no other)
        yield from _inflated(fh, data, block_bytes)
    except inflating.error as exc:
        raise NotStreamable(f"corrupt gzip data ({exc})") from None


def _inflated(fh, data: bytes, block_bytes: int) -> Iterator[bytes]:
    inflater = inflating.decompressobj(wbits=31)
    while True:
        if inflater.eof:  # end of a gzip member: another one may follow, or zero padding
            data = inflater.unused_data or fh.read(READ_BYTES)
            if not data:
                return
            if data[:2] != GZIP_MAGIC and not data.strip(b"\0"):
                if any(block.strip(b"\0") for block in iter(lambda: fh.read(READ_BYTES), b"")):
                    raise NotStreamable("corrupt gzip data (bytes after the last member)")
                return
            inflater = inflating.decompressobj(wbits=31)
        elif not data:
            data = fh.read(READ_BYTES)
            if not data:
                rest = inflater.flush()
                if rest:
                    yield rest
                if not inflater.eof:
                    raise StreamCut
                return
        block = inflater.decompress(data, block_bytes)
        if block:
            yield block
        data = inflater.unconsumed_tail


def read_text(path: Location) -> tuple[bytes, bool]:
    """The file's JSON bytes, gunzipped when it is gzip (by magic number, not by name), and whether the gzip stream
    was cut short."""
    if storage.is_dir(path):
        raise InputError(f"{path}: is a directory")
    try:
        storage.open_binary(path).close()
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


def read_bytes(path: Location) -> bytes:
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
    bytes read). An Execution Trace (its `nodes` after its `schema`, parse_text's rule) is not streamed: it is told
    from its first block, not read to HEADER_LIMIT first (a 64 MB one took 4 s)."""
    text = bytearray()  # appended to in place: `bytes +=` copied the whole text for each block
    searched = 0  # the keys are looked for from here: a key starting before it was seen whole
    # A key found is decoded with the text before it (`_header_keys`) only where it is a top-level key, as a scan
    # of the brackets outside strings tells (JSON may nest thousands of keys of these names: a 175 kB file of 8000
    # nested traceEvents keys took 97 s, one decode and one repair each), and once a name: a later top-level key of
    # the same name has the same text before it, and more (a header that did not decode does not decode longer)
    depths = jsontext.PrefixDepth()
    looked: set[bytes] = set()
    try:
        for block in blocks:
            text += block
            start = LEADING_SPACE.match(text).end()
            first = text[start:start + 1]
            if first == b"[":
                return {}, bytes(text[start + 1:]), False, len(text)
            if first not in (b"{", b""):
                raise NotStreamable
            # keys taken 1, 2, 4, ... at a time: a Kineto trace's first is its traceEvents (the rest of the block is
            # not searched), and a depth scan per key (numpy's cost per call) took 10 s for a 1.9 MB JSON tree of 80k
            # nested `nodes` keys
            at, count = searched, 1
            while True:
                keys, waiting = _keys_after(text, at, count)
                for (key_start, key_end, name), depth in zip(keys, depths.string_depths(text, [k[0] for k in keys])):
                    if depth != 1 or name in looked:
                        continue
                    looked.add(name)
                    head = _header_keys(bytes(text[:key_start]))
                    if head is None:  # the text before it does not decode
                        continue
                    if name == b"nodes":
                        if "schema" in head:
                            raise NotStreamable  # an Execution Trace
                        continue
                    if text[key_end:key_end + 1] != b"[":
                        raise NotStreamable
                    return head, bytes(text[key_end + 1:]), True, len(text)
                if waiting is not None or len(keys) < count:
                    break
                at, count = keys[-1][1], 2 * count
            # a key cut at the text's end starts at or after len(text) - HEADER_KEY_BYTES
            searched = waiting if waiting is not None else max(searched, len(text) - HEADER_KEY_BYTES)
            if len(text) > HEADER_LIMIT:  # not a Kineto header (an Execution Trace, say)
                raise NotStreamable
    except StreamCut:
        raise NothingToSalvage(len(text), True) from None
    text = bytes(text)
    if text.strip(JSON_SPACE) and jsontext.value_state(text) == "cut":
        raise NothingToSalvage(len(text), False)
    raise NotStreamable


def _keys_after(text: bytearray, at: int, count: int) -> tuple[list[tuple[int, int, bytes]], int | None]:
    """The next COUNT keys of HEADER_KEYS in TEXT from AT (start, end, name), up to one whose value has not arrived
    yet, and where that one starts (None: none such). `search`, not `finditer`: a live scanner holds the buffer, and
    the text grows after the search."""
    keys = []
    while len(keys) < count and (match := HEADER_KEYS.search(text, at)):
        if match.end() == len(text):  # the key's value has not arrived yet: looked at again with more text
            return keys, match.start()
        keys.append((match.start(), match.end(), match.group(1)))
        at = match.end()
    return keys, None


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
