"""The one place DuckDB connections are made: each with a memory limit and a spill folder of its own.

DuckDB's defaults are 80% of RAM and a `.tmp/` folder under the current directory, where a killed run leaves its
spill files (gigabytes) behind. Here:
- memory_limit: `TRACEKIT_MEMORY_LIMIT` (DuckDB's syntax: "4GB", "800MB"), else half of physical memory; a
  connection running the analyses of tables of known size is held tighter (`limit_to_input`);
- spill folder: `tracekit-duckdb/PID` under the system's temporary directory (`TMPDIR`), removed when the process
  exits; folders of processes that no longer run (a crash, a kill -9) are removed by the next connection;
- safe (`lock_down`): for SQL written by others, no file, network, extension or setting access once the trace
  tables are bound.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import duckdb

from tracekit.errors import InputError
from tracekit.machine import usable_cpus

MEMORY_LIMIT_VARIABLE = "TRACEKIT_MEMORY_LIMIT"
SPILL_ROOT_NAME = "tracekit-duckdb"


def connect(threads: int | None = None, at_most: int | None = None) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB connection, bounded in memory and spilling into this process's temporary folder, with
    THREADS threads; by default DuckDB's (the machine's cores, or a container's CPU quota), but no more than the CPUs
    this process may use (its affinity mask, which DuckDB does not see) nor AT_MOST."""
    config = {"memory_limit": memory_limit(), "temp_directory": str(spill_dir())}
    if threads:
        config["threads"] = int(threads)
    try:
        con = duckdb.connect(config=config)
    except duckdb.Error as exc:
        if os.environ.get(MEMORY_LIMIT_VARIABLE):
            raise InputError(f"{MEMORY_LIMIT_VARIABLE}={os.environ[MEMORY_LIMIT_VARIABLE]}: not a memory limit "
                             f"DuckDB accepts ({' '.join(str(exc).split())})") from None
        raise
    # DuckDB 2 draws a progress bar on standard output by default: not in a tool whose output is data
    con.execute("set enable_progress_bar = false")
    if not threads:
        default = duckdb_threads(con)
        if (wanted := min(default, usable_cpus(), at_most or default)) != default:
            con.execute(f"set threads = {wanted}")
    return con


def duckdb_threads(con: duckdb.DuckDBPyConnection) -> int:
    """The threads `con`'s database runs (read whole: DuckDB 2.0.1 refuses a statement after an unfinished
    result)."""
    return con.execute("select current_setting('threads')").fetchall()[0][0]


# A safe connection runs SQL written by others (`tracekit sql --safe`, `tracekit.open(..., safe=True)`): DuckDB may
# then touch no file or URL (read_text, read_csv, COPY ... TO, ATTACH, EXPORT, INSTALL), load no extension and change
# no setting (SET, RESET: `lock_configuration`). Python objects are not scanned by name (`from some_variable`).
# DuckDB always allows its temporary directory, even without external access (`COPY ... TO` works there), so a safe
# connection has none: a query beyond the memory limit fails instead of spilling.
LOCKED_DOWN = ("python_enable_replacements = false", "autoinstall_known_extensions = false",
               "autoload_known_extensions = false", "allow_community_extensions = false",
               "temp_directory = ''", "enable_external_access = false", "lock_configuration = true")


def lock_down(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """Make `con` safe for SQL written by others (LOCKED_DOWN). Irreversible; call it once the tables are bound:
    nothing can be read from files afterwards (Arrow tables registered later still can)."""
    for setting in LOCKED_DOWN:
        con.execute(f"set {setting}")
    return con


def is_refused(exc: duckdb.Error) -> bool:
    """Whether a DuckDB error is a locked-down connection refusing a file, an extension or a setting."""
    return isinstance(exc, duckdb.PermissionException) or "configuration has been locked" in str(exc)


def memory_limit() -> str:
    given = os.environ.get(MEMORY_LIMIT_VARIABLE, "").strip()
    if given:
        return given
    return f"{physical_memory_bytes() // 2 // 2**20}MB"


# Without a tighter limit, DuckDB keeps in memory what it would spill or drop under one: the report's analyses took
# 341 MB over the tables of a 57 MB trace with half of RAM allowed, 255 MB at 270 MB (same results, same CPU time);
# 1,252 vs 1,053 MB on a 240 MB trace at 1.14 GB (bench/RESULTS.md, 2026-11-25).
INPUT_MEMORY_FACTOR = 3
MIN_INPUT_MEMORY_BYTES = 256 * 2**20  # the critical-path walk of a 35 MB trace fits in this (tests/query)
# ... with 2 DuckDB threads: each thread holds buffers of its own, and 16 threads over OWLv2's tables ran out of
# 256 MiB (critical_path_top, 1 report in 6 on 16 cores: bench/RESULTS.md, "Many cores")
MIN_THREAD_MEMORY_BYTES = MIN_INPUT_MEMORY_BYTES // 2


def limit_to_input(con: duckdb.DuckDBPyConnection, input_bytes: int) -> None:
    """Hold `con` to INPUT_MEMORY_FACTOR times the bytes of the tables it reads (at least MIN_INPUT_MEMORY_BYTES and
    MIN_THREAD_MEMORY_BYTES per DuckDB thread, at most the default); a limit the user set (`TRACEKIT_MEMORY_LIMIT`)
    is left as it is."""
    if os.environ.get(MEMORY_LIMIT_VARIABLE, "").strip():
        return
    floor = max(MIN_INPUT_MEMORY_BYTES, MIN_THREAD_MEMORY_BYTES * duckdb_threads(con))
    limit = min(physical_memory_bytes() // 2, max(floor, INPUT_MEMORY_FACTOR * input_bytes))
    con.execute(f"set memory_limit = '{limit // 2**20}MiB'")


# Below this many bytes of tables, a second DuckDB thread costs more than it gives: the report's analyses of a
# 2.5k-event trace (~1 MB of tables) took 1.0 instead of 1.2 CPU s on one thread (bench/RESULTS.md, 2026-11-25).
SMALL_INPUT_BYTES = 8 * 2**20
# ... and above it no more than this: on 16 cores (bench/RESULTS.md, "Many cores") a report of OWLv2 took as long
# with 4 DuckDB threads as with 16 (3.42 against 3.32 s, medians of 3) for 17% less CPU (9.0 against 10.8 s), an
# ingest 2.23 against 2.20 s; the analyses run up to MAX_QUERY_WORKERS queries at once besides
MAX_INPUT_THREADS = 4


def threads_for_input(input_bytes: int) -> int:
    """The most DuckDB threads for a connection over tables of `input_bytes` (`connect`'s AT_MOST): one for small
    tables, else MAX_INPUT_THREADS."""
    return 1 if input_bytes < SMALL_INPUT_BYTES else MAX_INPUT_THREADS


# Queries run at once by a run of several analyses (`analyses.run_all`), each on a thread of its own: the report's
# analyses of the A100 trace took 1.32-1.63 s of wall time with 2 at a time on 2 cores, 1.74-2.25 s one at a time,
# and 3 or 4 at a time gave no more there (bench/RESULTS.md).
MAX_QUERY_WORKERS = 4


def query_workers(threads: int | None = None) -> int:
    """How many analyses a run runs at once: THREADS when given (a caller that caps DuckDB's threads caps this
    too), else the CPUs this process may use, at most MAX_QUERY_WORKERS."""
    return threads or min(MAX_QUERY_WORKERS, usable_cpus())


@contextmanager
def threads_shared(con: duckdb.DuckDBPyConnection) -> Iterator[Callable[[int], None]]:
    """For a block that runs several queries at once on `con`'s database: yields `share(queries)`, which sets
    DuckDB's threads to each of QUERIES running queries' share of the CPUs this process may use (at least one, at
    most the threads `con` had; a query alone has them all), to be called as that number changes; the threads are
    restored after the block.
    DuckDB's threads are its database's and each query may use them all: W queries at once on C cores ran W times
    C threads. A report of OWLv2 on 2 cores, its analyses 2 at a time: 1.82 s and 3.05 CPU s with 2 threads a query,
    1.70 s and 2.91 CPU s with 1, the same bytes; a query running alone (a chain of shared tables) keeps them all
    (bench/RESULTS.md)."""
    threads, cpus = duckdb_threads(con), usable_cpus()
    now = threads

    def share(queries: int) -> None:
        nonlocal now
        wanted = threads if queries <= 1 else max(1, min(threads, cpus // queries))
        if wanted != now:
            con.execute(f"set threads = {wanted}")
            now = wanted

    try:
        yield share
    finally:
        share(1)  # back to `threads`


def physical_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: DuckDB's own default applies to most of it
        return 8 * 2**30


@cache
def spill_dir() -> Path:
    """This process's spill folder (made once; removed at exit), after removing those of dead processes."""
    root = Path(tempfile.gettempdir()) / SPILL_ROOT_NAME
    root.mkdir(parents=True, exist_ok=True)
    remove_orphans(root)
    mine = root / str(os.getpid())
    shutil.rmtree(mine, ignore_errors=True)  # a dead process's folder under a reused pid
    mine.mkdir()
    atexit.register(shutil.rmtree, mine, True)
    return mine


def remove_orphans(root: Path) -> None:
    for folder in root.iterdir():
        if folder.name.isdigit() and int(folder.name) != os.getpid() and not process_runs(int(folder.name)):
            shutil.rmtree(folder, ignore_errors=True)


def process_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
