"""A larger real-like trace for the benches: a real Kineto trace's events repeated COPIES times, one after the other.

    python bench/tile_trace.py TRACE COPIES OUT.json.gz

The shared set holds no real trace above 25 MB of JSON, while issue 27's held-out traces are 55–62 MB. Tiling a real
trace keeps what synth does not have (Python frames, long argument strings, `Input Dims` on every op, graph replays)
at the size of the held-out ones. Each copy is shifted in time past the end of the one before, and the ids that link
events (correlation, External id, flow ids, sequence numbers, Python ids) are offset so that no two copies share one;
`ProfilerStep#N` annotations are renumbered after the original's last step. Metadata entries (ph M) are kept once.
What the tiled trace is not: a longer run of the same job (the copies are identical, so a diff or a noise estimate
over them means nothing); use it for speed and memory only.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

LINKING_ARGS = ("External id", "correlation", "Ev Idx", "Sequence number", "Record function id", "Python id",
                "Python parent id")
STEP = re.compile(r"^ProfilerStep#(\d+)$")


def tiled(trace: dict, copies: int) -> dict:
    events = trace["traceEvents"]
    timed = [e for e in events if isinstance(e, dict) and e.get("ph") != "M" and "ts" in e]
    start = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - start
    shift = int(span) + 1000  # µs: a millisecond between copies
    largest = {key: max((e["args"][key] for e in timed if isinstance(e.get("args"), dict)
                         and isinstance(e["args"].get(key), int)), default=0) for key in LINKING_ARGS}
    flow_ids = [e["id"] for e in timed if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), int)]
    flow_offset = max(flow_ids, default=0) + 1
    steps = [int(m.group(1)) for e in timed if (m := STEP.match(str(e.get("name", ""))))]
    step_offset = max(steps) - min(steps) + 1 if steps else 0
    out = [e for e in events if not (isinstance(e, dict) and e.get("ph") != "M" and "ts" in e)]
    for copy in range(copies):
        for event in timed:
            if copy == 0:
                out.append(event)
                continue
            e = dict(event, ts=event["ts"] + copy * shift)
            if isinstance(e.get("args"), dict):
                e["args"] = dict(e["args"])
                for key in LINKING_ARGS:
                    if isinstance(e["args"].get(key), int) and e["args"][key] >= 0:
                        e["args"][key] += copy * (largest[key] + 1)
            if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), int):
                e["id"] += copy * flow_offset
            if steps and (m := STEP.match(str(e.get("name", "")))):
                e["name"] = f"ProfilerStep#{int(m.group(1)) + copy * step_offset}"
            out.append(e)
    return {**trace, "traceEvents": out}


def trace_json(path: Path) -> dict:
    """A trace file's JSON document (gzip-compressed when it ends in .gz)."""
    return json.loads(gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes())


def main() -> None:
    source, copies, target = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    data = json.dumps(tiled(trace_json(source), copies), separators=(",", ":")).encode()
    with gzip.open(target, "wb", compresslevel=3) as out:
        out.write(data)
    print(f"{target}: {len(data) / 2**20:.1f} MB of JSON ({copies} copies of {source.name})")


if __name__ == "__main__":
    main()
