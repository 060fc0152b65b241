"""Every DuckDB connection is bounded in memory and spills into a folder of its own under the system's temporary
directory, which is gone after the process ends, even after a crash of an earlier process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO
from tracekit import synth

# Sorting 10M random integers needs more than 40 MB: DuckDB must spill (or fail) under that limit.
SPILLING_SCRIPT = textwrap.dedent("""
    import os, sys
    from tracekit.engine import connection
    with connection.connect() as con:
        print(con.execute("select current_setting('memory_limit'), current_setting('temp_directory')").fetchone())
        con.execute("create table t as select (random() * 1e9)::bigint as v from range(10000000)")
        print(con.execute("select count(*) from (select v from t order by v)").fetchone()[0])
        print(con.execute("select count(*) from duckdb_temporary_files()").fetchone()[0] > 0)
    if len(sys.argv) > 1:
        os.kill(os.getpid(), 9)  # a crash: nothing at exit runs
""")


def run_script(tmp_path: Path, *args: str, limit: str = "40MB") -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "TRACEKIT_MEMORY_LIMIT": limit}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    (tmp_path / "cwd").mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-c", SPILLING_SCRIPT, *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path / "cwd", timeout=300, check=False)


def test_connections_spill_into_the_system_temp_dir_and_clean_up(tmp_path):
    result = run_script(tmp_path)
    assert result.returncode == 0, result.stderr
    setting, temp_dir = eval(result.stdout.splitlines()[0])
    assert setting.replace(" ", "").upper().startswith(("38.1MIB", "40.0MB", "38.1MB", "40MB")), setting
    assert Path(temp_dir).parent == tmp_path / "tmp" / "tracekit-duckdb"
    assert result.stdout.splitlines()[1:3] == ["10000000", "True"], "the sort spilled"
    assert list((tmp_path / "cwd").iterdir()) == [], "nothing spilled under the current directory"
    assert list((tmp_path / "tmp" / "tracekit-duckdb").iterdir()) == [], "the spill folder is removed at exit"


def test_a_crashed_process_spill_folder_is_removed_by_the_next(tmp_path):
    crashed = run_script(tmp_path, "crash")
    assert crashed.returncode == -9, crashed.stderr
    left = list((tmp_path / "tmp" / "tracekit-duckdb").iterdir())
    assert len(left) == 1, "the killed process left its folder"
    after = run_script(tmp_path)
    assert after.returncode == 0, after.stderr
    assert list((tmp_path / "tmp" / "tracekit-duckdb").iterdir()) == []


def test_a_bad_memory_limit_is_one_error_line(tmp_path):
    synth.generate(tmp_path, ranks=1, steps=1, seed=1)
    env = {**os.environ, "TRACEKIT_MEMORY_LIMIT": "lots"}
    result = subprocess.run([sys.executable, "-m", "tracekit.cli", "sql", "select 1", str(tmp_path / "rank0.json")],
                            env=env, capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("tracekit: error: TRACEKIT_MEMORY_LIMIT=lots: not a memory limit"), result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_the_analyses_connection_is_held_to_the_size_of_its_tables(monkeypatch):
    """`catalog.connect(materialize=True)` (the report's analyses) sets a limit in proportion to the tables, never
    under the floor nor over the default; a limit the user set is kept."""
    import pyarrow as pa

    from tracekit.engine import catalog, connection
    from tracekit.engine.tables import TraceTables

    units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 10**3, "MB": 10**6, "GB": 10**9}

    def limit_bytes(tables: TraceTables) -> float:
        with catalog.connect(tables, materialize=True) as con:
            number, unit = con.execute("select current_setting('memory_limit')").fetchone()[0].split()
            return float(number) * units[unit]

    monkeypatch.delenv(connection.MEMORY_LIMIT_VARIABLE, raising=False)
    assert limit_bytes(TraceTables()) == 256 * 2**20, "the floor, for tiny inputs"
    ballast = pa.table({"x": pa.array(range(16 * 2**20), pa.int64())})  # 128 MiB of a table the analyses read
    expected = min(connection.physical_memory_bytes() // 2, 3 * ballast.nbytes)
    assert abs(limit_bytes(TraceTables(diagnostics=ballast)) - expected) < 2**20
    monkeypatch.setenv(connection.MEMORY_LIMIT_VARIABLE, "300MB")
    assert abs(limit_bytes(TraceTables(diagnostics=ballast)) - 300 * 10**6) < 2**20, "the user's limit"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs affinity masks (Linux) and 2 CPUs to leave one out")
def test_a_process_pinned_to_one_cpu_runs_one_thread_of_each_kind():
    """Under an affinity mask (taskset, a Slurm job's cpuset), DuckDB's default counts the machine's cores: a
    connection then ran 2 threads on one CPU. Here it has one, a run of analyses runs one at a time, and a large
    file's read starts no helper process; without the mask, more than one of each."""
    code = ("import os, sys\n"
            "if sys.argv[1] == 'pinned': os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
            "from tracekit.engine import connection\n"
            "from tracekit.read.chunk_workers import ChunkHelpers\n"
            "con = connection.connect()\n"
            "print(con.execute(\"select current_setting('threads')\").fetchone()[0], connection.query_workers(),"
            " ChunkHelpers().count)\n")
    counts = {mode: subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, cwd=REPO,
                                   timeout=120, check=True).stdout.split()
              for mode in ("pinned", "free")}
    assert counts["pinned"] == ["1", "1", "0"], counts
    assert all(int(n) > 1 for n in counts["free"][:2]) and int(counts["free"][2]) >= 1, counts


def test_a_trace_connection_runs_at_most_four_duckdb_threads_each_with_its_share_of_memory(monkeypatch):
    """Over a trace's tables DuckDB runs at most 4 threads, fewer where fewer CPUs are usable (16 gave the report
    no speed on 16 cores, for 17% more CPU), and the memory floor grows with the threads (16 threads ran out of the
    256 MiB floor): 128 MiB a thread."""
    import pyarrow as pa

    from tracekit.engine import catalog, connection
    from tracekit.engine.tables import TraceTables
    from tracekit.machine import usable_cpus

    monkeypatch.delenv(connection.MEMORY_LIMIT_VARIABLE, raising=False)
    ballast = pa.table({"x": pa.array(range(2 * 2**20), pa.int64())})  # 16 MiB: not a small input
    def trace_threads() -> int:
        with catalog.connect(TraceTables(diagnostics=ballast), materialize=True) as con:
            return con.execute("select current_setting('threads')").fetchall()[0][0]

    with connection.connect() as con:
        duckdb_default = con.execute("select current_setting('threads')").fetchall()[0][0]
    assert trace_threads() == min(4, usable_cpus(), duckdb_default)
    # the cap reaches a trace's connection (on 2 CPUs 4 is no cap: 1 is)
    monkeypatch.setattr(connection, "MAX_INPUT_THREADS", 1)
    assert trace_threads() == 1
    for threads, floor_mib in ((1, 256), (2, 256), (4, 512), (16, 2048)):
        with connection.connect(threads=threads) as con:
            connection.limit_to_input(con, 1024)
            limit = con.execute("select current_setting('memory_limit')").fetchone()[0]
            expected = min(connection.physical_memory_bytes() // 2, floor_mib * 2**20)
            assert abs(float(limit.split()[0]) * {"MiB": 2**20, "GiB": 2**30}[limit.split()[1]] - expected) < 2**20, \
                (threads, limit)


def test_queries_run_at_once_share_the_cpus_as_duckdb_threads(monkeypatch):
    """N queries at once on C usable CPUs: DuckDB runs C // N threads (at least one, at most the connection's; a
    query alone has all of the connection's), and the connection's threads are back after the block: 2 analyses at
    a time with 2 threads each ran 4 threads on 2 cores, a report 7% slower, and a chain of shared tables running
    alone on one thread was 20% slower (bench/RESULTS.md)."""
    from tracekit.engine import connection

    for cpus, running, expected in ((8, (1, 2, 3, 4, 8, 16, 2, 1), [4, 4, 2, 2, 1, 1, 4, 4]),
                                    (2, (2, 1, 3), [1, 4, 1])):  # a connection given more threads than CPUs
        monkeypatch.setattr(connection, "usable_cpus", lambda cpus=cpus: cpus)
        with connection.connect(threads=4) as con:
            with connection.threads_shared(con) as share:
                seen = []
                for queries in running:
                    share(queries)
                    seen.append(connection.duckdb_threads(con))
            assert seen == expected, cpus
            assert connection.duckdb_threads(con) == 4, cpus


def test_analyses_run_at_once_share_the_cpus_as_duckdb_threads(monkeypatch, tmp_path):
    """Seen from inside a run, by each node's own cursor (an analysis, or a shared table): on 2 CPUs, a node that
    reads the setting while another node is in flight runs one DuckDB thread (with 2 workers, no third node can
    end and change it meanwhile), and some node that ran alone had both (the critical path's chain: a share by
    workers gave it one); one at a time, each has all of the connection's; the setting is back after the run."""
    import threading

    import tracekit
    from tracekit.engine import catalog, connection
    from tracekit.query import analyses

    synth.generate(tmp_path, ranks=1, steps=2, seed=3)
    tables = tracekit.load([tmp_path / "rank0.json"])
    seen: list[tuple[int, int]] = []  # (threads, nodes in flight) as each node starts
    lock = threading.Lock()
    in_flight = [0]

    def recorded(run):
        def node(cur, *args, **kwargs):
            with lock:
                in_flight[0] += 1
                seen.append((connection.duckdb_threads(cur), in_flight[0]))
            try:
                return run(cur, *args, **kwargs)
            finally:
                with lock:
                    in_flight[0] -= 1
        return node

    monkeypatch.setattr(analyses, "run_step", recorded(analyses.run_step))
    monkeypatch.setattr(catalog, "materialize_macro", recorded(catalog.materialize_macro))
    monkeypatch.setattr(connection, "usable_cpus", lambda: 2)
    # many analyses side by side (chains of shared tables started together: whether one is then left alone depends
    # on their times); the critical path's chain of shared tables, most of which runs alone; one at a time
    runs = [(["op_summary", "kernel_summary", "gpu_timeline", "step_stats", "op_categories"], 2, None),
            (["critical_path_top", "critical_path_categories"], 2, {1, 2}),
            (["op_summary", "kernel_summary", "gpu_timeline"], 1, {2})]
    for names, workers, expected in runs:
        seen.clear()
        with catalog.connect(tables, materialize=True, threads=2) as con:
            analyses.run_all(tables, names, threads=workers, con=con)
            after = connection.duckdb_threads(con)
        assert len(seen) >= len(names), seen
        threads = {threads for threads, _ in seen}
        assert threads <= {1, 2} and (expected is None or threads == expected), (names, seen)
        if workers == 2:  # one beside another
            assert {threads for threads, flying in seen if flying == 2} == {1}, (names, seen)
        assert after == 2, names
