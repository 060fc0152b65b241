"""The oldest-versions CI run's subset: .ci/oldest_subset.py's cover leaves no feature out, and --skip-listed
deselects what its file names and nothing else."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("oldest_subset", REPO / ".ci" / "oldest_subset.py")
oldest_subset = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oldest_subset)

test_ids = st.sampled_from([f"tests/test_m{m}.py::test_{t}" for m in range(3) for t in range(6)]
                           + ["tests/cli/test_imports.py::test_kept"])
measured = st.dictionaries(test_ids, st.tuples(st.sets(st.integers(0, 40), max_size=12),
                                               st.floats(0.0, 30.0), st.floats(0.0, 5.0)), min_size=1)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(measured)
def test_the_cover_runs_every_feature_and_keeps_what_keep_names(measurement):
    ran = {t: {("tracekit/x.py", line) for line in lines} for t, (lines, _, _) in measurement.items()}
    tests = {t: {"seconds": seconds + setup, "setup_seconds": setup} for t, (_, seconds, setup) in measurement.items()}
    chosen = oldest_subset.cover(ran, tests)
    assert set().union(*(ran[t] for t in chosen)) == set().union(*ran.values())
    assert {t for t in tests if t.startswith(oldest_subset.KEEP)} <= set(chosen)
    assert len(chosen) == len(set(chosen))
    # every test chosen by the greedy step ran something no test chosen before it ran
    seen = set().union(*(ran[t] for t in chosen if t.startswith(oldest_subset.KEEP)))
    for test in (t for t in chosen if not t.startswith(oldest_subset.KEEP)):
        assert ran[test] - seen, test
        seen |= ran[test]


def test_skip_listed_deselects_what_the_file_names_and_warns_of_names_gone(tmp_path):
    listed = tmp_path / "skip.txt"
    listed.write_text("# a comment line\n"
                      "tests/test_layering.py::test_every_module_is_in_a_layer\n"
                      "tests/test_layering.py::test_a_test_that_was_renamed\n")
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "--co", "-q",
            "tests/test_layering.py"]
    whole = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False).stdout
    skipped = subprocess.run(argv + [f"--skip-listed={listed}"], capture_output=True, text=True, cwd=REPO,
                             check=False).stdout
    collected = [line for line in whole.splitlines() if line.startswith("tests/") and "::" in line]
    kept = [line for line in skipped.splitlines() if line.startswith("tests/") and "::" in line]
    assert "tests/test_layering.py::test_every_module_is_in_a_layer" in collected
    assert kept == [c for c in collected if c != "tests/test_layering.py::test_every_module_is_in_a_layer"]
    assert "1 listed tests no longer exist (e.g. tests/test_layering.py::test_a_test_that_was_renamed)" in skipped
