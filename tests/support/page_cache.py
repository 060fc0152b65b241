"""What the page cache holds of a file, as the kernel counts it: Linux's cachestat(2) (6.5 and later), read through
ctypes (Python has no binding). One probe for the tests of the bench's eviction and of an output's writeback."""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path
from typing import NamedTuple


class PageCache(NamedTuple):
    cached: int  # the file's pages in the page cache
    dirty: int  # of those, not yet written to disk


CACHESTAT = 451  # its syscall number, the same on every architecture of the generic table (x86_64, aarch64)


class _Range(ctypes.Structure):
    _fields_ = [("offset", ctypes.c_uint64), ("length", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("cache", "dirty", "writeback", "evicted", "recently_evicted")]


def page_cache(path: Path) -> PageCache | None:
    """PATH's pages in the page cache, and how many are dirty; None where the kernel cannot say (not Linux, or a
    kernel before cachestat). Asking reads nothing in."""
    if not sys.platform.startswith("linux"):
        return None
    stat = _Stat()
    fd = os.open(path, os.O_RDONLY)
    try:
        done = ctypes.CDLL(None, use_errno=True).syscall(CACHESTAT, fd, ctypes.byref(_Range(0, 0)),
                                                          ctypes.byref(stat), 0)
    finally:
        os.close(fd)
    return PageCache(stat.cache, stat.dirty) if done == 0 else None
