"""The one place output paths are checked, for the API and the CLI alike: against the inputs (an output never
overwrites or deletes an input), and an output file's folder, kind and existence; and one output file written
safely (tracekit.output.atomic), gzip-compressed on a thread of its own where asked (`opened_output`)."""

from __future__ import annotations

import ctypes
import gzip
import os
import queue
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from tracekit import storage
from tracekit.errors import InputError
from tracekit.inputs import is_dataset, path_kind, trace_files_in
from tracekit.output.atomic import replacing_file


def same_file(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)  # hard links
    except OSError:
        return False


def is_inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def input_files(inputs: Iterable[str | Path]) -> list[Path]:
    """The local inputs as given, and the trace files directly inside the directories among them (a URL is never
    a local file: `url_overlap` checks outputs at URLs)."""
    found: list[Path] = []
    for p in map(Path, (i for i in inputs if not storage.is_url(i))):
        found.append(p)
        if path_kind(p) == "dir" and not is_dataset(p):
            found += trace_files_in(p)
    return found


def refuse_input_file(output: Path, inputs: Iterable[str | Path]) -> None:
    """InputError when writing the file `output` would overwrite an input: one of the input files (or the trace
    files of an input directory), or anything inside an input dataset."""
    if storage.is_url(output):
        return refuse_url_overlap(output, inputs)
    output = Path(output)
    for p in input_files(inputs):
        if same_file(output, p):
            raise InputError(f"{output}: is an input; write the output elsewhere")
        if is_dataset(p) and is_inside(output, p):
            raise InputError(f"{output}: is inside the input dataset {p}; write the output elsewhere")


def refuse_input_dir(output: Path, inputs: Iterable[str | Path]) -> None:
    """InputError when replacing the directory `output` would delete an input: `output` is an input, holds one,
    or lies inside an input dataset."""
    if storage.is_url(output):
        return refuse_url_overlap(output, inputs)
    output = Path(output)
    for p in input_files(inputs):
        if same_file(output, p):
            raise InputError(f"{output}: is an input; write the output elsewhere")
        if is_inside(p, output):
            raise InputError(f"{output}: holds the input {p}; write the output elsewhere")
        if is_dataset(p) and is_inside(output, p):
            raise InputError(f"{output}: is inside the input dataset {p}; write the output elsewhere")


def refuse_url_overlap(output: str, inputs: Iterable[str | Path]) -> None:
    """`refuse_input_dir` for an output at a URL, against the inputs at URLs (by their text: a store has no links)."""
    def inside(a: str, b: str) -> bool:
        return a.rstrip("/") == b.rstrip("/") or a.startswith(b.rstrip("/") + "/")

    for p in (i for i in inputs if storage.is_url(i)):
        if inside(output, p) and inside(p, output):
            raise InputError(f"{output}: is an input; write the output elsewhere")
        if inside(p, output):
            raise InputError(f"{output}: holds the input {p}; write the output elsewhere")
        if inside(output, p) and is_dataset(p):
            raise InputError(f"{output}: is inside the input dataset {p}; write the output elsewhere")


def local_output(text: str | Path) -> Path:
    """An output that only a local folder or file can take, as a Path; InputError for a URL (a Path would make it
    a local name: `s3://b/x` → `s3:/b/x`)."""
    if storage.is_url(text):
        raise InputError(f"{text}: written to a local path only (of the outputs, only `tracekit ingest` writes to a "
                         "URL)")
    return Path(text)


def check_output_file(path: str | Path, inputs: Iterable[str | Path] = (), force: bool = True,
                      file_hint: str = "a file name") -> Path:
    """The checks an output file passes before anything is read or written (InputError otherwise): `path` is not a
    directory (the message asks for FILE_HINT), its directory exists, it would not overwrite one of `inputs`, and
    (without `force`) it does not exist."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: is a directory (give {file_hint})")
    if not path.parent.is_dir():
        raise InputError(f"{path.parent}: no such directory")
    refuse_input_file(path, inputs)
    if path.exists() and not force:
        raise InputError(f"{path}: exists (use --force to replace it)")
    return path


def write_output_file(path: str | Path, write: Callable[[Path], object], inputs: Iterable[str | Path] = (),
                      force: bool = True) -> Path:
    """Write one output file through `write(temporary_path)`, then rename it to `path`.

    Refused (InputError) as `check_output_file` says. A failing `write` leaves no file behind and an existing
    `path` untouched.
    """
    path = check_output_file(path, inputs, force)
    with replacing_file(path) as temp:
        write(temp)
    return path


class CompressingBeside:
    """A gzip file (its fastest level) written by a thread of its own: `write` hands the bytes over and returns,
    so the caller makes the next ones while zlib compresses these without the GIL. At most one write waits beside
    the one being compressed (the timeline's: a batch of its events each, ~3.5 MB: bounded). The file gets the
    bytes gzip.open would, in the same writes in the same order, but for the name in the header: NAME's, the file
    the reader gets (`gunzip -N` restores it), where gzip.open would name the temporary file being written
    (".t.json.gz.2418e2e9.partial"). An error of the thread is raised at the next `write`, or at `close`."""

    def __init__(self, path: Path, name: str | None = None):
        self.raw = open(path, "wb")
        try:
            self.file = gzip.GzipFile(name or path.name, "wb", compresslevel=1, fileobj=self.raw)
        except BaseException:
            self.raw.close()
            raise
        self.pending: queue.Queue = queue.Queue(maxsize=1)
        self.failed: list[Exception] = []
        self.thread = threading.Thread(target=self._compress, name="tracekit-gzip", daemon=True)
        self.thread.start()

    def _compress(self) -> None:
        while (data := self.pending.get()) is not None:
            if not self.failed:
                try:
                    if data is WRITEBACK:  # the compressed bytes so far (zlib's state untouched: the same bytes)
                        self.file.fileobj.flush()
                        write_back(self.file.fileobj.fileno())
                    else:
                        self.file.write(data)
                except Exception as exc:  # OSError (a full disk), raised to the writer
                    self.failed.append(exc)

    def write(self, data) -> int:
        if self.failed:
            raise self.failed[0]
        self.pending.put(data if isinstance(data, bytes) else bytes(data))  # a copy only of a mutable buffer
        return len(data)

    def flush(self) -> None:
        pass

    def start_writeback(self) -> None:
        """`PlainOutput.start_writeback`, on the thread, after the bytes it was given before."""
        self.pending.put(WRITEBACK)

    def close(self) -> None:
        """Wait for the thread to write what it was given, then close the file."""
        self.pending.put(None)
        self.thread.join()
        try:
            self.file.close()
        finally:
            self.raw.close()
        if self.failed:
            raise self.failed[0]


WRITEBACK = object()  # CompressingBeside's marker: start the writeback here


class PlainOutput:
    """A binary file whose bytes so far the writer can send on to disk beside its work (`start_writeback`)."""

    def __init__(self, path: Path):
        self.file = open(path, "wb")
        self.writeback: threading.Thread | None = None

    def write(self, data) -> int:
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()

    def start_writeback(self) -> None:
        """Have the OS start writing the bytes so far to disk, on a thread of its own (the call takes 15–25 ms for
        46 MB: the pages' blocks are allocated in it), while the writer goes on. A rename over an existing file
        otherwise makes ext4 write the new file's data first (auto_da_alloc): 31–36 ms for SD3.5's 51 MB timeline,
        10–14 ms when 46 MB of it were under way. Begun where a core is idle (the timeline's path, after the walk),
        SD3.5's timeline over its last output took 1.580 s against 1.600 (median of 31 rounds alternating with
        the baseline and an ingest; 1.527 against 1.560 in 21 without the ingest; a new file, 1.598 and 1.596);
        begun while both cores worked, no gain (1.531 and 1.531, 41 rounds)."""
        self.file.flush()
        if self.writeback is not None:
            self.writeback.join()
        self.writeback = threading.Thread(target=write_back, args=(self.file.fileno(),), daemon=True,
                                          name="tracekit-writeback")
        self.writeback.start()

    def close(self) -> None:
        """Wait for the writeback's call (the writes it started go on), then close the file."""
        try:
            if self.writeback is not None:
                self.writeback.join()
        finally:
            self.file.close()


SYNC_FILE_RANGE_WRITE = 2  # linux/fs.h: start writing the range's dirty pages, wait for none


def write_back(fd: int) -> None:
    """Start writing the dirty pages of file FD to disk, waiting for none of the writes (Linux's sync_file_range,
    not in Python's os module); elsewhere nothing. A hint: an error is the writes' and the close's to report."""
    if (sync_file_range := _sync_file_range()) is not None:
        sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE)


@cache
def _sync_file_range():
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return function


@contextmanager
def opened_output(path: Path, compressed: bool, name: str | None = None) -> Iterator[CompressingBeside | PlainOutput]:
    """PATH open for writing bytes (`write`, `start_writeback`); with `compressed`, gzip compressed beside the writer
    (`CompressingBeside`; NAME, the final file's, in its header): on the main thread it was 0.29 s of SD3.5's ~3.8 s
    timeline, one core idle meanwhile (bench/RESULTS.md)."""
    out = CompressingBeside(path, name) if compressed else PlainOutput(path)
    try:
        yield out
    finally:
        out.close()
