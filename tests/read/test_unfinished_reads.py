"""A read left unfinished (a bad file, an error in a later stage) ends its threads without waiting on them, where it
stops: the garbage collector may otherwise finish it in any thread, even inside the threading module's own lock,
where joining a thread deadlocks (a CI run hung so in tests/cluster)."""

from __future__ import annotations

import json
import threading

import pytest

import tracekit
from tracekit import pipeline
from tracekit.read.text import read_ahead


def test_an_unfinished_read_ahead_ends_without_waiting_for_its_thread():
    release = threading.Event()

    def blocks():
        yield b"first"
        release.wait()  # the next block is slow to come (a slow disk, a large gzip block)
        yield b"second"

    ahead = read_ahead(blocks())
    assert next(ahead) == b"first"  # the second block is being read meanwhile
    closer = threading.Thread(target=ahead.close)
    closer.start()
    try:
        closer.join(timeout=30)
        assert not closer.is_alive(), "closing waited for the block being read"
    finally:
        release.set()
        closer.join()


def test_the_read_is_closed_by_the_reader_when_a_later_step_fails(tmp_path, monkeypatch):
    """Even while something else holds the read (here a list; an error's traceback in a reference cycle can), the
    reader closes it where it fails, rather than leaving it to the garbage collector."""
    for rank in (0, 1):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps({"distributedInfo": {"rank": rank}, "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5}]}))
    closed, held = [], []

    def read_traces(files, workers=None, helpers=None):
        def reading():
            try:
                for path in files:
                    yield pipeline.read_or_error(path)
            finally:
                closed.append(True)

        held.append(reading())
        return held[-1]

    def failing_rank_tables(*_):
        raise RuntimeError("a later step fails")

    monkeypatch.setattr(pipeline, "read_traces", read_traces)
    monkeypatch.setattr(pipeline, "rank_tables", failing_rank_tables)
    with pytest.raises(RuntimeError, match="a later step fails"):
        tracekit.load(tmp_path)
    assert held and closed == [True]
