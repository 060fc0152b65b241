"""Run the analyses of the SQL catalog over `TraceTables`: each after the analyses it reads, on one database.

An input may be another analysis (e.g. `-- inputs: op_summary, ranks` in the cross-rank queries): it is run first
and its result kept in a table of its name, so a query reads it like a table. The order comes from the catalog's
one resolver (`catalog.analysis_order`); what is bound here is the materialised result (a run of several analyses
shares each result), where `catalog.prepare` binds a view.

A run of several analyses (`run_all`) runs them several at a time, each on a cursor of the same database: DuckDB
runs a query on the thread that asks for it, without the GIL, and most of a report's queries are too small for
DuckDB to spread one over the cores (the report's analyses of the A100 trace used 1.3 of 2 cores one at a time,
bench/RESULTS.md). Each analysis still waits for the analyses it reads and for the shared tables it calls
(`catalog.shared_tables`, each computed once); the results are the same bits in any order
(tests/query/test_determinism.py). While several run at once, each gets its share of the CPUs as DuckDB threads;
one running alone gets them all (`connection.threads_shared`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from functools import cache
from typing import TypeVar

import duckdb
import polars as pl

from tracekit.engine import catalog, connection
from tracekit.engine.catalog import analysis_inputs, analysis_order, available, connect, ready
from tracekit.engine.tables import TraceTables

__all__ = ["Arrivals", "analysis_inputs", "in_background", "run", "run_all", "run_into"]

T = TypeVar("T")


def run(tables: TraceTables, name: str, con: duckdb.DuckDBPyConnection | None = None) -> pl.DataFrame:
    """The result of queries/NAME.sql over `tables` (on `con` when given: one made by `connect`); the analyses it
    reads are run first."""
    if con is not None:
        return run_into(con, name, {})
    with connect(tables) as fresh:
        return run_into(fresh, name, {})


@contextmanager
def in_background(con: duckdb.DuckDBPyConnection, tables: TraceTables, work: Callable[[duckdb.DuckDBPyConnection], T],
                  bound: dict | None = None) -> Iterator[Callable[[], T]]:
    """WORK(cursor) on a cursor of `con`'s database (TABLES, and the Arrow tables BOUND, registered on it), in a
    thread, while the block does other work: yields a function that waits for WORK's result and returns it. DuckDB
    runs a query without the GIL, so the block's Python and Polars work, or a query of its own, goes on beside it
    (a query of ~100k rows runs on one core). WORK out of memory beside the block's queries runs again when waited
    for, as `run_all` runs such a query again alone (the memory limit is the database's). Leaving the block before
    the result (an error, Ctrl-C) interrupts the query."""
    cur = catalog.cursor(con, tables, bound)
    pool = ThreadPoolExecutor(1, thread_name_prefix="tracekit-query")
    future = pool.submit(work, cur)

    def result() -> T:
        try:
            return future.result()
        except duckdb.OutOfMemoryException:
            return work(cur)

    try:
        yield result
    except BaseException:
        cur.interrupt()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        cur.close()


def run_into(con: duckdb.DuckDBPyConnection, name: str, results: dict[str, pl.DataFrame],
             failures: dict[str, str] | None = None) -> pl.DataFrame | None:
    """Run NAME on `con` after the analyses it reads, one after the other, each result kept in a table of its name.

    `results` caches what already ran. With `failures`, a query that is missing or fails (or needs one that did)
    is recorded there as a one-line reason and None returned, instead of raising.
    """
    if name in results:
        return results[name]
    failed = {} if failures is None else failures
    for step in steps_of([name], results, failed, failures is not None):
        if step not in failed:
            run_step(con, step, results, failed, failures is not None, keep=step == name)
    return results.get(name)


def steps_of(names: list[str], results: dict[str, pl.DataFrame], failed: dict[str, str], record: bool) -> list[str]:
    """NAMES and the analyses they read, each after those it reads, in the order one at a time runs them (a
    missing one in its place, recorded in FAILED with `record`, else raised: FileNotFoundError); those in RESULTS
    left out."""
    steps = []
    for name in names:
        try:
            steps += [name] if name in failed else analysis_order(name)
        except FileNotFoundError as exc:
            if not record:
                raise
            failed[name] = str(exc)
            steps.append(name)
    return [step for step in dict.fromkeys(steps) if step not in results]


def run_step(con: duckdb.DuckDBPyConnection, step: str, results: dict[str, pl.DataFrame], failed: dict[str, str],
             record: bool, keep: bool = True) -> None:
    """Run analysis STEP on `con` (the analyses it reads have run) into a table of its name, and with `keep` into
    RESULTS as well; with `record`, an error (or a failed input) is recorded in FAILED as one line instead of
    raised."""
    try:
        for dep in analysis_inputs(step):
            if dep in failed:
                raise LookupError(f"needs {dep}, which failed: {failed[dep]}")
        # kept in a table of its name, which the analyses after it read: `con.sql(query).pl()` would bind the
        # query twice (once for the relation's schema, once to run it), ~0.1 CPU s of a report's analyses
        con.execute(f"create or replace table {step} as {ready(con, step)}")
        # only what the caller asked for leaves DuckDB: an analysis that only others read stays a table (the
        # critical path's 297k segments of a 53 MB inference trace: 0.16 s and +87 MB as a Polars frame)
        if keep:
            results[step] = con.table(step).pl()
    except (LookupError, duckdb.Error) as exc:
        if not record:
            raise
        failed[step] = one_line(exc)


def one_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def run_all(tables: TraceTables, names: list[str] | None = None, failures: dict[str, str] | None = None,
            progress=None, threads: int | None = None, given: dict[str, pl.DataFrame] | None = None,
            con: duckdb.DuckDBPyConnection | None = None, free_shared: bool = False,
            arrivals: Arrivals | None = None) -> dict[str, pl.DataFrame]:
    """Several analyses over one database (tables registered, shared macros computed once, each result shared
    with the analyses that read it), several at a time (`connection.query_workers`): `names`, or every analysis
    when None (none, and no connection made, for an empty list).

    With `failures`, missing or failing queries are reported there (in the order they would run) instead of
    raised; `progress(name)` is called after each requested analysis; `threads` as in `connect`, and at most that
    many analyses at a time. `given` results (computed elsewhere, e.g. each rank's on its own tables) are read by
    the analyses as they are, not run again. On `con` when given (one made by `connect(tables, materialize=True)`,
    which the caller uses further), else on a connection of its own. With `free_shared` (always on a connection of
    its own; a caller's once it runs nothing more on it) each shared table is dropped once the analyses that read it
    have run. `arrivals` is handed each requested analysis's result (or why it failed) as it ends, for a consumer in
    another thread (`Arrivals.wait_for`).
    """
    if names is not None and not names:
        return {}
    if con is None:
        with connect(tables, materialize=True, threads=threads) as fresh:
            return run_all(tables, names, failures, progress, threads, given, fresh, free_shared=True,
                           arrivals=arrivals)
    results: dict[str, pl.DataFrame] = dict(given or {})
    wanted = available() if names is None else names
    failed = dict(failures or {})
    order = steps_of(wanted, results, failed, failures is not None)
    steps = [step for step in order if step not in failed]
    # only the given results an analysis reads: a report's cross-rank run is given every per-rank result (27 of
    # them), and converting and binding them all took ~0.15 s of a one-rank report, which reads one
    read = {dep for step in steps for dep in analysis_inputs(step)}
    bound = {name: frame.to_arrow() for name, frame in results.items() if name in read}
    for name, table in bound.items():
        con.register(name, table)
    if arrivals is not None:  # those given, and those that failed before running (a missing query file)
        for name in wanted:
            if name in results or name in failed:
                arrivals.arrive(name, results.get(name), failed.get(name))

    kept = set(wanted)

    def done(step: str) -> None:
        if step not in kept:
            return
        if arrivals is not None:
            arrivals.arrive(step, results.get(step), failed.get(step))
        if progress:
            progress(step)

    workers = connection.query_workers(threads)
    if workers > 1 and len(steps) > 1:
        run_concurrently(con, tables, bound, steps, kept, results, failed, failures is not None, workers, done,
                         free_shared=free_shared)
    else:
        for step in steps:
            run_step(con, step, results, failed, failures is not None, keep=step in kept)
            done(step)
    if failures is not None:  # in the order the analyses run one at a time
        failures.update({name: failed[name] for name in order if name in failed})
    return {name: results[name] for name in wanted if name in results}


def run_concurrently(con: duckdb.DuckDBPyConnection, tables: TraceTables, bound: dict, steps: list[str],
                     kept: set[str], results: dict[str, pl.DataFrame], failed: dict[str, str], record: bool,
                     workers: int, done, free_shared: bool = False) -> None:
    """Run analyses STEPS (in `steps_of` order, none failed yet; those in KEPT into RESULTS, as `run_step`) on
    WORKERS cursors of `con`'s database at once (TABLES and the given results BOUND registered on each): each
    after the analyses it reads and the shared tables it calls (a node `macro:NAME` each, computed once),
    `done(step)` called here as each analysis ends. A node that runs out of memory beside others runs again alone
    once the others end (the memory limit is the database's). With `free_shared`, a shared table this run computed
    is dropped once every node that reads it has run."""
    def calls(node: str) -> frozenset[str]:
        """The macros an analysis, or a shared table's definition (`macro:NAME`), calls."""
        if node in steps:
            return catalog.query_macros(node)
        return catalog.macro_calls(catalog.macro_definitions()[node.removeprefix("macro:")])

    needs = {step: {f"macro:{m}" for m in catalog.shared_tables(con, calls(step))}
             | {dep for dep in analysis_inputs(step) if dep in steps} for step in steps}
    # a step's shared tables include those they read (`shared_tables` follows the calls): each waits for those
    for table in sorted({n for waits in list(needs.values()) for n in waits if n.startswith("macro:")}):
        needs[table] = {f"macro:{m}" for m in catalog.shared_tables(con, calls(table))}
    # the shared tables of this run each node reads itself: the critical path's stages (OWLv2: 125 MB of tables)
    # are freed once the walk is made from them, before the sums of the walk run (the report's peak)
    reads = {node: {f"macro:{m}" for m in catalog.read_shared_tables(con, calls(node))} & needs.keys()
             for node in needs} if free_shared else {}
    readers = {table: {node for node in reads if table in reads[node]} for table in needs if table not in steps}
    made = [catalog.cursor(con, tables, bound) for _ in range(workers)]
    cursors: queue.SimpleQueue = queue.SimpleQueue()
    for cur in made:
        cursors.put(cur)
    macro_failed: dict[str, str] = {}
    stopping = threading.Event()

    def run_node(node: str) -> None:
        cur = cursors.get()
        try:
            if stopping.is_set():  # an interrupt reaches only the queries already running
                raise duckdb.InterruptException(f"{node}: not started, the run is stopping")
            if node in steps:
                run_step(cur, node, results, failed, record=False, keep=node in kept)
            else:
                catalog.materialize_macro(cur, node.removeprefix("macro:"))
        finally:
            cursors.put(cur)

    pending = start_order(needs, steps, {step for step in steps if catalog.walks_critical_path(step)})
    running, finished, alone = {}, set(), []
    with connection.threads_shared(con) as share:
        pool = ThreadPoolExecutor(workers, thread_name_prefix="tracekit-query")
        try:
            while pending or running or alone:
                starting = []  # (node, alone), started once DuckDB's threads are shared among what will run
                if alone and not running:
                    starting.append((alone.pop(0), True))
                while not alone and len(running) + len(starting) < workers:
                    ready = next((n for n in pending if needs[n] <= finished), None)
                    if ready is None:
                        break
                    pending.remove(ready)
                    blocked = sorted(n for n in needs[ready] if n in macro_failed)
                    if blocked:  # as it fails one at a time: with the shared table's own error
                        (failed if ready in steps else macro_failed)[ready] = macro_failed[blocked[0]]
                        finished.add(ready)
                        done(ready)
                        continue
                    starting.append((ready, False))
                share(len(running) + len(starting))
                for node, is_alone in starting:
                    running[pool.submit(run_node, node)] = (node, is_alone)
                if not running:
                    if not alone:
                        raise RuntimeError(f"analyses that wait on each other: {sorted(pending)}")
                    continue
                ended, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in ended:
                    node, was_alone = running.pop(future)
                    error = future.exception()
                    if isinstance(error, duckdb.OutOfMemoryException) and not was_alone:
                        alone.append(node)
                        continue
                    if error is not None:
                        if not (record and isinstance(error, (LookupError, duckdb.Error))):
                            raise error
                        (failed if node in steps else macro_failed)[node] = one_line(error)
                    finished.add(node)
                    done(node)
                    for table in reads.get(node, ()):
                        if readers[table] <= finished and table not in macro_failed:
                            catalog.drop_shared_table(con, table.removeprefix("macro:"))
        except BaseException:  # Ctrl-C, or an error raised: the queries still running stop now, not when they end
            stopping.set()
            for cur in made:
                cur.interrupt()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            for cur in made:
                cur.close()


def start_order(needs: dict[str, set[str]], steps: list[str], walkers: set[str]) -> list[str]:
    """The nodes of a run (NEEDS: each node → the nodes it waits on) in the order they are started as they become
    ready: first what the WALKERS (the steps that read the critical path's walk) wait on, with them (the walk's
    shared tables: half the instructions of a report's analyses, one after the other); then the others. Each group
    by the longest chain of nodes waiting on a node (started last, a chain runs alone at the end: A100 trace, 2.45
    s, 1.25 s of it the walk's), then in the order the STEPS were asked for, each node at the place of the first
    step that waits on it (a report writes its sheets in that order as their analyses end), then by the longest
    chain behind it. By place before chain, the chain behind a sheet in the middle (gemm, op_perf, roofline: the
    Roofline and Perf sheets) ended last, and the writer wrote every sheet after it alone at the end (OWLv2: 0.3-0.4
    s of one core); the sheets' own analyses (chains of one) now run last, in sheet order, and the writer keeps up
    with them."""
    waiting = {node: [n for n in needs if node in needs[n]] for node in needs}

    @cache
    def chain(node: str) -> int:
        return 1 + max(map(chain, waiting[node]), default=0)

    @cache
    def behind(node: str) -> int:
        return 1 + max(map(behind, needs[node]), default=0)

    @cache
    def before(node: str) -> frozenset[str]:
        return frozenset(needs[node]).union(*map(before, needs[node]))

    asked = {step: i for i, step in enumerate(steps)}

    @cache
    def place(node: str) -> int:
        return asked[node] if node in asked else min(map(place, waiting[node]), default=len(steps))

    walk = set(walkers).union(*map(before, walkers))
    return sorted(needs, key=lambda n: (n not in walk, -chain(n), 0 if n in walk else place(n), -behind(n)))


class RunStopped(Exception):
    """The run the consumer of `Arrivals` waited on ended before what it waited for arrived (an error, Ctrl-C)."""


class Arrivals:
    """Analyses' results (or why each failed) as a run hands them over (`run_all(arrivals=...)`), for a consumer in
    another thread that waits for those it needs: a report writes each sheet once the analyses it shows have ended,
    beside the analyses still running. EXPECTED: the analyses the run was asked for (a wait for any other returns at
    once: that one is not coming). Made with RESULTS and FAILURES, it holds a run that has ended."""

    def __init__(self, expected: Iterable[str] = (), results: dict[str, pl.DataFrame] | None = None,
                 failures: dict[str, str] | None = None):
        self.expected = frozenset(expected)
        self.results = dict(results or {})
        self.failures = dict(failures or {})
        self._ended = set(self.results) | set(self.failures)
        self._changed = threading.Condition()
        self._stopped = False

    def arrive(self, name: str, result: pl.DataFrame | None, failure: str | None) -> None:
        with self._changed:
            if failure is not None:
                self.failures[name] = failure
            elif result is not None:
                self.results[name] = result
            self._ended.add(name)
            self._changed.notify_all()

    def stop(self) -> None:
        """The run has ended: a consumer waiting for what has not arrived (the run failed), or about to, stops
        (`RunStopped`)."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    def wait_for(self, names: Iterable[str]) -> None:
        """Return once each of NAMES that is expected has ended; raise RunStopped if the run stopped first."""
        pending = [name for name in names if name in self.expected]
        with self._changed:
            self._changed.wait_for(lambda: self._stopped or all(name in self._ended for name in pending))
            if self._stopped and not all(name in self._ended for name in pending):
                raise RunStopped


def combine_ranks(parts: list[dict[str, pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    """Per-rank analysis results computed on parts of the ranks (each file's own tables), as one run over all of
    them gives them: each analysis's rows of every part, rank by rank (a per-rank analysis orders by rank first,
    and its rows for a rank depend on that rank's rows only: tests/query/test_per_rank.py)."""
    names = list(dict.fromkeys(name for part in parts for name in part))
    combined = {}
    for name in names:
        frames = [part[name] for part in parts if name in part]
        frame = frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical_relaxed")
        combined[name] = frame.sort("rank", maintain_order=True) if "rank" in frame.columns else frame
    return combined
