"""Shared fixtures: where the real traces are, and a skip with a reason where they are not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TRACES = Path(os.environ.get("TRACEKIT_TRACES", REPO.parent / "shared" / "traces"))


def shared_trace(relative: str) -> Path:
    """Path of a trace under ../shared/traces, or skip the test saying why."""
    path = TRACES / relative
    if not path.exists():
        pytest.skip(f"shared trace {relative} not found under {TRACES} (set TRACEKIT_TRACES)")
    return path


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
