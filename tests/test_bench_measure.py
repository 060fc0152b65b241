"""bench/measure.py's count of the alternating rounds in which a ratio target (or the diff's, loads + 1 s) held, and the
cores each round needed for it: round by round, in run order; what a peer that fails on a trace said; and which files
it drops from the page cache before timing."""

from __future__ import annotations

import os
import sys

import pytest

from bench.measure import Run, Summary, cores_needed, evict_libraries, failure, rounds_where, rounds_within
from tests.support.page_cache import page_cache


def summary(*walls: float) -> Summary:
    return Summary.of([Run(w, w, 1.0, 0, "") for w in walls])


def test_rounds_pair_the_runs_of_one_round_not_the_medians():
    tracelens, tracekit = summary(10.0, 16.0, 12.0), summary(2.0, 3.0, 2.5)
    assert tracelens.wall / tracekit.wall < 5  # the ratio of the medians misses 5×...
    assert rounds_where(tracelens, tracekit, 5) == "2/3"  # ...which two rounds of three made: 5.0× and 5.33×
    assert rounds_where(summary(16.0, 10.0, 12.0), tracekit, 5) == "1/3"  # the same walls in another order


def test_an_upper_target_counts_the_rounds_at_or_under_it():
    ingest, orjson = summary(1.5, 2.0, 1.2, 1.1), summary(1.0, 1.0, 1.0, 1.0)
    assert rounds_where(ingest, orjson, 1.5, at_least=False) == "3/4"  # 1.5, 1.2 and 1.1: the bound counts
    assert rounds_where(ingest, orjson, 1.5) == "2/4"  # at least 1.5×: 1.5 and 2.0


def test_the_cores_a_round_needs_come_from_its_own_runs():
    tracelens = summary(10.0, 20.0, 15.0)  # 5×: 2.0, 4.0 and 3.0 s
    tracekit = Summary.of([Run(wall, cpu, 1.0, 0, "") for wall, cpu in ((2.5, 5.0), (3.0, 5.0), (3.0, 4.5))])
    assert tracekit.cores_used() == 5.0 / 3.0  # 2.0, 1.67, 1.5 cores kept busy
    # with the CPU used, 5× needed 5.0/2.0, 5.0/4.0 and 4.5/3.0 cores: the first round more than 2, however packed
    assert cores_needed(tracelens, tracekit, 5, cores=2) == "1.50 (1.25–2.50), 1/3 over 2"
    assert cores_needed(tracelens, tracekit, 5, cores=4) == "1.50 (1.25–2.50)"


def test_the_diff_target_is_met_in_a_round_within_that_rounds_loads_plus_the_slack():
    diff, load_a, load_b = summary(3.5, 2.8, 3.3), summary(1.3, 0.9, 1.0), summary(1.3, 1.0, 1.0)
    assert diff.wall > load_a.wall + load_b.wall + 1.0  # the medians miss it (3.3 against 3.0)...
    assert rounds_within(diff, [load_a, load_b], 1.0) == "2/3"  # ...which two rounds made: 3.5 <= 3.6, 2.8 <= 2.9
    assert rounds_within(diff, [load_a, load_b], 0.5) == "0/3"


def test_a_failing_command_gives_its_last_error_line_and_a_succeeding_one_none():
    # as TraceLens fails on a trace without GPU ops: a traceback, whose last line says why
    crash = "import sys; print('Traceback (most recent call last):', file=sys.stderr); raise ValueError('No GPU events')"
    assert failure([sys.executable, "-c", crash]) == "ValueError: No GPU events"
    assert failure([sys.executable, "-c", "import sys; sys.exit(3)"]) == "exit code 3"  # nothing on stderr
    assert failure([sys.executable, "-c", "print('fine')"]) is None


def test_the_shared_libraries_of_each_environment_are_dropped_once_and_nothing_else(tmp_path):
    lib = tmp_path / "venv" / "lib" / "site-packages" / "pkg"
    lib.mkdir(parents=True)
    (lib / "_core.cpython-311-x86_64-linux-gnu.so").write_bytes(b"x" * 300)
    (lib / "libarrow.so.2600").write_bytes(b"y" * 200)
    (lib / "module.py").write_text("import os\n")
    (lib / "libarrow.so").symlink_to(lib / "libarrow.so.2600")  # a link to a library: that library, once
    other = tmp_path / "other"
    other.mkdir()
    (other / "libz.so.1").write_bytes(b"z" * 50)
    assert evict_libraries([tmp_path / "venv"]) == (2, 500)
    assert evict_libraries([tmp_path / "venv", other]) == (3, 550)
    assert evict_libraries([tmp_path / "missing"]) == (0, 0)


def test_a_library_just_written_leaves_the_page_cache(tmp_path):
    library = tmp_path / "venv" / "libbig.so.1"
    library.parent.mkdir()
    library.write_bytes(os.urandom(4 * 2**20))  # written, not yet synced: dirty pages, which DONTNEED alone keeps
    before = page_cache(library)
    if not before or not before.dirty:
        pytest.skip(f"no dirty page to see on {tmp_path} (cachestat: {before})")
    assert evict_libraries([tmp_path / "venv"]) == (1, 4 * 2**20)
    assert page_cache(library).cached == 0
