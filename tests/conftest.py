"""Shared fixtures: where the real traces are, and a skip with a reason where they are not."""

from __future__ import annotations

import os
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


# The oldest-versions run (.ci/run) checks the oldest libraries, not the corpus: there, a test marked `every_trace`
# runs on these traces only (`--sample-traces`). In those tests they run every line of tracekit that the whole corpus
# runs (coverage.py, per test and trace, 2026-11-25): the 2020 bare list, plain JSON read in blocks, an args field
# kept raw (Triton's cuLaunchKernel), a device matched by no id (MTIA), nothing after the entries (CUDA graphs), ROCm
# (and the first load, which imports and reads what later loads reuse); v100_ns_resolution adds no line but
# fractional epoch-µs values. The newest-versions run keeps every trace.
SAMPLE_TRACES = {
    "amd/mi250_minitoy_train.json.gz",
    "legacy/resnet50_2020-12_bare_list.pt.trace.json.gz",
    "nvidia/a100_trainer_rank0of16_cudagraph.json.gz",
    "nvidia/a100_triton_cuLaunchKernel.json.gz",
    "nvidia/h100_kineto_cuda_sync_unit.json",
    "nvidia/v100_ns_resolution.json.gz",
    "other/mtia_inference.json.gz",
}


def pytest_addoption(parser):
    parser.addoption("--sample-traces", action="store_true",
                     help="run tests marked every_trace on conftest.SAMPLE_TRACES only (the oldest-versions CI run)")


def pytest_configure(config):
    config.addinivalue_line("markers", "every_trace: parametrized over every shared trace (`path`); "
                                       "--sample-traces keeps SAMPLE_TRACES")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--sample-traces"):
        return
    kept, deselected = [], []
    for item in items:
        path = item.callspec.params.get("path") if item.get_closest_marker("every_trace") else None
        sampled = path is None or str(path.relative_to(TRACES)) in SAMPLE_TRACES
        (kept if sampled else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


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
