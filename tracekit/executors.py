"""Where a command's per-rank tasks run: in this process (the default), in a pool of local processes (`--jobs N`), or
on a Dask cluster (`--scheduler`: `tracekit.cluster.scheduler.DaskExecutor`, the only code that imports Dask).

The plan (`tracekit.pipeline.run_plan`) is the same on every executor; an executor only runs its tasks: `map` calls
a top-level function once per task with that task's arguments and gives back each task's value in task order, or
`Lost` for a task whose worker died (its files are left out, with a note). A task's InputError is raised as it is;
any other error fails the command, naming the task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracekit.errors import InputError

if TYPE_CHECKING:
    from tracekit.read.chunk_workers import ChunkHelpers


@dataclass(frozen=True)
class Lost:
    """A task whose worker died (killed, out of memory) more often than the executor retries it, and why."""

    why: str


class InProcess:
    """Every task in this process, one after the other (a single task over all the files: `pipeline.run_plan`);
    its reads share large files' chunks with HELPERS when given (a command's, started before its imports with a
    head start: tracekit/read/chunk_workers.py), else with helpers of their own."""

    in_process = True
    workers = 1

    def __init__(self, helpers: ChunkHelpers | None = None):
        self.helpers = helpers

    def map(self, function: Callable, calls: Sequence[tuple], names: Sequence[str] = ()) -> Iterator:
        return (function(*arguments) for arguments in calls)


class ProcessPool:
    """Tasks in WORKERS local processes (`--jobs N`), started when the block begins and ended with it: a user's
    many-rank report uses their cores without Dask."""

    in_process = False

    def __init__(self, workers: int):
        self.workers = workers
        self.pool = None

    def __enter__(self) -> ProcessPool:
        import multiprocessing  # here: most runs stay in this process, and the import is not free
        from concurrent.futures import ProcessPoolExecutor

        # spawn, not fork: forking a process whose Polars/Arrow thread pools are running can deadlock the child
        self.pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
        return self

    def __exit__(self, *_) -> None:
        self.pool.shutdown(cancel_futures=True)

    def map(self, function: Callable, calls: Sequence[tuple], names: Sequence[str] = ()) -> Iterator:
        from concurrent.futures.process import BrokenProcessPool

        futures = [self.pool.submit(function, *arguments) for arguments in calls]
        try:
            for i, future in enumerate(futures):
                try:
                    yield future.result()
                except BrokenProcessPool as exc:  # a worker died: every task still pending fails with it
                    raise RuntimeError(f"{task_name(names, i)}: a --jobs worker process died ({exc or 'killed'})"
                                       ) from None
                except Exception as exc:
                    raise_task_error(names, i, exc)
        finally:
            for future in futures:
                future.cancel()


def raise_task_error(names: Sequence[str], i: int, error: BaseException) -> None:
    """A task's error, in this process: an InputError (a user error, one line) as it is; anything else as a
    RuntimeError naming the task's files."""
    if isinstance(error, InputError):
        raise error
    raise RuntimeError(f"{task_name(names, i)}: {type(error).__name__}: {error}") from error


def task_name(names: Sequence[str], i: int) -> str:
    return names[i] if i < len(names) else f"task {i + 1}"
