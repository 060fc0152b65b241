"""Shared traces loaded once for a test module whose tests only read the tables (TraceTables are immutable): a
module-scoped fixture returns `loader()`, and each test asks it for a trace by its path under the shared folder."""

from __future__ import annotations

from collections.abc import Callable

import tracekit
from tests.conftest import shared_trace


def loader() -> Callable[[str], tracekit.TraceTables]:
    """`load(relative)`: the shared trace's tables, read on the first call and kept for the next ones."""
    kept: dict[str, tracekit.TraceTables] = {}

    def load(relative: str) -> tracekit.TraceTables:
        if relative not in kept:
            kept[relative] = tracekit.load(shared_trace(relative))
        return kept[relative]

    return load
