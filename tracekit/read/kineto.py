"""Kineto trace files → Arrow tables: the reader's entry.

`read_trace` reads one file as a stream (tracekit.read.text cuts its text into chunks of whole entries, each
decoded and turned into tables while the next is gunzipped), so the decompressed text is never held at once and
each chunk's Python objects are gone before the next chunk is read (peak memory ≈ the output tables plus one
chunk). When streaming meets anything unusual the whole-file path reads it instead, which also words every error.
A file cut short keeps the entries complete before the cut. The file's timed entries are then screened
(tracekit.read.screen); ranks are applied afterwards, per file (`file_rank`, `rank_tables`).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator

from tracekit.errors import InputError
from tracekit.read.chunk_workers import ChunkHelpers, Helper, chunk_tables
from tracekit.read.columns import EntryTables, TraceParts, entry_tables
from tracekit.read.entries import gc_paused
from tracekit.read.ranks import FileTables, file_rank, rank_tables
from tracekit.read.screen import screened
from tracekit.read.text import (
    CHUNK_BYTES,
    NothingToSalvage,
    NotStreamable,
    ParsedFile,
    StreamCut,
    parse_file,
    parse_text,
    read_text,
    text_chunks,
    trace_event_chunks,
)
from tracekit.storage import Location

__all__ = ["ChunkHelpers", "FileTables", "ParsedFile", "TraceParts", "file_rank", "parse_file", "rank_tables",
           "read_trace"]


def read_trace(path: Location, chunk_bytes: int = CHUNK_BYTES, helpers: ChunkHelpers | None = None) -> TraceParts:
    """Read one trace file, streaming it in chunks (HELPERS, when given, decode some of them); whole when streaming
    meets anything unusual. A cut file gives the entries complete before the cut (and a `truncated` note); then
    duplicates and impossible times are screened out (`screened`)."""
    with gc_paused():
        try:
            parts = _read_streamed(path, chunk_bytes, helpers)
        except NotStreamable:
            parts = _read_whole(path)
        return parts if parts.is_execution_trace else screened(parts)


def _read_streamed(path: Location, chunk_bytes: int, helpers: ChunkHelpers | None = None) -> TraceParts:
    if helpers is None:
        return _read_chunks(path, text_chunks(path, chunk_bytes))
    made_ahead = helpers.made_ahead(path, chunk_bytes)  # first: no chunk goes to a helper still reading ahead
    return _read_chunks(path, text_chunks(path, chunk_bytes), helpers.for_file(path), made_ahead)


def _read_whole(path: Location) -> TraceParts:
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
        return _read_chunks(path, trace_event_chunks(_replayed(data, gzip_cut), len(data) + 1))
    except NotStreamable:
        raise failure from None


def _replayed(data: bytes, gzip_cut: bool) -> Iterator[bytes]:
    yield data
    if gzip_cut:
        raise StreamCut


def _read_chunks(path: Location, chunks: Generator[bytes, None, tuple], helpers: list[Helper] = (),
                 made_ahead: Iterable = ()) -> TraceParts:
    """The tables of CHUNKS (`trace_event_chunks`: they end with the other top-level keys and where a cut fell)."""
    ended = []

    def texts() -> Iterator[bytes]:
        ended.append((yield from chunks))

    def tables(chunk: bytes, first_id: int) -> EntryTables:
        try:
            return entry_tables(path, chunk, first_id)
        except InputError:  # a chunk that is not valid JSON: let the whole-file path say what is wrong with the file
            raise NotStreamable from None

    try:
        parts = list(chunk_tables(texts(), tables, helpers, made_ahead))
    except NothingToSalvage as nothing:
        raise _nothing_to_salvage(path, *nothing.args) from None
    entries = EntryTables.concat(parts)
    top, cut = ended[0]
    if cut is None:
        return TraceParts(path, top, entries)
    if not entries.entry_count:
        raise _nothing_to_salvage(path, cut.text_bytes, cut.gzip_cut)
    return TraceParts(path, top, entries.with_cut(cut))


def _nothing_to_salvage(path: Location, text_bytes: int, gzip_cut: bool) -> InputError:
    if gzip_cut and not text_bytes:
        return InputError(f"{path}: corrupt gzip data (the stream ends before any text: the file is cut)")
    return InputError(f"{path}: truncated at byte {text_bytes} (of the decompressed text) before the first complete "
                      f"trace entry: nothing to salvage" + ("; the gzip stream ends early" if gzip_cut else ""))
