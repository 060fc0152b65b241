"""The Dask executor a `--scheduler` names: `local:N` (a cluster of N worker processes on this machine, closed
afterwards) or `tcp://HOST:PORT` (an existing cluster's scheduler). The only module that imports Dask."""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from tracekit.errors import InputError
from tracekit.executors import Lost, raise_task_error

LOCAL = re.compile(r"local:(\d+)")
INSTALL_HINT = "pip install 'tracekit[dask]'"


def check_scheduler(scheduler: str):
    """InputError for a SCHEDULER that is neither local:N (N in 1..1024) nor tcp://...; the local:N match or None."""
    local = LOCAL.fullmatch(scheduler)
    if not local and not scheduler.startswith("tcp://"):
        raise InputError(f"--scheduler {scheduler}: not local:N or tcp://HOST:PORT")
    if local and not 1 <= int(local.group(1)) <= 1024:
        raise InputError(f"--scheduler {scheduler}: N must be 1 to 1024 worker processes")
    return local


@contextmanager
def dask_client(scheduler: str) -> Iterator:
    """A `distributed.Client` for SCHEDULER; InputError for a malformed one, an unreachable one, or no Dask."""
    local = check_scheduler(scheduler)
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise InputError(f"--scheduler {scheduler}: needs Dask ({INSTALL_HINT})") from None
    if local:
        # One thread per worker: a task is one file's DuckDB and Polars work, which use the worker's cores already.
        with warnings.catch_warnings():
            # the scheduler's HTTP server moves to a free port when 8787 is taken, and says so: not the user's concern
            warnings.filterwarnings("ignore", message="Port .* is already in use", category=UserWarning)
            # Dask's own logs not even at ERROR: a worker whose heartbeat meets the scheduler already stopping
            # logs a traceback after a successful run (CI, on a loaded machine); what goes wrong in a run reaches the
            # command as a task's error or a lost file (DaskExecutor.map)
            cluster = LocalCluster(n_workers=int(local.group(1)), threads_per_worker=1, processes=True,
                                   dashboard_address=None, silence_logs=logging.CRITICAL)
        with cluster, Client(cluster) as client:
            yield client
        return
    try:
        client = Client(scheduler, timeout="10s")
    except (OSError, TimeoutError) as exc:
        raise InputError(f"--scheduler {scheduler}: cannot reach the scheduler ({exc})") from None
    with client:
        yield client


def is_worker_death(error: BaseException) -> bool:
    """The task's worker died (more often than the scheduler's allowed-failures): Dask's KilledWorker."""
    from distributed import KilledWorker
    return isinstance(error, KilledWorker)


@contextmanager
def dask_executor(scheduler: str) -> Iterator[DaskExecutor]:
    """The executor of `--scheduler SCHEDULER` for the block (a local cluster is closed after it)."""
    with dask_client(scheduler) as client:
        yield DaskExecutor(client)


class DaskExecutor:
    """Tasks on a Dask cluster (tracekit.executors says what an executor does)."""

    in_process = False

    def __init__(self, client):
        self.client = client

    @property
    def workers(self) -> int:
        return max(1, sum(self.client.nthreads().values()))

    def map(self, function: Callable, calls: Sequence[tuple], names: Sequence[str] = ()) -> Iterator:
        """Each task run to its end, its value in call order. A task that fails otherwise than by its worker's
        death fails the command (after the others are cancelled), naming its files; one whose worker died is Lost.

        Only as many tasks are in flight as the cluster has worker threads, each submitted when one ends: no task
        waits in a worker's queue, so a worker that dies takes only the task it was running with it (Dask counts a
        death against every task assigned to that worker), and a worker holds one group's tables at a time.
        """
        from distributed import as_completed

        pending = list(enumerate(calls))[::-1]
        values: dict[int, object] = {}
        running: dict = {}

        def submit_next():
            i, arguments = pending.pop()
            future = self.client.submit(function, *arguments, pure=False)
            running[future] = i
            return future

        for _ in range(min(len(pending), self.workers)):
            submit_next()
        flow = as_completed(list(running))
        try:
            for future in flow:
                i = running.pop(future)
                values[i] = future_value(future, names, i)
                if pending:
                    flow.add(submit_next())
        finally:
            self.client.cancel(list(running))
        return iter([values[i] for i in range(len(calls))])


def future_value(future, names: Sequence[str], i: int):
    """A finished task's value; Lost when its worker died; its error raised otherwise."""
    if future.status != "error":
        return future.result()
    error = future.exception()
    if is_worker_death(error):
        return Lost(str(error))
    raise_task_error(names, i, error)
