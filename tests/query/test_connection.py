"""Every DuckDB connection is bounded in memory and spills into a folder of its own under the system's temporary
directory, which is gone after the process ends, even after a crash of an earlier process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

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
