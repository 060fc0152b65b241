"""Chunks decoded in helper processes (tracekit/read/chunk_workers.py): the same tables, ids and notes as the reader
alone makes, whichever process made each chunk; and the reader's own outcome where a helper cannot help (a chunk
that is not JSON, a helper killed, a file cut short)."""

from __future__ import annotations

import gzip
import json
import os
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest

from tests.conftest import shared_trace
from tests.read.test_ingest_streaming import tricky_entries
from tracekit.errors import InputError
from tracekit.read import chunk_workers, kineto
from tracekit.read.chunk_workers import ChunkHelpers
from tracekit.read.columns import EntryTables, TraceParts
from tracekit.read.kineto import read_trace
from tracekit.read.text import read_bytes


def assert_same_parts(a: TraceParts, b: TraceParts) -> None:
    assert a.top == b.top
    assert a.entries.entry_count == b.entries.entry_count
    for name in EntryTables.TABLES:
        x, y = getattr(a.entries, name), getattr(b.entries, name)
        assert x.schema == y.schema, name
        assert x.combine_chunks().equals(y.combine_chunks()), name


@pytest.fixture(scope="module")
def helpers():
    """One helper, started once and warm for each test (as for the second file of a read), used whatever the
    file's size."""
    with ChunkHelpers(1, min_text_bytes=0) as started:
        read_trace(shared_trace("nvidia/h100_bert-small.json.gz"), 1 << 14, started)
        assert started.started[0].submit(b"[]").result(timeout=60)  # it has started: it answers
        yield started


@contextmanager
def slowed_reader(seconds: float = 0.01):
    """The reader's own chunks each made SECONDS later (the helpers', in their processes, as fast as ever): the
    reader never waits for a helper, and on a fast machine it read a small file whole before a warm helper had
    answered (CI, 2026-11-27), so a test of what helpers make slows the reader instead."""
    made_here = kineto.entry_tables

    def slowed(*args):
        time.sleep(seconds)
        return made_here(*args)

    with mock.patch.object(kineto, "entry_tables", slowed):
        yield


def helped_read(path: Path, chunk_bytes: int, helpers: ChunkHelpers) -> tuple[TraceParts, int]:
    """PATH read with HELPERS (the reader slowed), and how many chunks they made."""
    before = sum(h.replies for h in helpers.started)
    with slowed_reader():
        parts = read_trace(path, chunk_bytes, helpers)
    return parts, sum(h.replies for h in helpers.started) - before


@pytest.mark.parametrize("relative", [
    "nvidia/a100_trainer_rank0of16_cudagraph.json.gz",  # CUDA graph replays, 25 MB
    "amd/mi300x_vllm_decode_graph_capture.json.gz",  # HIP graph capture, serving
    "amd/mi300x_vllm_decode_graph_execution.json.gz",  # HIP graph replays, serving, no ProfilerStep
    "nvidia/h100_qwen1.5-0.5b.json.gz",  # no cuda_sync events
    "amd/mi300x_qwen1.5-0.5b.json.gz",
    "nvidia/b200_eager_rank0of8.json.gz",
    "nvidia/h100_bert-small.json.gz",  # keys after traceEvents
    "legacy/resnet50_2020-12_bare_list.pt.trace.json.gz",  # a bare list of entries
    "legacy/kineto_cuda_sync_before_fix.json",  # not gzip
])
def test_helpers_give_the_tables_of_the_reader_alone(relative, helpers):
    path = shared_trace(relative)
    chunk_bytes = max(len(read_bytes(path)) // 40, 1 << 12)
    alone = read_trace(path, chunk_bytes)
    helped, made = helped_read(path, chunk_bytes, helpers)
    assert made > 0  # the helper made some of the chunks: the comparison is of two ways of making them
    assert_same_parts(helped, alone)


def test_the_ranks_of_a_run_share_the_helpers(helpers):
    """The 8 ranks of the DLRM set (NCCL collectives), one helper kept from file to file (as the pipeline's read of
    a run keeps it): each file's tables as it reads alone."""
    folder = shared_trace("multirank/dlrm_8ranks_v100")
    files = sorted(folder.glob("worker*.pt.trace.json.gz"))
    assert len(files) == 8
    before = sum(h.replies for h in helpers.started)
    for path in files:
        assert_same_parts(read_trace(path, 1 << 14, helpers), read_trace(path, 1 << 14))
    assert sum(h.replies for h in helpers.started) > before


def write_trace(path: Path, entries: list, cut: float | None = None) -> Path:
    data = gzip.compress(json.dumps({"traceEvents": entries}, indent=1).encode())
    path.write_bytes(data if cut is None else data[: int(len(data) * cut)])
    return path


def test_notes_and_repairs_keep_their_file_positions(tmp_path, helpers):
    """Entries that become notes (a bad timestamp, NaN repaired, an unknown phase) in chunks a helper made: their
    positions are their places in the whole file."""
    entries = tricky_entries(3000)
    for i in range(100, 6000, 700):
        entries[i] = {**entries[i], "ts": "soon"}
        entries[i + 1] = {**entries[i + 1], "ph": "Q"}
    path = tmp_path / "notes.json"
    path.write_text(json.dumps({"traceEvents": entries}, indent=1).replace('"dur": 1.5', '"dur": NaN', 5))
    alone = read_trace(path, 1 << 14)
    helped, made = helped_read(path, 1 << 14, helpers)
    assert made > 0
    notes = helped.entries.notes.to_pydict()
    assert {"bad_timestamp", "unknown_phase", "non_finite_number"} <= set(notes["reason"])
    assert max(notes["position"]) > 5000
    assert_same_parts(helped, alone)


def test_a_cut_file_keeps_what_precedes_the_cut(tmp_path, helpers):
    path = write_trace(tmp_path / "cut.json.gz", tricky_entries(3000), cut=0.6)
    alone = read_trace(path, 1 << 14)
    helped, made = helped_read(path, 1 << 14, helpers)
    assert made > 0
    assert "truncated" in helped.entries.notes.column("reason").to_pylist()
    assert_same_parts(helped, alone)


def test_a_chunk_that_is_not_json_gets_the_readers_message(tmp_path, helpers):
    """The bad entry is in the first chunk, which goes to the (idle) helper: it answers that it could not read it;
    the reader reads it again, falls back to the whole file and names the problem, as without helpers."""
    text = json.dumps({"traceEvents": tricky_entries(3000)}, indent=1)
    at = text.index('"name": "op5"')
    path = tmp_path / "bad.json"
    path.write_text(text[:at] + '"name": op5' + text[at + len('"name": "op5"'):])
    helper = helpers.started[0]
    assert helper.submit(b'[{"ph": "X", "name": op5}]').result(timeout=60) == chunk_workers.FAILED
    with pytest.raises(InputError) as alone:
        read_trace(path, 1 << 14)
    before = helper.replies
    with pytest.raises(InputError) as helped, slowed_reader():
        read_trace(path, 1 << 14, helpers)
    assert helper.replies > before  # the bad first chunk was the helper's
    assert str(helped.value) == str(alone.value)
    assert str(path) in str(helped.value) and "not valid JSON" in str(helped.value)


def test_a_killed_helper_leaves_its_chunks_to_the_reader(tmp_path):
    path = write_trace(tmp_path / "t.json.gz", tricky_entries(3000))
    alone = read_trace(path, 1 << 14)
    with ChunkHelpers(2, min_text_bytes=0) as two:
        read_trace(path, 1 << 14, two)
        assert all(h.submit(b"[]").result(timeout=60) for h in two.started)  # both started
        two.started[0].process.kill()
        two.started[0].process.wait()
        helped, made = helped_read(path, 1 << 14, two)
        assert not two.started[0].alive and two.started[1].alive
        assert made > 0
        processes = [h.process for h in two.started]
    assert_same_parts(helped, alone)
    assert all(p.poll() is not None for p in processes)  # none left running


def test_a_stuck_helper_is_ended_and_its_chunks_read_here(tmp_path, monkeypatch):
    path = write_trace(tmp_path / "t.json.gz", tricky_entries(3000))
    alone = read_trace(path, 1 << 14)
    monkeypatch.setattr(chunk_workers, "ANSWER_SECONDS", 0.5)
    with ChunkHelpers(1, min_text_bytes=0) as one:
        read_trace(path, 1 << 14, one)
        assert one.started[0].submit(b"[]").result(timeout=60)  # started
        os.kill(one.started[0].process.pid, signal.SIGSTOP)  # alive, and answering nothing
        with slowed_reader():  # so that the reader reaches the stopped helper's chunk before the file's end
            helped = read_trace(path, 1 << 14, one)
        assert not one.started[0].alive
    assert_same_parts(helped, alone)


def test_helpers_start_once_the_files_of_a_read_add_up(tmp_path):
    """Ranks of a run, each small: the helpers start at the file that brings the read to the threshold, and help
    with every file after it."""
    paths = [write_trace(tmp_path / f"rank{r}.json.gz", tricky_entries(1500 + r)) for r in range(3)]
    alone = [read_trace(p, 1 << 14) for p in paths]
    two_files = sum(chunk_workers.text_bytes(p) for p in paths[:2])
    assert chunk_workers.text_bytes(paths[0]) == len(gzip.decompress(paths[0].read_bytes()))
    with ChunkHelpers(1, min_text_bytes=two_files) as helpers:
        first = read_trace(paths[0], 1 << 14, helpers)
        assert helpers.started == []
        second = read_trace(paths[1], 1 << 14, helpers)
        assert len(helpers.started) == 1
        assert helpers.started[0].submit(b"[]").result(timeout=60)  # up: the third file's chunks are shared
        third, made = helped_read(paths[2], 1 << 14, helpers)
        assert made > 0
    for helped, own in zip([first, second, third], alone):
        assert_same_parts(helped, own)


def test_small_files_are_read_alone(tmp_path):
    path = write_trace(tmp_path / "small.json.gz", tricky_entries(100))
    with ChunkHelpers(1) as helpers:  # the default threshold: far more JSON than this
        assert helpers.for_file(path) == []
        read_trace(path, 1 << 12, helpers)
        assert helpers.started == []
