"""What this process may use of the machine it runs on."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask (taskset, numactl, a Slurm job's or a container's
    cpuset), not the machine's cores. os.cpu_count() counts the machine's, and so does DuckDB's default thread
    count (2.0.1: 2 threads under `taskset -c 0` on 2 cores), which then runs more threads than there are CPUs."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity masks here (macOS, Windows)
        return os.cpu_count() or 1
