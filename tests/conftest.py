"""Shared fixtures: where the real traces are, and a skip with a reason where they are not."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.loaded_traces import LoadedTraces

if TYPE_CHECKING:
    from tracekit import TraceTables

REPO = Path(__file__).resolve().parent.parent
TRACES = Path(os.environ.get("TRACEKIT_TRACES", REPO.parent / "shared" / "traces"))


def shared_trace(relative: str | Path) -> Path:
    """Path of a trace under ../shared/traces (RELATIVE to it, or a path in it), or skip the test saying why."""
    path = TRACES / relative
    if not path.exists():
        pytest.skip(f"shared trace {relative} not found under {TRACES} (set TRACEKIT_TRACES)")
    return path


def pytest_addoption(parser):
    parser.addoption("--skip-listed", metavar="FILE", type=Path,
                     help="deselect the tests FILE names, a node id a line (# comments): .ci/oldest_skip.txt, the "
                          "tests the oldest-versions CI run leaves out (.ci/oldest_subset.py chose them)")


def pytest_collection_modifyitems(config, items):
    """--skip-listed FILE: deselect what FILE names; a test it does not name (added or renamed since) runs."""
    if not config.getoption("--skip-listed"):
        return
    listed = {line.strip() for line in config.getoption("--skip-listed").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    collected = {item.nodeid for item in items}
    files = {nodeid.partition("::")[0] for nodeid in collected}
    gone = {nodeid for nodeid in listed - collected if nodeid.partition("::")[0] in files}
    if gone:
        warnings.warn(pytest.PytestWarning(
            f"{config.getoption('--skip-listed')}: {len(gone)} listed tests no longer exist (e.g. {min(gone)}); "
            "the tests that replaced them run: choose again with .ci/oldest_subset.py"))
    deselected = [item for item in items if item.nodeid in listed]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.nodeid not in listed]


def trace_id(path) -> str:
    """A shared trace's test id: its path under TRACES. Anything else as text: with the shared folder absent a
    parametrized list is empty, and pytest's placeholder for it still gets an id (older pytest fails collection when
    the id function raises, instead of skipping the test)."""
    return str(path.relative_to(TRACES)) if isinstance(path, Path) else str(path)


def all_kineto_traces() -> list[Path]:
    """Every Kineto trace file in the shared folder (Execution Traces excluded)."""
    if not TRACES.is_dir():
        return []
    return sorted(p for p in TRACES.rglob("*.json*")
                  if p.name.endswith((".json", ".json.gz")) and not p.name.startswith("et"))


@pytest.fixture
def traces_dir() -> Path:
    if not TRACES.is_dir():
        pytest.skip(f"shared traces folder {TRACES} not found (set TRACEKIT_TRACES)")
    return TRACES


@pytest.fixture(scope="session")
def loaded_trace(tmp_path_factory):
    """`tracekit.load` of a shared trace, once per test session (tests/support/loaded_traces.py), for tests that only
    read the tables: `loaded_trace(path)`, the path relative to TRACES or in it (the test skips where it is absent)."""
    base = tmp_path_factory.getbasetemp()
    # pytest-xdist gives each worker a folder inside the session's: the workers of a run share that one
    traces = LoadedTraces((base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "loaded_traces")

    def load(trace: str | Path) -> TraceTables:
        return traces(shared_trace(trace))
    return load
