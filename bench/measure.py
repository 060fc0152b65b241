"""How the bench suite measures a command: a fresh child process, its wall and CPU time, and its peak RSS (its own, or
with its child processes' added, such as the reader's helpers, where that is larger: `_launch`).

Peak RSS: Linux carries a process's peak across fork and exec (fork copies the parent's memory map and its high-water
mark; exec folds the old map's mark into the new program's `ru_maxrss`), so `os.wait4` on a child of a 300 MB
benchmark process reports at least 300 MB, even for `python -c pass`. Each command is therefore started by a small
fresh launcher (`python -S measure.py --launch CMD...`, a few MB): the command inherits the launcher's peak, not
ours, and the launcher reads the command's `wait4` rusage and prints it. `python bench/measure.py --self-check` shows
the difference (a 300 MB parent: wait4 from the parent against the launcher).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "traces"
LAUNCHER = Path(__file__).resolve()


def trace_path(name: str) -> Path:
    """A bench trace by name: `recorded/FILE` is one of bench/recorded (inference traces recorded for the benches),
    any other name a path under the shared traces (an absolute path stays as it is)."""
    return REPO / "bench" / name if name.startswith("recorded/") else SHARED / name


@dataclass(frozen=True)
class Run:
    """One run of a command in a fresh process."""
    wall: float  # seconds, measured by the launcher around the command
    cpu: float  # user + system seconds of the command (all its threads and children)
    peak_mb: float  # the command's peak RSS (MiB): its own, or its processes' together where larger (_launch)
    exit_code: int
    stderr: str


def run_fresh(cmd: list[str], ok_codes: tuple[int, ...] = (0,), repo: Path = REPO, cwd: Path | None = None) -> Run:
    """Run CMD through the launcher with REPO's tracekit first on the path, in REPO unless CWD is given; SystemExit
    unless its exit code is in OK_CODES.

    In REPO: `python -m` and `python -c` put their working directory before PYTHONPATH, so a command run in another
    checkout (the bench's own, where it is started) would import that checkout's tracekit, not REPO's."""
    env = {**os.environ, "PYTHONPATH": str(repo)}
    proc = subprocess.run([sys.executable, "-S", str(LAUNCHER), "--launch", *cmd], env=env,
                          cwd=repo if cwd is None else cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stderr = proc.stderr.decode(errors="replace")
    if proc.returncode != 0 or not proc.stdout.strip():
        raise SystemExit(f"launcher failed on {' '.join(cmd)}: {stderr[-2000:]}")
    costs = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    run = Run(costs["wall"], costs["cpu"], costs["peak_mb"], costs["exit_code"], stderr)
    if run.exit_code not in ok_codes:
        raise SystemExit(f"{' '.join(cmd)} failed ({run.exit_code}): {stderr[-2000:]}")
    return run


def failure(cmd: list[str]) -> str | None:
    """The last line CMD writes to stderr when it exits with an error (run once, as run_fresh runs it); None when it
    succeeds."""
    run = run_fresh(cmd, ok_codes=tuple(range(256)))
    lines = [line.strip() for line in run.stderr.splitlines() if line.strip()]
    return (lines[-1] if lines else f"exit code {run.exit_code}") if run.exit_code else None


def tracekit_cmd(*args: str) -> list[str]:
    """`python -m tracekit.cli ARGS` (the checkout is chosen by run_fresh's `repo`, through PYTHONPATH)."""
    return [sys.executable, "-m", "tracekit.cli", *args]


def median(values) -> float:
    return statistics.median(list(values))


def in_process(function, repeats: int) -> tuple[list[float], object]:
    """Wall seconds of REPEATS calls of FUNCTION in this process, and its last result: for what only runs inside a
    process (a Spark session, tables already loaded); a whole command is measured by run_fresh."""
    seconds, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        seconds.append(time.perf_counter() - started)
    return seconds, result


@dataclass(frozen=True)
class Summary:
    """Medians of several runs of one command, and each run's wall and CPU seconds in the order they ran."""
    wall: float
    cpu: float
    peak_mb: float
    runs: int
    walls: tuple[float, ...] = ()
    cpus: tuple[float, ...] = ()

    @staticmethod
    def of(runs: list[Run]) -> "Summary":
        return Summary(median(r.wall for r in runs), median(r.cpu for r in runs), median(r.peak_mb for r in runs),
                       len(runs), tuple(r.wall for r in runs), tuple(r.cpu for r in runs))

    def cores_used(self) -> float:
        """The median of its runs' CPU ÷ wall: how many cores a run kept busy on average."""
        return median(c / w for c, w in zip(self.cpus, self.walls))


def rounds_where(numerator: Summary, denominator: Summary, target: float, at_least: bool = True) -> str:
    """In how many alternating rounds numerator ÷ denominator (each round's walls) was at least TARGET (at most, with
    AT_LEAST false), as "k/n": on a machine whose speed moves within minutes, how often a ratio holds says more than
    the ratio of two medians."""
    ratios = [n / d for n, d in zip(numerator.walls, denominator.walls)]
    return f"{sum(r >= target if at_least else r <= target for r in ratios)}/{len(ratios)}"


def rounds_within(whole: Summary, parts: list[Summary], slack: float) -> str:
    """In how many alternating rounds WHOLE's wall was at most the walls of PARTS in that round plus SLACK seconds
    (a diff against its two loads + 1 s), as "k/n"."""
    budgets = [sum(walls) + slack for walls in zip(*(part.walls for part in parts))]
    return f"{sum(w <= b for w, b in zip(whole.walls, budgets))}/{len(budgets)}"


def cores_needed(numerator: Summary, denominator: Summary, target: float, cores: int) -> str:
    """Each alternating round's cores DENOMINATOR would have had to keep busy, with the CPU it used, for numerator ÷
    denominator (their walls) to reach TARGET: its CPU seconds ÷ (numerator's wall ÷ TARGET); their median and range,
    and the rounds that needed more than the machine's CORES (there no packing of the work reaches TARGET: only less
    CPU does). Beside `Summary.cores_used`, it tells a round lost to idle cores from one lost to CPU."""
    needed = sorted(c / (n / target) for n, c in zip(numerator.walls, denominator.cpus))
    over = sum(x > cores for x in needed)
    return (f"{median(needed):.2f} ({needed[0]:.2f}–{needed[-1]:.2f})" if needed else "") + (
        f", {over}/{len(needed)} over {cores}" if over else "")


def alternate(commands: dict[str, tuple[list[str], Path]], repeat: int, ok_codes=(0, 3)) -> dict[str, Summary]:
    """Run each of COMMANDS (label → (cmd, repo)) REPEAT times, alternating run by run so that a change of the
    machine's load hits all alike; their medians by label."""
    runs: dict[str, list[Run]] = {label: [] for label in commands}
    for _ in range(repeat):
        for label, (cmd, repo) in commands.items():
            runs[label].append(run_fresh(cmd, ok_codes, repo))
    return {label: Summary.of(r) for label, r in runs.items()}


def evict_libraries(prefixes: list[Path]) -> tuple[int, int]:
    """Drop the shared libraries under PREFIXES (each environment a table runs: its `*.so*` files) from the page
    cache, so that every command maps them as read from disk; (files, bytes).

    Pages an installer has just written stay in the page cache as large folios, which a process maps whole: on
    2026-12-05 (kernel 6.18, ext4, read_ahead_kb 8192) a process importing the libraries of tracekit's commands
    peaked at 172 MB in a fresh venv and at 112 MB once the libraries' pages had been dropped and read back, and a
    report of OWLv2 at 464 against 402 MB (TraceLens's, 888 and 907 MB: its peak is its Python objects). Those
    extra pages are clean and shared, and go at the next reboot or under memory pressure; a bench on a fresh
    machine measured them. Dirty pages cannot be dropped: each file is synced first."""
    files = size = 0
    for prefix in prefixes:
        for folder, _, names in os.walk(prefix):
            for name in names:
                if ".so" not in name or os.path.islink(path := os.path.join(folder, name)):
                    continue
                try:
                    fd = os.open(path, os.O_RDONLY)
                except OSError:
                    continue
                try:
                    os.fdatasync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    files, size = files + 1, size + os.fstat(fd).st_size
                except OSError:
                    pass
                finally:
                    os.close(fd)
    return files, size


def table(header: list[str], rows: list[list]) -> str:
    """A Markdown table; floats with 2 decimals, the first column left-aligned."""
    def cell(v):
        return f"{v:.2f}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _launch(cmd: list[str]) -> None:
    """The launcher's side: run CMD (its output to our stderr / nowhere), print its costs as one JSON line.

    The peak is the larger of the command's own (wait4) and the sum over the command and its child processes (the
    reader's helpers), sampled every TREE_SAMPLE_S: wait4 gives the largest single process of a tree, not its
    sum."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    tree_peak = [0]
    sampler = threading.Thread(target=_sample_tree, args=(proc.pid, tree_peak), daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    print(json.dumps({"wall": wall, "cpu": usage.ru_utime + usage.ru_stime,
                      "peak_mb": max(usage.ru_maxrss, tree_peak[0]) / 1024,
                      "exit_code": os.waitstatus_to_exitcode(status)}), flush=True)


TREE_SAMPLE_S = 0.01


def _sample_tree(root: int, peak: list[int]) -> None:
    """PEAK[0]: the largest sum of resident KiB over ROOT and its descendants seen, until ROOT ends."""
    while True:
        total, stack = 0, [root]
        while stack:
            pid = stack.pop()
            try:
                with open(f"/proc/{pid}/status") as status:
                    total += next((int(line.split()[1]) for line in status if line.startswith("VmRSS:")), 0)
                with open(f"/proc/{pid}/task/{pid}/children") as children:
                    stack += [int(child) for child in children.read().split()]
            except (OSError, ValueError):
                if pid == root:
                    return
        peak[0] = max(peak[0], total)
        time.sleep(TREE_SAMPLE_S)


def _self_check() -> None:
    """A 300 MB parent: `python -c pass` measured through wait4 directly, and through the launcher."""
    ballast = bytearray(300 * 2**20)
    ballast[::4096] = b"x" * len(ballast[::4096])  # touch every page
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    _, _, usage = os.wait4(proc.pid, 0)
    direct = usage.ru_maxrss / 1024
    launched = run_fresh([sys.executable, "-c", "pass"]).peak_mb
    print(f"python -c pass from a 300 MB parent: wait4 in the parent {direct:.0f} MB, through the launcher "
          f"{launched:.0f} MB")
    if launched > 50:
        raise SystemExit("the launcher reports an inherited peak")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--launch"]:
        _launch(sys.argv[2:])
    elif sys.argv[1:2] == ["--self-check"]:
        _self_check()
    else:
        raise SystemExit(__doc__)
