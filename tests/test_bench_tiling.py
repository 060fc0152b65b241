"""bench/tile_trace.py, the larger real-like traces of the benches: each copy of a real trace links as the original
does (the same edges, steps and diagnostics, once per copy; a stream's ops also chain across the seam between
copies), so the benches on it measure a real trace's work."""

from __future__ import annotations

import collections
import json

import pyarrow as pa
import pyarrow.compute as pc

import tracekit
from bench.tile_trace import tiled, trace_json
from tests.conftest import shared_trace


def counts(table, column: str) -> collections.Counter:
    return collections.Counter(table.column(column).to_pylist())


def test_each_copy_links_as_the_original(tmp_path):
    trace = shared_trace("nvidia/h100_qwen1.5-0.5b.json.gz")
    copies = 3
    with open(tmp_path / "tiled.json", "w") as out:
        json.dump(tiled(trace_json(trace), copies), out)
    original, tiled_tables = tracekit.load(trace), tracekit.load(tmp_path / "tiled.json")
    assert tiled_tables.events.num_rows == copies * original.events.num_rows
    # a stream's ops are chained across copies too: one more stream edge per stream at each seam
    gpu = original.events.filter(pc.is_in(original.events.column("kind"), pa.array(["kernel", "memcpy", "memset"])))
    streams = len(set(zip(gpu.column("device").to_pylist(), gpu.column("stream").to_pylist())))
    want = {k: copies * n for k, n in counts(original.edges, "kind").items()}
    want["stream"] += (copies - 1) * streams
    assert counts(tiled_tables.edges, "kind") == want
    assert counts(tiled_tables.diagnostics, "reason") == {k: copies * n
                                                   for k, n in counts(original.diagnostics, "reason").items()}
    names = pc.unique(tiled_tables.events.column("name")).to_pylist()
    steps = [n for n in names if n and n.startswith("ProfilerStep#")]
    original_steps = [n for n in pc.unique(original.events.column("name")).to_pylist()
                      if n and n.startswith("ProfilerStep#")]
    assert len(steps) == copies * len(original_steps)

