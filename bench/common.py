"""What the benchmark scripts share: running a command in a fresh process and reading its own costs."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "traces"


@dataclass(frozen=True)
class Run:
    wall: float  # seconds
    peak_mb: float  # the process's own peak RSS (os.wait4)
    cpu: float  # user + system seconds
    exit_code: int
    stderr: str


def run_fresh(cmd: list[str], ok_codes: tuple[int, ...] = (0, 3)) -> Run:
    """Run CMD in a fresh process (this checkout's tracekit first on the path); SystemExit unless its exit code is
    one of OK_CODES."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    run = Run(time.perf_counter() - start, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime,
              os.waitstatus_to_exitcode(status), stderr)
    if run.exit_code not in ok_codes:
        raise SystemExit(f"{' '.join(cmd)} failed ({run.exit_code}): {stderr[-2000:]}")
    return run
