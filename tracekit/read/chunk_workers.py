"""A large trace's chunks turned into tables in helper processes beside the reader.

Decoding a chunk (msgspec) and building its tables hold the GIL, so a thread cannot share the work: a helper is a
fresh interpreter (`python -m tracekit.read.chunk_workers`) that imports the reader alone (pyarrow, numpy, msgspec)
and loops: a chunk's text in on stdin, its tables (`entry_tables`) out on stdout as Arrow IPC. The reader hands a
helper a chunk while that helper has fewer than IN_FLIGHT, decodes the others itself, and takes the results back in
chunk order; a helper still starting costs it nothing but the start. Every chunk's tables are made with ids from 0
and shifted to their place (`EntryTables.shifted`), the same ids a reader alone gives. A chunk a helper could not
turn into tables (an unusual chunk, a helper that died) is decoded again by the reader, which then raises, or
falls back to the whole-file path, as it does without helpers.
"""

from __future__ import annotations

import os
import queue
import struct
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pyarrow as pa

from tracekit import storage
from tracekit.read.columns import EntryTables, entry_tables
from tracekit.read.text import GZIP_MAGIC

IN_FLIGHT = 2  # chunks a helper holds at once: one it decodes, one waiting, so it never waits for the reader
MAX_HELPERS = 3
SIZE = struct.Struct("<Q")
HEADER = struct.Struct("<Q" + "Q" * len(EntryTables.TABLES))  # entry count, then each table's IPC bytes
FAILED = b""  # a helper's reply for a chunk it could not turn into tables
HELPER_TEXT_BYTES = 32 << 20  # less JSON is read in little more than the time a helper takes to start
ANSWER_SECONDS = 120  # a helper that takes longer for a chunk (~0.05 s) is stuck: the reader makes it, and ends it


def text_bytes(path) -> int:
    """PATH's bytes of JSON, at least: a local gzip file's size as its trailer gives it (the last member's, mod
    2^32), else the file's size (a remote file's without reading it); 0 when it cannot be read (the reader says
    why)."""
    try:
        size = storage.size(path)
        if storage.is_url(path):
            return size
        with storage.open_binary(path) as fh:
            if fh.read(2) == GZIP_MAGIC and size >= 18:
                fh.seek(-4, os.SEEK_END)
                return max(size, int.from_bytes(fh.read(4), "little"))
            return size
    except OSError:
        return 0


class ChunkHelpers:
    """The helpers of one read of several files: started once the read's files reach HELPER_TEXT_BYTES of JSON
    (counting the file about to be read: one large file, or the ranks of a run), used for every file after that,
    ended with the block. By default one per CPU beyond the reader's own, at most MAX_HELPERS; none on one CPU, and
    none in a process multiprocessing started (a `--jobs` or Dask worker: its siblings have the other CPUs)."""

    def __init__(self, count: int | None = None, min_text_bytes: int = HELPER_TEXT_BYTES):
        if count is None:
            import multiprocessing

            cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
            count = max(0, min(cpus - 1, MAX_HELPERS)) if multiprocessing.parent_process() is None else 0
        self.count = count
        self.min_text_bytes = min_text_bytes
        self.seen = 0  # bytes of JSON of the files given so far, until the helpers start
        self.started: list[Helper] = []

    def __enter__(self) -> ChunkHelpers:
        return self

    def __exit__(self, *_) -> None:
        for helper in self.started:
            helper.close()
        self.started = []

    def for_file(self, path) -> list[Helper]:
        """The helpers to read PATH with: none while the files so far, this one counted, are small."""
        if not self.count:
            return []
        if not self.started:
            self.seen += text_bytes(path)
            if self.seen < self.min_text_bytes:
                return []
            try:
                while len(self.started) < self.count:
                    self.started.append(Helper())
            except OSError:  # no interpreter to start (an embedded Python): the reader reads alone, or with fewer
                self.count = len(self.started)
        return [helper for helper in self.started if helper.alive]


class Helper:
    """One helper process and the thread that feeds it chunks and reads back their tables, one at a time."""

    def __init__(self):
        package_root = str(Path(__file__).resolve().parents[2])  # this tracekit, whatever the working directory
        env = {"OPENBLAS_NUM_THREADS": "1",  # numpy's BLAS, unused here, would busy-wait a thread per core at import
               **os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen([sys.executable, "-m", "tracekit.read.chunk_workers"], env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.given: deque[Future] = deque()  # chunks given, oldest first
        self.replies = 0  # chunks it has answered (none yet: it may still be starting)
        self.alive = True  # false once it has died
        self.thread = threading.Thread(target=self._feed, daemon=True, name="tracekit-chunk-helper")
        self.thread.start()

    @property
    def held(self) -> int:
        """Chunks given and not yet answered."""
        while self.given and self.given[0].done():
            self.given.popleft()
        return len(self.given)

    def submit(self, chunk: bytes) -> Future:
        future: Future = Future()
        self.given.append(future)
        self.jobs.put((chunk, future))
        return future

    def _feed(self) -> None:
        while (job := self.jobs.get()) is not None:
            chunk, future = job
            if not future.set_running_or_notify_cancel():  # the reader made it itself meanwhile
                continue
            reply = None
            if self.alive:
                try:
                    _write_frame(self.process.stdin, chunk)
                    reply = _read_frame(self.process.stdout)
                    self.replies += 1
                except (OSError, ValueError):  # the helper died (killed, out of memory): the reader decodes
                    self.alive = False
            future.set_result(reply)

    def stop(self) -> None:
        """Kill the process: the chunks it holds are answered with nothing (the reader makes them)."""
        self.alive = False
        self.process.kill()

    def close(self) -> None:
        """End the helper now: every chunk it was given is answered or made by the reader, and a chunk it still
        decodes (one the reader made itself) is not worth waiting for."""
        self.jobs.put(None)
        self.stop()
        self.thread.join()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass


def _write_frame(stream, data: bytes) -> None:
    stream.write(SIZE.pack(len(data)))
    stream.write(data)
    stream.flush()


def _read_frame(stream) -> bytes:
    """One frame's bytes; OSError where the stream ends first (the other side ended)."""
    head = stream.read(SIZE.size)
    if len(head) < SIZE.size:
        raise OSError("the stream ended")
    (length,) = SIZE.unpack(head)
    body = stream.read(length)
    if len(body) < length:
        raise OSError("the stream ended")
    return body


def chunk_tables(chunks: Iterator[bytes], tables: Callable[[bytes, int], EntryTables], helpers: list[Helper]
                 ) -> Iterator[EntryTables]:
    """Each chunk's tables, in order, as `tables(chunk, first_id)` makes them; HELPERS make some of them (with ids
    from 0, shifted here)."""
    if not helpers:
        first_id = 0
        for chunk in chunks:
            part = tables(chunk, first_id)
            yield part
            first_id += part.entry_count
        return
    # each chunk, with its tables made here, or the helper making them and their future
    pending: deque[tuple[bytes, EntryTables | tuple[Helper, Future]]] = deque()
    first_id = 0

    def taken() -> EntryTables:
        nonlocal first_id
        chunk, made = pending.popleft()
        if not isinstance(made, EntryTables):
            helper, future = made
            try:
                reply = future.result(timeout=ANSWER_SECONDS)
            except TimeoutError:
                helper.stop()
                reply = None
            # failed, lost or stuck: made here, where its error (if any) is raised as without helpers
            made = decoded(reply) if reply else tables(chunk, 0)
        part = made.shifted(first_id)
        first_id += part.entry_count
        return part

    def ready(made) -> bool:
        return isinstance(made, EntryTables) or made[1].done()

    try:
        for chunk in chunks:
            helper = min(helpers, key=lambda h: h.held)
            pending.append((chunk, (helper, helper.submit(chunk)) if helper.held < IN_FLIGHT else tables(chunk, 0)))
            while pending and ready(pending[0][1]):
                yield taken()
        # the last chunks: those a helper has not begun, or that wait on a helper still starting, are made here
        # rather than waited for
        for i, (chunk, made) in enumerate(pending):
            if not ready(made) and (made[1].cancel() or not made[0].replies):
                pending[i] = (chunk, tables(chunk, 0))
        while pending:
            yield taken()
    finally:  # an error, or a consumer that stopped: what the helpers still hold is not wanted
        for _, made in pending:
            if not isinstance(made, EntryTables):
                made[1].cancel()


def encoded(part: EntryTables) -> bytes:
    streams = []
    for name in EntryTables.TABLES:
        sink = pa.BufferOutputStream()
        table = getattr(part, name)
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        streams.append(sink.getvalue())
    return b"".join([HEADER.pack(part.entry_count, *map(len, streams)), *map(memoryview, streams)])


def decoded(reply: bytes) -> EntryTables:
    count, *lengths = HEADER.unpack_from(reply)
    buffer, at, tables = pa.py_buffer(reply), HEADER.size, []
    for length in lengths:
        tables.append(pa.ipc.open_stream(buffer.slice(at, length)).read_all())
        at += length
    return EntryTables(count, *tables)


def serve() -> None:
    """The helper's loop: a chunk in, its tables (or FAILED) out, until stdin ends."""
    from tracekit.read.entries import gc_paused

    source = os.fdopen(os.dup(0), "rb")
    sink = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything a library prints goes to stderr, not into the replies
    try:
        with gc_paused():
            while True:
                try:
                    chunk = _read_frame(source)
                except OSError:  # stdin ended: the reader is done
                    return
                try:
                    reply = encoded(entry_tables("", chunk, 0))
                except Exception:
                    reply = FAILED
                _write_frame(sink, reply)
    except (KeyboardInterrupt, BrokenPipeError):
        os._exit(1)


if __name__ == "__main__":
    serve()
