"""bench/tile_trace.py, the larger real-like traces of the benches: each copy of a real trace links as the original
does (the same edges, steps and diagnostics, once per copy; a stream's ops also chain across the seam between
copies), so the benches on it measure a real trace's work."""

from __future__ import annotations

import collections
import importlib.util
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

import tracekit
from tests.conftest import shared_trace

REPO = Path(__file__).resolve().parents[1]


def load_bench():
    spec = importlib.util.spec_from_file_location("tile_trace", REPO / "bench" / "tile_trace.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def counts(table, column: str) -> collections.Counter:
    return collections.Counter(table.column(column).to_pylist())


def test_each_copy_links_as_the_original(tmp_path):
    trace = shared_trace("nvidia/h100_qwen1.5-0.5b.json.gz")
    tile = load_bench()
    copies = 3
    with open(tmp_path / "tiled.json", "w") as out:
        json.dump(tile.tiled(json.loads(tile_source(trace)), copies), out)
    original, tiled = tracekit.load(trace), tracekit.load(tmp_path / "tiled.json")
    assert tiled.events.num_rows == copies * original.events.num_rows
    # a stream's ops are chained across copies too: one more stream edge per stream at each seam
    gpu = original.events.filter(pc.is_in(original.events.column("kind"), pa.array(["kernel", "memcpy", "memset"])))
    streams = len(set(zip(gpu.column("device").to_pylist(), gpu.column("stream").to_pylist())))
    want = {k: copies * n for k, n in counts(original.edges, "kind").items()}
    want["stream"] += (copies - 1) * streams
    assert counts(tiled.edges, "kind") == want
    assert counts(tiled.diagnostics, "reason") == {k: copies * n
                                                   for k, n in counts(original.diagnostics, "reason").items()}
    names = pc.unique(tiled.events.column("name")).to_pylist()
    steps = [n for n in names if n and n.startswith("ProfilerStep#")]
    original_steps = [n for n in pc.unique(original.events.column("name")).to_pylist()
                      if n and n.startswith("ProfilerStep#")]
    assert len(steps) == copies * len(original_steps)


def tile_source(path: Path) -> bytes:
    import gzip

    return gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
