"""Independent oracles for the analysis tests: a Kineto file read with the json module, nothing from tracekit.

Times are exact integer ns: `ts`/`dur` parsed as decimals (µs) and `baseTimeNanoseconds` added, as Kineto defines them.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from tests.support.categories import gpu_timeline_category

GPU_CATS = {"kernel": "kernel", "Kernel": "kernel", "gpu_memcpy": "memcpy", "Memcpy": "memcpy",
            "gpu_memset": "memset", "Memset": "memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}


@dataclass
class Event:
    position: int
    cat: str | None
    name: str
    ts: int
    dur: int
    pid: object
    tid: object
    args: dict = field(default_factory=dict)

    @property
    def end(self) -> int:
        return self.ts + self.dur


@dataclass
class RawTrace:
    path: Path
    rank: int | None
    events: list[Event]

    def named(self, pattern: str) -> list[Event]:
        return [e for e in self.events if re.fullmatch(pattern, e.name)]

    def launched_gpu_ops(self) -> list[Event]:
        """GPU ops whose correlation id is also on a runtime/driver call of the file (TraceLens's launched ops)."""
        launch = {e.args.get("correlation") for e in self.events if e.cat in LAUNCH_CATS}
        return [e for e in self.events if e.cat in GPU_CATS and e.args.get("correlation") in launch]

    def unlaunched_gpu_ops(self) -> list[Event]:
        launched = {e.position for e in self.launched_gpu_ops()}
        return [e for e in self.events if e.cat in GPU_CATS and e.position not in launched]


def to_ns(value) -> int:
    return int((Decimal(str(value)) * 1000).to_integral_value())


def read(path: Path) -> RawTrace:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        doc = json.load(fh, parse_float=Decimal)
    entries = doc if isinstance(doc, list) else doc["traceEvents"]
    base = doc.get("baseTimeNanoseconds", 0) if isinstance(doc, dict) else 0
    rank = doc.get("distributedInfo", {}).get("rank") if isinstance(doc, dict) else None
    events = [Event(i, e.get("cat"), e.get("name", ""), base + to_ns(e["ts"]), to_ns(e.get("dur", 0)), e.get("pid"),
                    e.get("tid"), e.get("args") or {})
              for i, e in enumerate(entries) if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e]
    return RawTrace(path, rank, events)


def complete_entries(text: bytes) -> list:
    """The traceEvents entries wholly inside `text` (a trace's text, possibly cut anywhere), by the json module:
    entry after entry decoded from where the array opens, each returned with the offset where its text ends."""
    chars = text.decode("latin-1")  # one char per byte: offsets stay byte offsets
    decoder = json.JSONDecoder()
    opening = re.search(r'^\s*\[|"traceEvents"\s*:\s*\[', chars)
    if opening is None:  # cut before the entries
        return []
    position, found = opening.end(), []
    while True:
        position = len(chars) - len(chars[position:].lstrip(" \t\r\n,"))
        try:
            entry, end = decoder.raw_decode(chars, position)
        except json.JSONDecodeError:
            return found
        if end == len(chars) and not isinstance(entry, (dict, list, str)):
            return found  # a number (or literal) at the very end may have been cut
        found.append((entry, end))
        position = end


def has_partial_entry(text: bytes, complete: list) -> bool:
    """Whether `text` stops inside an entry (after `complete`, from complete_entries): something other than a
    separator or the array's end follows the last complete entry."""
    chars = text.decode("latin-1")
    if complete:
        rest = chars[complete[-1][1]:]
    else:
        opening = re.search(r'^\s*\[|"traceEvents"\s*:\s*\[', chars)
        rest = chars[opening.end():] if opening else ""
    rest = rest.lstrip(" \t\r\n,")
    return bool(rest) and not rest.startswith("]")


def gpu_category(e: Event) -> str:
    """The GPU timeline's category of a GPU op, by docs/categories.md's rule (tests/support/categories.py)."""
    return gpu_timeline_category(e.name, GPU_CATS[e.cat])


def union_ns(intervals) -> int:
    total, run_start, run_end = 0, None, None
    for start, end in sorted(intervals):
        if run_end is None or start > run_end:
            if run_end is not None:
                total += run_end - run_start
            run_start, run_end = start, end
        else:
            run_end = max(run_end, end)
    return total + (run_end - run_start if run_end is not None else 0)


def gpu_breakdown(ops: list[Event], start: int, end: int) -> dict[str, int]:
    """TraceLens's gpu_timeline inside [start, end): unions of the clipped intervals, in ns."""
    clipped = {"computation": [], "communication": [], "memcpy": []}
    for e in ops:
        s, t = max(e.ts, start), min(e.end, end)
        if s < t:
            clipped[gpu_category(e)].append((s, t))
    comp, comm, memcpy = clipped["computation"], clipped["communication"], clipped["memcpy"]
    busy = union_ns(comp + comm + memcpy)
    return {
        "computation": union_ns(comp), "communication": union_ns(comm), "memcpy": union_ns(memcpy),
        "exposed_communication": union_ns(comp + comm) - union_ns(comp),
        "exposed_memcpy": busy - union_ns(comp + comm), "busy": busy, "idle": end - start - busy,
    }
