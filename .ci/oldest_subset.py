"""Choose the tests the oldest-versions CI run needs: every line of tracekit and every queries/ file that the whole
suite runs, run at least once, at the least test time.

The oldest run checks the oldest libraries that pyproject.toml allows, not the corpus or the product's behaviour
(the newest run checks all of that). A library version shows up wherever tracekit calls it: in its Python lines and
in the SQL it hands DuckDB. So the subset is a weighted set cover over (file, line) pairs of tracekit and the
queries/ files whose text reaches DuckDB, each test weighted by its time in a run of the whole suite under the oldest
pins.

    VENV/bin/python .ci/oldest_subset.py [TESTS...]   # VENV: the oldest pins and coverage (pip install -c
                                                      # .ci/oldest.txt -e '.[test,oldest-subset]'); ~45 min on 2 cores
    VENV/bin/python .ci/oldest_subset.py --work DIR   # keeps the measurement in DIR, or chooses from the one there

writes .ci/oldest_skip.txt: the tests the cover leaves out. `pytest --skip-listed=.ci/oldest_skip.txt`
(tests/conftest.py) deselects them; a test the file does not name (added or renamed since) runs.

The same file is the pytest plugin of that measuring run (`-p oldest_subset`, in each xdist worker): it labels
coverage with the running test (in subprocesses through $TRACEKIT_COVER_TEST, which the coverage config reads), and
records each test's time and the queries/ files whose statements it ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SKIP_FILE = REPO / ".ci" / "oldest_skip.txt"
TEST_VARIABLE = "TRACEKIT_COVER_TEST"  # the running test's node id, for coverage started in subprocesses
RECORDS = "TRACEKIT_COVER_RECORDS"  # folder of each worker's per-test records
# Every line of tracekit runs on the oldest libraries; the fuzz module at CI's smaller budget (.ci/run)
FUZZ_EXAMPLES = "8"
# Kept whatever they cover: their assertions are about the libraries' own behaviour, which no line count sees: what
# each command imports (and so what the libraries import), DuckDB's memory limit and spilling, and the same bits
# from DuckDB on one thread and on many
KEEP = ("tests/cli/test_imports.py::", "tests/query/test_connection.py::",
        "tests/query/test_determinism.py::test_analyses_give_the_same_bits_on_one_thread_and_on_many")


# --- the pytest plugin (imported by each worker of the measuring run) ---

_current: dict[str, str] = {}
_tests: dict[str, dict] = defaultdict(lambda: {"seconds": 0.0, "setup_seconds": 0.0, "queries": set()})


def _record_statements() -> None:
    """Note the running test's SQL: wrap Query.statement, the one place a queries/ file's text is read to be run, and
    define_macros, which defines the lib macros a connection's queries call (from text read once per process)."""
    from tracekit.engine import catalog

    statement, define_macros = catalog.Query.statement.fget, catalog.define_macros

    def noted(query):
        if "test" in _current:
            _tests[_current["test"]]["queries"].add(query.name)
        return statement(query)

    def defined(con, macros):
        before = set(catalog.catalogued(con).macros)
        define_macros(con, macros)
        if "test" in _current:
            _tests[_current["test"]]["queries"].update(f"macro {m}" for m in catalog.catalogued(con).macros - before)

    catalog.Query.statement = property(noted)
    catalog.define_macros = defined


def measuring() -> bool:
    """In a worker of the measuring run (the xdist controller also sees every report, but runs no test)."""
    return bool(os.environ.get(RECORDS) and os.environ.get("PYTEST_XDIST_WORKER"))


def pytest_configure(config):
    if measuring():
        import importlib
        import pkgutil

        import tracekit
        # every module's top level runs before any test, so no test owns an import's lines
        for module in pkgutil.walk_packages(tracekit.__path__, "tracekit."):
            if not module.name.endswith("__main__"):
                importlib.import_module(module.name)
        _record_statements()


def pytest_runtest_logstart(nodeid, location):
    import coverage

    _current["test"] = os.environ[TEST_VARIABLE] = nodeid
    if coverage.Coverage.current() is not None:
        coverage.Coverage.current().switch_context(nodeid)


def pytest_runtest_logreport(report):
    if not measuring():
        return
    _tests[report.nodeid]["seconds"] += report.duration
    if report.when == "setup":
        _tests[report.nodeid]["setup_seconds"] += report.duration


def pytest_runtest_logfinish(nodeid, location):
    import coverage

    _current.pop("test", None)
    os.environ.pop(TEST_VARIABLE, None)
    if coverage.Coverage.current() is not None:
        coverage.Coverage.current().switch_context("")


def pytest_sessionfinish(session):
    if measuring() and _tests:
        path = Path(os.environ[RECORDS]) / f"tests-{os.getpid()}.json"
        path.write_text(json.dumps({k: {**v, "queries": sorted(v["queries"])} for k, v in _tests.items()}))


# --- the measuring run and the cover ---

def measure(work: Path, selection: list[str]) -> None:
    """Run the whole suite (or SELECTION) in this Python's environment under coverage, one context per test, subprocesses included."""
    rc = work / "coveragerc"
    rc.write_text(f"[run]\nparallel = true\ndata_file = {work}/.coverage\nsource_pkgs = tracekit\n"
                  f"context = ${{{TEST_VARIABLE}}}\n")
    # coverage starts in every Python process of VENV that finds COVERAGE_PROCESS_START (xdist workers, the CLI
    # processes tests start): the .pth file coverage's docs give for subprocesses
    python = sys.executable
    pth = Path(sysconfig.get_paths()["purelib"]) / "tracekit_cover_subprocesses.pth"
    pth.write_text("import coverage; coverage.process_startup()\n")
    env = {**os.environ, "COVERAGE_PROCESS_START": str(rc), RECORDS: str(work), "TRACEKIT_FUZZ_EXAMPLES": FUZZ_EXAMPLES,
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / ".ci")])}
    try:
        subprocess.run([python, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-q", "-n", "2",
                        "--dist", "loadfile", "-p", "oldest_subset", *selection], cwd=REPO, env=env, check=False)
    finally:
        pth.unlink()
    subprocess.run([python, "-m", "coverage", "combine", "--rcfile", str(rc), "-q"], cwd=work, env=env, check=True)


def features(work: Path) -> tuple[dict[str, set], dict[str, dict]]:
    """Each test → what it ran: ("file", line) for tracekit's lines, ("sql", name) for queries/ files."""
    import coverage

    data = coverage.CoverageData(basename=str(work / ".coverage"))
    data.read()
    ran: dict[str, set] = defaultdict(set)
    for path in data.measured_files():
        relative = os.path.relpath(path, REPO)
        for line, contexts in data.contexts_by_lineno(path).items():
            for context in contexts:
                test = context.rpartition("|")[2]
                if test:
                    ran[test].add((relative, line))
    tests: dict[str, dict] = {}
    for record in work.glob("tests-*.json"):
        tests.update(json.loads(record.read_text()))
    for test, record in tests.items():
        ran[test].update(("sql", name) for name in record["queries"])
    return ran, tests


def cover(ran: dict[str, set], tests: dict[str, dict]) -> list[str]:
    """The tests KEEP names, then a greedy weighted set cover: repeatedly the test that runs the most not-yet-run features per second. A test's
    cost includes its module's setup (module fixtures, paid by whichever of its tests runs first) until one of the
    module's tests is chosen."""
    module_setup: dict[str, float] = defaultdict(float)
    for test, record in tests.items():
        module = test.partition("::")[0]
        module_setup[module] = max(module_setup[module], record["setup_seconds"])
    left = set().union(*ran.values())
    chosen = [t for t in sorted(tests) if t.startswith(KEEP)]
    modules = {t.partition("::")[0] for t in chosen}
    left -= set().union(*(ran.get(t, set()) for t in chosen))
    candidates = {t for t in ran if t in tests} - set(chosen)
    while left:
        def value(test):
            module = test.partition("::")[0]
            cost = max(tests[test]["seconds"] - tests[test]["setup_seconds"], 0.01)
            cost += 0.0 if module in modules else module_setup[module]
            return len(ran[test] & left) / cost

        best = max(candidates, key=value)
        if not ran[best] & left:
            break
        chosen.append(best)
        modules.add(best.partition("::")[0])
        left -= ran[best]
        candidates.discard(best)
    return chosen


def main(*selection: str) -> None:
    """`--work DIR` keeps the measurement in DIR, and a DIR that holds one is chosen from again, not measured."""
    if selection[:1] == ("--work",):
        work, selection = Path(selection[1]), selection[2:]
        work.mkdir(parents=True, exist_ok=True)
        if not (work / ".coverage").exists():
            measure(work, list(selection))
        ran, tests = features(work)
    else:
        with tempfile.TemporaryDirectory() as folder:
            measure(Path(folder), list(selection))
            ran, tests = features(Path(folder))
    write(cover(ran, tests), ran, tests)


def write(chosen: list[str], ran: dict[str, set], tests: dict[str, dict]) -> None:
    """.ci/oldest_skip.txt: the tests not CHOSEN, under a header saying what the chosen ones cover and cost."""
    skipped = sorted(set(tests) - set(chosen))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=REPO).stdout.strip()
    every = set().union(*ran.values())
    seconds = sum(tests[t]["seconds"] for t in chosen)
    total = sum(r["seconds"] for r in tests.values())
    header = [f"# Tests the oldest-versions CI run leaves out (.ci/oldest_subset.py, at {commit}; pytest --skip-listed=).",
              f"# The {len(chosen)} tests it keeps of {len(tests)} run all {len(every)} lines and queries/ files that",
              f"# the whole suite runs, in {seconds:.0f} of the suite's {total:.0f} test-seconds (measured under coverage).",
              "# A test not named here runs."]
    SKIP_FILE.write_text("\n".join(header + skipped) + "\n")
    print("\n".join(header))


if __name__ == "__main__":
    main(*sys.argv[1:])
