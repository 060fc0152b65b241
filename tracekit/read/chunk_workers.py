"""A large trace's chunks turned into tables in helper processes beside the reader.

Decoding a chunk (msgspec) and building its tables hold the GIL, so a thread cannot share the work: a helper is a
fresh interpreter (`python -m tracekit.read.chunk_workers`) that imports the reader alone (pyarrow, numpy, msgspec),
or a fork of this process that has imported it (`ForkedHelper`: a command's head start, on Linux), and loops: a
chunk's text in on stdin, its tables (`entry_tables`) out on stdout as Arrow IPC. The reader hands a
helper a chunk while that helper has fewer than IN_FLIGHT, decodes the others itself, and takes the results back in
chunk order; a helper still starting costs it nothing but the start. Every chunk's tables are made with ids from 0
and shifted to their place (`EntryTables.shifted`), the same ids a reader alone gives. A chunk a helper could not
turn into tables (an unusual chunk, a helper that died) is decoded again by the reader, which then raises, or
falls back to the whole-file path, as it does without helpers.

A head start (`ChunkHelpers.head_start`): a command about to read a local trace file of HEAD_START_TEXT_BYTES of
JSON or more starts the helpers before its own imports (~0.3 s on one core, the other idle; forked, once it has
imported the reader, before the rest), and the first of them
reads the file on its own meanwhile: it gunzips it, cuts it into the chunks the reader will cut
(`text.trace_event_chunks`, the same function on the same bytes) and turns them into tables in order, until the
reader reaches the file and stops it. The reader then takes those chunks' tables, each checked against the chunk it
cut itself (length and CRC-32: a file changed in between is read by the reader alone from there), and shares the
rest as above. This module imports nothing heavy at the top, so that a command can start the helpers first.
"""

from __future__ import annotations

import json
import os
import queue
import select
import signal
import stat
import struct
import subprocess
import sys
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from itertools import chain, islice
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit import storage
from tracekit.machine import usable_cpus

if TYPE_CHECKING:
    from concurrent.futures import Future

    from tracekit.read.columns import EntryTables

IN_FLIGHT = 2  # chunks a helper holds at once: one it decodes, one waiting, so it never waits for the reader
MAX_HELPERS = 3
SIZE = struct.Struct("<Q")
FAILED = b""  # a helper's reply for a chunk it could not turn into tables
# A head start's messages: the reader's (a frame of text never starts with a NUL byte), then the helper's: that it
# has begun, each chunk it made (its length and CRC-32, then its tables), and the end, once it has stopped
HEAD_START, STOP = b"\0head ", b"\0stop"
HEAD_READY, HEAD_CHUNK, HEAD_END = b"r", struct.Struct("<cQI"), b"e"
# A head start's chunks a helper keeps at most (~1.5 MB of tables each for 1 MiB of JSON): bounded, whatever the
# file's size or however long the command takes to reach it (a report reaches OWLv2 after ~20)
HEAD_CHUNKS = 64
PIPE_BYTES = 1 << 20  # a helper's replies' pipe (Linux's default limit for a process without privileges)
HELPER_TEXT_BYTES = 32 << 20  # less JSON is read in little more than the time a helper takes to start
# A head start's helper starts while the command imports (~0.45 s, a core idle): it pays for its start on smaller
# files than a helper started mid-read. A100 trainer trace, 24.6 MB: ingest 1.07 -> 0.99 s, report 1.96 -> 1.81 s,
# timeline 1.64 -> 1.44 s, each +0.3-0.4 CPU s; the 8.2 MB and 16.8 MB ones 0-4% for that CPU (bench/RESULTS.md)
HEAD_START_TEXT_BYTES = 16 << 20
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
            if fh.read(2) == storage.GZIP_MAGIC and size >= 18:
                fh.seek(-4, os.SEEK_END)
                return max(size, int.from_bytes(fh.read(4), "little"))
            return size
    except OSError:
        return 0


def file_identity(path) -> tuple | None:
    """What says a local file is the same one, unchanged: device, inode, size and modification time (None: not a
    local regular file)."""
    try:
        found = os.stat(path)
    except (OSError, TypeError, ValueError):
        return None
    return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns) if stat.S_ISREG(found.st_mode) else None


class ChunkHelpers:
    """The helpers of one read of several files: started once the read's files reach `min_text_bytes` of JSON
    (counting the file about to be read: one large file, or the ranks of a run), or at once for a head start on a
    file of `head_start_bytes`, used for every file after that, ended with the block (a later block starts them
    again). By default one per CPU beyond the reader's own, at most MAX_HELPERS; none on one CPU, and none in a
    process multiprocessing started (a `--jobs` or Dask worker: its siblings have the other CPUs)."""

    def __init__(self, count: int | None = None, min_text_bytes: int = HELPER_TEXT_BYTES,
                 head_start_bytes: int = HEAD_START_TEXT_BYTES):
        if count is None:
            # a process multiprocessing started has it loaded; not importing it here (~6 ms) starts a head start sooner
            started_by_multiprocessing = ("multiprocessing" in sys.modules
                                          and sys.modules["multiprocessing"].parent_process() is not None)
            count = 0 if started_by_multiprocessing else max(0, min(usable_cpus() - 1, MAX_HELPERS))
        self.count = count
        self.min_text_bytes = min_text_bytes
        self.head_start_bytes = head_start_bytes
        self.seen = 0  # bytes of JSON of the files given so far, until the helpers start
        self.started: list[Helper] = []
        self.ahead: tuple[tuple, int | None, Helper] | None = None  # a head start: (file, chunk bytes, helper)

    def __enter__(self) -> ChunkHelpers:
        return self

    def __exit__(self, *_) -> None:
        for helper in self.started:
            helper.close()
        self.started, self.ahead, self.seen = [], None, 0

    def head_start(self, paths: Iterable, chunk_bytes: int | None = None, forked: bool = False) -> ChunkHelpers:
        """Start the helpers now, the first reading on its own the first of PATHS (what a command was given) that
        is a local file of at least `head_start_bytes` of JSON, in chunks of CHUNK_BYTES (None: the reader's default,
        text.CHUNK_BYTES, which is not imported here), until the reader reaches it (`made_ahead`). Only where
        select() can poll a pipe (POSIX); nothing when no path qualifies. `forked`: as forks of this process
        (`ForkedHelper`) where it may fork, else as fresh interpreters."""
        if not self.count or self.started or os.name != "posix":
            return self
        path, identity = next(((p, i) for p in paths if (i := file_identity(p)) is not None), (None, None))
        if path is None or text_bytes(path) < self.head_start_bytes:
            return self
        helpers = self.start(forked)
        if helpers and helpers[0].start_head(path, chunk_bytes):
            self.ahead = (identity, chunk_bytes, helpers[0])
        return self

    def made_ahead(self, path, chunk_bytes: int) -> Iterator[tuple[int, int, memoryview]]:
        """The chunks of PATH a head start made, in order, as (length, CRC-32, tables as the helper sent them), each
        as it comes: none unless it read this file, unchanged, in chunks of CHUNK_BYTES. Any head start ends here: a
        helper reads ahead only until the reader reaches its first file."""
        if self.ahead is None:
            return iter(())
        from tracekit.read.text import CHUNK_BYTES

        identity, ahead_bytes, helper = self.ahead
        self.ahead = None
        # a helper still starting has made nothing: it is not waited for (its end is taken in meanwhile)
        begun = helper.has_begun()
        made = helper.end_head()
        same = identity == file_identity(path) and (ahead_bytes or CHUNK_BYTES) == chunk_bytes
        return made if same and begun else iter(())

    def for_file(self, path) -> list[Helper]:
        """The helpers to read PATH with: none while the files so far, this one counted, are small."""
        if not self.count:
            return []
        if not self.started:
            self.seen += text_bytes(path)
            if self.seen < self.min_text_bytes:
                return []
        return self.start()

    def start(self, forked: bool = False) -> list[Helper]:
        """The helpers, started now if they are not yet (`forked`: as in `head_start`); those alive."""
        try:
            while len(self.started) < self.count:
                self.started.append(Helper(forked))
        except OSError:  # no interpreter to start (an embedded Python): the reader reads alone, or with fewer
            self.count = len(self.started)
        return [helper for helper in self.started if helper.alive]


class Helper:
    """One helper process and the thread that feeds it chunks and reads back their tables, one at a time."""

    def __init__(self, forked: bool = False):
        """`forked`: a fork of this process (`ForkedHelper`) where `may_fork`, else a fresh interpreter."""
        if forked and may_fork():
            self.process: subprocess.Popen | ForkedHelper = ForkedHelper()
        else:
            package_root = str(Path(__file__).resolve().parents[2])  # this tracekit, whatever the working directory
            env = {"OPENBLAS_NUM_THREADS": "1",  # numpy's BLAS, unused here, would busy-wait a thread per core
                   **os.environ,
                   "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
            self.process = subprocess.Popen([sys.executable, "-m", "tracekit.read.chunk_workers"], env=env,
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        _widen(self.process.stdout)
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
        from concurrent.futures import Future  # here: a head start's helper starts before it loads (logging, ~5 ms)

        future: Future = Future()
        self.given.append(future)
        self.jobs.put((chunk, future))
        return future

    def start_head(self, path, chunk_bytes: int | None) -> bool:
        """Have it read PATH on its own (a head start); false where it cannot be told."""
        try:
            _write_frame(self.process.stdin,
                         HEAD_START + json.dumps([os.fspath(path), chunk_bytes, HEAD_CHUNKS]).encode())
        except (OSError, ValueError):
            self.alive = False
            return False
        return True

    def has_begun(self) -> bool:
        """Whether its head start has begun (it said so: the only thing it sends before it is stopped)."""
        try:
            return bool(select.select([self.process.stdout], [], [], 0)[0])
        except (OSError, ValueError):
            return False

    def end_head(self) -> Iterator[tuple[int, int, memoryview]]:
        """Stop its head start: the chunks it made, (length, CRC-32, tables), in order, each as it comes through the
        pipe; those until it died, or until one took longer than ANSWER_SECONDS (it is then ended)."""
        from concurrent.futures import Future

        made: queue.SimpleQueue = queue.SimpleQueue()
        self.jobs.put((made, Future()))  # now, whether or not the chunks are taken: the chunks given after wait on it
        return self._taken(made)

    def _taken(self, made: queue.SimpleQueue) -> Iterator[tuple[int, int, memoryview]]:
        try:
            while (chunk := made.get(timeout=ANSWER_SECONDS)) is not None:
                yield chunk
        except queue.Empty:
            self.stop()

    def _feed(self) -> None:
        while (job := self.jobs.get()) is not None:
            chunk, future = job
            if not future.set_running_or_notify_cancel():  # the reader made it itself meanwhile
                continue
            reply = None
            try:
                if isinstance(chunk, queue.SimpleQueue):  # the end of a head start: its chunks into that queue
                    self._head_chunks(chunk)
                elif self.alive:
                    _write_frame(self.process.stdin, chunk)
                    reply = _read_frame(self.process.stdout)
                    self.replies += 1
            except (OSError, ValueError, struct.error):  # the helper died (killed, out of memory): the reader decodes
                self.alive = False
            future.set_result(reply)

    def _head_chunks(self, made: queue.SimpleQueue) -> None:
        try:
            if self.alive:
                _write_frame(self.process.stdin, STOP)
                while (frame := _read_frame(self.process.stdout)) != HEAD_END:
                    if frame == HEAD_READY:
                        continue
                    _, length, crc = HEAD_CHUNK.unpack_from(frame)
                    made.put((length, crc, memoryview(frame)[HEAD_CHUNK.size:]))
                    self.replies += 1
        finally:
            made.put(None)

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


def may_fork() -> bool:
    """Whether a helper may be a fork of this process: on Linux, from a process of one Python thread (a lock another
    thread held at the fork would stay held in the child; macOS's system libraries are not safe to use in a forked
    child at all). The one native thread the reader's libraries start, pyarrow's bundled jemalloc's background
    thread, is jemalloc's to handle across a fork (its pthread_atfork handlers); DuckDB, whose threads would not be,
    is not loaded before a command's head start (tests/cli/test_imports.py)."""
    return sys.platform.startswith("linux") and threading.active_count() == 1


class ForkedHelper:
    """A helper forked from this process, with the Popen methods `Helper` uses. It has this process's modules: where
    the reader is imported before the fork, the helper decodes at once, sparing the ~0.3 CPU s a fresh interpreter
    spends importing it (pyarrow, numpy, msgspec) beside the command's own imports (bench/RESULTS.md: a report of
    OWLv2 or SD3.5 ~5% less CPU)."""

    def __init__(self):
        child_in, to_child = os.pipe()
        from_child, child_out = os.pipe()
        try:
            self.pid = os.fork()
        except OSError:
            for fd in (child_in, to_child, from_child, child_out):
                os.close(fd)
            raise
        if self.pid == 0:  # the helper: the pipes as stdin and stdout, stderr to /dev/null, no other file of ours
            code = 1
            try:
                os.dup2(child_in, 0)
                os.dup2(child_out, 1)
                os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
                os.closerange(3, os.sysconf("SC_OPEN_MAX"))
                serve()
                code = 0
            finally:
                os._exit(code)  # never this process's exit handlers, nor its buffered output
        os.close(child_in)
        os.close(child_out)
        self.stdin, self.stdout = os.fdopen(to_child, "wb"), os.fdopen(from_child, "rb")
        self.returncode: int | None = None

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode


def _widen(pipe) -> None:
    """A pipe of PIPE_BYTES where Linux allows it (64 KiB by default): a chunk's tables (~1.5 MB for 1 MiB of JSON
    on OWLv2) then cross it in two reads, not 24, each waiting for the GIL."""
    try:
        import fcntl

        fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass


def _write_frame(stream, data: bytes) -> None:
    stream.write(SIZE.pack(len(data)))
    stream.write(data)
    stream.flush()


def _read_frame(stream) -> bytes:
    """One frame's bytes; OSError where the stream ends first (the other side ended)."""
    (length,) = SIZE.unpack(_read_exactly(stream, SIZE.size))
    return _read_exactly(stream, length)


def _read_exactly(stream, size: int) -> bytes:
    """SIZE bytes of STREAM, buffered or not (an unbuffered pipe may give fewer per read)."""
    data = stream.read(size)
    if 0 < len(data) < size:
        parts, got = [data], len(data)
        while got < size and (more := stream.read(size - got)):
            parts.append(more)
            got += len(more)
        data = b"".join(parts)
    if len(data) < size:
        raise OSError("the stream ended")
    return data


def chunk_tables(chunks: Iterator[bytes], tables: Callable[[bytes, int], EntryTables], helpers: list[Helper],
                 made_ahead: Iterable[tuple[int, int, memoryview]] = ()) -> Iterator[EntryTables]:
    """Each chunk's tables, in order, as `tables(chunk, first_id)` makes them; HELPERS make some of them (with ids
    from 0, shifted here), and the first chunks may come MADE_AHEAD (`ChunkHelpers.made_ahead`): each taken where
    it is the chunk cut here, the rest made as the others once one is not."""
    from tracekit.read.columns import EntryTables

    chunks = iter(chunks)
    first_id = 0
    for length, crc, reply in made_ahead:
        chunk = next(chunks, None)
        if chunk is None:
            return
        if len(chunk) != length or zlib.crc32(chunk) != crc:
            chunks = chain([chunk], chunks)
            break
        part = decoded(reply).shifted(first_id)
        first_id += part.entry_count
        yield part
    if not helpers:
        for chunk in chunks:
            part = tables(chunk, first_id)
            yield part
            first_id += part.entry_count
        return
    # each chunk, with its tables made here, or the helper making them and their future
    pending: deque[tuple[bytes, EntryTables | tuple[Helper, Future]]] = deque()

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


@cache
def _header() -> struct.Struct:
    """An encoded chunk's header: its entry count, then each table's IPC bytes."""
    from tracekit.read.columns import EntryTables

    return struct.Struct("<Q" + "Q" * len(EntryTables.TABLES))


def encoded(part: EntryTables) -> bytes:
    import pyarrow as pa

    streams = []
    for name in part.TABLES:
        sink = pa.BufferOutputStream()
        table = getattr(part, name)
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        streams.append(sink.getvalue())
    return b"".join([_header().pack(part.entry_count, *map(len, streams)), *map(memoryview, streams)])


def decoded(reply: bytes | memoryview) -> EntryTables:
    import pyarrow as pa

    from tracekit.read.columns import EntryTables

    count, *lengths = _header().unpack_from(reply)
    buffer, at, tables = pa.py_buffer(reply), _header().size, []
    for length in lengths:
        tables.append(pa.ipc.open_stream(buffer.slice(at, length)).read_all())
        at += length
    return EntryTables(count, *tables)


def serve() -> None:
    """The helper's loop: a chunk in, its tables (or FAILED) out, until stdin ends; a head start first, if the
    reader asks for one."""
    from tracekit.read.columns import entry_tables
    from tracekit.read.entries import gc_paused

    source = os.fdopen(os.dup(0), "rb", buffering=0)  # unbuffered: select() on it sees what has come
    sink = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything a library prints goes to stderr, not into the replies
    try:
        with gc_paused():
            while True:
                try:
                    chunk = _read_frame(source)
                except OSError:  # stdin ended: the reader is done
                    return
                if chunk.startswith(HEAD_START):
                    _read_ahead(*json.loads(chunk[len(HEAD_START):]), source, sink)
                    continue
                try:
                    reply = encoded(entry_tables("", chunk, 0))
                except Exception:
                    reply = FAILED
                _write_frame(sink, reply)
    except (KeyboardInterrupt, BrokenPipeError):
        os._exit(1)


def _read_ahead(path: str, chunk_bytes: int | None, most: int, source, sink) -> None:
    """A head start: PATH's chunks, cut as the reader cuts them, turned into tables in order until the reader says
    STOP (polled between chunks), MOST of them are made, or one cannot be (the reader meets it too, and says what
    is wrong); then, after STOP, each chunk's tables and HEAD_END. Kept here until then: the reader, busy
    importing, would take them from the pipe only as often as the GIL lets its thread run, and a helper blocked on
    a full pipe reads no further."""
    from tracekit.read.columns import entry_tables
    from tracekit.read.text import CHUNK_BYTES, text_chunks

    _write_frame(sink, HEAD_READY)
    made = []
    try:
        for chunk in islice(text_chunks(Path(path), chunk_bytes or CHUNK_BYTES), most):
            if select.select([source], [], [], 0)[0]:  # the reader's STOP has come: nothing else does meanwhile
                break
            made.append(HEAD_CHUNK.pack(b"c", len(chunk), zlib.crc32(chunk)) + encoded(entry_tables("", chunk, 0)))
    except Exception:  # NotStreamable, a cut or bad chunk, an unreadable file: the reader's own read says why
        pass
    while _read_frame(source) != STOP:
        pass
    for frame in made:
        _write_frame(sink, frame)
    _write_frame(sink, HEAD_END)


if __name__ == "__main__":
    serve()
