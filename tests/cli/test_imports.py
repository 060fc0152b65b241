"""Each command imports what it uses: the libraries a command never calls are not in its process (a command pays for
its imports before it reads a byte: bench/RESULTS.md, the import floor).

Each case runs the command in a fresh process (`python -m tracekit.cli`, through `tracekit.cli.run`, which runs the
exit handlers) and reads the modules it loaded from an exit handler."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

# What every command that reads traces needs: Arrow tables, DuckDB SQL, polars frames, msgspec decoding.
ENGINES = {"pyarrow", "polars", "duckdb", "numpy", "msgspec"}
LOADED = ("import atexit, json, runpy, sys\n"
          "out = sys.argv[1]\n"
          "atexit.register(lambda: open(out, 'w').write(json.dumps(sorted(sys.modules))))\n"
          "sys.argv = ['tracekit', *sys.argv[2:]]\n"
          "runpy.run_module('tracekit.cli', run_name='__main__')\n")


def loaded_by(tmp_path, *args: str) -> set[str]:
    """The modules in the process of `tracekit ARGS` when it ended (exit code 0 or 3)."""
    modules = tmp_path / "modules.json"
    proc = subprocess.run([sys.executable, "-c", LOADED, str(modules), *args], capture_output=True, text=True,
                          cwd=tmp_path, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode in (0, 3), proc.stderr
    return set(json.loads(modules.read_text()))


@pytest.mark.parametrize("args", [["--version"], ["report", "--help"], ["ingest", "--help"], ["sql", "--help"],
                                  ["run", "--help"], ["timeline", "--help"], ["export", "chakra", "--help"],
                                  ["replay", "--help"], ["graph", "--help"], ["diff", "--help"]])
def test_help_needs_no_engine(tmp_path, args):
    assert not ENGINES & loaded_by(tmp_path, *args)


def test_schema_needs_arrow_only(tmp_path):
    loaded = loaded_by(tmp_path, "schema")
    assert "pyarrow" in loaded  # the schema is Arrow types: the check sees what it looks for
    assert not {"polars", "duckdb", "msgspec"} & loaded


def test_the_notebook_import_needs_no_engine():
    code = "import sys, tracekit; print(sorted(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert not ENGINES & set(eval(out))


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    from tracekit import synth

    out = tmp_path_factory.mktemp("synth")
    synth.generate(out, 1, 1, 0)
    return out / "rank0.json"


@pytest.mark.parametrize("args, not_loaded", [
    # ingest reads, links and writes Parquet in Arrow, numpy and DuckDB: polars (30 MB, 0.25 CPU s) only for entries
    # with problems (bench/RESULTS.md, ingest without polars)
    (["ingest", "{trace}", "-o", "dataset"],
     {"polars", "xlsxwriter", "tomllib", "rich.progress", "tracekit.query.analyses"}),
    (["report", "{trace}", "-o", "report"], {"pyarrow.parquet", "pyarrow.dataset", "rich.progress"}),
    (["sql", "select count(*) from events", "{trace}"], {"pyarrow.parquet", "pyarrow.dataset", "xlsxwriter"}),
    (["timeline", "{trace}", "-o", "timeline.json"], {"pyarrow.parquet", "xlsxwriter", "tracekit.diff"}),
])
def test_a_command_leaves_out_what_it_does_not_use(tmp_path, trace, args, not_loaded):
    loaded = loaded_by(tmp_path, *[a.format(trace=trace) for a in args])
    assert ENGINES - not_loaded <= loaded  # it did read the trace
    assert not not_loaded & loaded


# The modules loaded when a command starts its head start (ChunkHelpers.head_start, wrapped before the command runs:
# the module imports nothing heavy at the top): what it has loaded and its threads then, and its first helper
AT_HEAD_START = ("import json, os, runpy, sys\n"
                 "from tracekit.read import chunk_workers\n"
                 "out, started = sys.argv[1], chunk_workers.ChunkHelpers.head_start\n"
                 "def head_start(self, paths, *args, **kwargs):\n"
                 "    self.head_start_bytes = 0  # the test's small trace gets its head start too\n"
                 "    loaded = sorted(sys.modules)\n"
                 "    tasks = os.listdir('/proc/self/task')\n"
                 "    threads = [open(f'/proc/self/task/{t}/comm').read().strip() for t in tasks]\n"
                 "    helpers = started(self, paths, *args, **kwargs)\n"
                 "    kind = type(helpers.started[0].process).__name__ if helpers.started else None\n"
                 "    open(out, 'w').write(json.dumps({'modules': loaded, 'helper': kind, 'threads': threads}))\n"
                 "    return helpers\n"
                 "chunk_workers.ChunkHelpers.head_start = head_start\n"
                 "sys.argv = ['tracekit', *sys.argv[2:]]\n"
                 "runpy.run_module('tracekit.cli', run_name='__main__')\n")
# What a command that reads traces imports only after its head start: the helper that reads ahead starts while they
# load, on a core the command leaves idle until then (each module here ran 5-25 ms before the helper started). A
# forked helper (cli.app.head_started) has the reader's modules, imported first: pyarrow, numpy, msgspec and what
# they load; a fresh one (ingest's) starts before them.
AFTER_HEAD_START = {"polars", "duckdb", "rich.console", "multiprocessing", "tracekit.output.files"}
READER = {"pyarrow", "numpy", "msgspec", "concurrent.futures"}


@pytest.mark.parametrize("args, helper", [
    (["report", "{trace}", "-o", "report"], "ForkedHelper"),
    (["ingest", "{trace}", "-o", "dataset"], "Popen"),
    (["timeline", "{trace}", "-o", "timeline.json"], "ForkedHelper"),
    (["diff", "{trace}", "{trace}"], "ForkedHelper"),
    (["export", "chakra", "{trace}", "-o", "chakra"], "ForkedHelper"),
    (["replay", "{trace}"], "ForkedHelper"),
    (["graph", "{trace}", "--step", "0", "-o", "graph.dot"], "ForkedHelper"),
])
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="helpers are forked on Linux only")
def test_a_command_starts_reading_ahead_before_its_heavy_imports(tmp_path, trace, args, helper):
    out = tmp_path / "head_start.json"
    proc = subprocess.run([sys.executable, "-c", AT_HEAD_START, str(out), *[a.format(trace=trace) for a in args]],
                          capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(REPO),
                                                                               "PATH": "/usr/bin:/bin"})
    assert proc.returncode in (0, 3), proc.stderr
    seen = json.loads(out.read_text())
    loaded = set(seen["modules"])
    assert not AFTER_HEAD_START & loaded
    assert (READER <= loaded) if helper == "ForkedHelper" else not READER & loaded
    assert seen["helper"] == helper
    # the threads before the helpers start: this one and, once pyarrow is loaded, its jemalloc's, which jemalloc
    # handles across a fork (chunk_workers.may_fork); none that would hold a lock in a forked child
    assert len([t for t in seen["threads"] if t != "jemalloc_bg_thd"]) == 1, seen["threads"]


# OpenBLAS's own count of its threads, as numpy's wheels name it (scipy-openblas since numpy 2.0; 64-bit ints before)
BLAS_THREAD_COUNTS = ('scipy_openblas_get_num_threads64_', 'openblas_get_num_threads64_', 'openblas_get_num_threads')
# From an exit handler: the threads numpy's OpenBLAS runs on, as the library itself says (None: numpy not loaded,
# or built on another BLAS)
BLAS_THREADS = ("import atexit, ctypes, json, runpy, sys\n"
                "out = sys.argv[1]\n"
                "def blas_threads():\n"
                "    libs = {line.split()[-1] for line in open('/proc/self/maps') if 'openblas' in line}\n"
                "    for lib in libs:\n"
                f"        for name in {BLAS_THREAD_COUNTS!r}:\n"
                "            if hasattr(ctypes.CDLL(lib), name):\n"
                "                return getattr(ctypes.CDLL(lib), name)()\n"
                "atexit.register(lambda: open(out, 'w').write(json.dumps(blas_threads())))\n"
                "sys.argv = ['tracekit', *sys.argv[2:]]\n"
                "runpy.run_module('tracekit.cli', run_name='__main__')\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the loaded libraries from /proc/self/maps")
@pytest.mark.parametrize("given, expected", [(None, 1), ("2", 2)])
def test_the_program_runs_numpys_blas_on_one_thread_unless_told_otherwise(tmp_path, trace, given, expected):
    # OpenBLAS's threads busy-wait for work when numpy loads, CPU the program needs (cli.app.run); a user's own
    # OPENBLAS_NUM_THREADS is kept
    out = tmp_path / "threads.json"
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", **({"OPENBLAS_NUM_THREADS": given} if given else {})}
    proc = subprocess.run([sys.executable, "-c", BLAS_THREADS, str(out), "sql", "select 1", str(trace)],
                          capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    threads = json.loads(out.read_text())
    if threads is None:
        pytest.skip("numpy is not built on OpenBLAS here")
    assert threads == expected


# From an exit handler: whether the cyclic garbage collector was on at the end of the command
GC_STATE = ("import atexit, gc, json, runpy, sys\n"
            "out = sys.argv[1]\n"
            "atexit.register(lambda: open(out, 'w').write(json.dumps(gc.isenabled())))\n"
            "sys.argv = ['tracekit', *sys.argv[2:]]\n"
            "runpy.run_module('tracekit.cli', run_name='__main__')\n")


def test_the_program_runs_without_the_cyclic_collector_and_the_api_keeps_it(tmp_path, trace):
    # the collector's passes cost a report ~0.05 CPU s, most of it while the modules load (cli.app.run); the reader
    # turns it off while it decodes and must not turn it back on in the program
    out = tmp_path / "gc.json"
    proc = subprocess.run([sys.executable, "-c", GC_STATE, str(out), "report", str(trace), "-o", str(tmp_path / "r")],
                          capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(REPO),
                                                                               "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text()) is False
    api = subprocess.run([sys.executable, "-c", "import gc, sys, tracekit; tracekit.load([sys.argv[1]]); "
                          "print(gc.isenabled())", str(trace)], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert api.returncode == 0, api.stderr
    assert api.stdout.strip() == "True"
