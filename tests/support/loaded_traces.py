"""Shared traces loaded once per test session, for the tests that only read the tables (tests/conftest.py's
`loaded_trace` fixture).

Four modules check every shared trace, and loading a trace is most of each check: the first test to ask for a trace
loads it with `tracekit.load` and stores its tables as Arrow IPC files in the session's temporary folder, which the
pytest-xdist workers of one run share; every later ask, in any worker, maps those files back (`TraceTables` are
immutable, and IPC keeps every value, type and schema as it was). Nothing is held in memory between tests, and the
folder goes with the session's other temporary files. A test whose property is about reading the file (ingest's
`test_nothing_lost`) calls `tracekit.load` itself.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import fields
from pathlib import Path

import pyarrow as pa

import tracekit


class LoadedTraces:
    """`tracekit.load(path)` for a trace file or folder, loaded once per session and stored under FOLDER."""

    def __init__(self, folder: Path):
        self.folder = folder

    def __call__(self, path: Path) -> tracekit.TraceTables:
        resolved = Path(path).resolve()
        stored = self.folder / hashlib.sha1(str(resolved).encode()).hexdigest()
        if stored.is_dir():
            return read(stored)
        tables = tracekit.load(resolved)
        write(tables, stored)
        return tables


def write(tables: tracekit.TraceTables, stored: Path) -> None:
    """The tables as one IPC file each, renamed into place whole: a worker that finds STORED finds all of it (two
    workers loading one trace at once both write; the first rename wins and the other's copy is dropped)."""
    partial = stored.with_name(f"{stored.name}.{os.getpid()}.partial")
    partial.mkdir(parents=True)
    for field in fields(tables):
        table = getattr(tables, field.name)
        if table is not None:
            with pa.OSFile(str(partial / f"{field.name}.arrow"), "wb") as sink, \
                    pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
    try:
        partial.rename(stored)
    except OSError:
        if not stored.is_dir():
            raise
        shutil.rmtree(partial)


def read(stored: Path) -> tracekit.TraceTables:
    """The tables stored by `write`, memory-mapped (a table absent from STORED was None: the default peaks)."""
    return tracekit.TraceTables(**{
        path.stem: pa.ipc.open_file(pa.memory_map(str(path))).read_all() for path in stored.glob("*.arrow")})
