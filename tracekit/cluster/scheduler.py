"""The Dask client a `--scheduler` names: `local:N` (a cluster of N worker processes on this machine, closed
afterwards) or `tcp://HOST:PORT` (an existing cluster's scheduler). The only module that imports Dask."""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from tracekit.errors import InputError

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
            cluster = LocalCluster(n_workers=int(local.group(1)), threads_per_worker=1, processes=True,
                                   dashboard_address=None, silence_logs=logging.ERROR)
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
