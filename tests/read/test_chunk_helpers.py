"""Chunks decoded in helper processes (tracekit/read/chunk_workers.py): the same tables, ids and notes as the reader
alone makes, whichever process made each chunk; and the reader's own outcome where a helper cannot help (a chunk
that is not JSON, a helper killed, a file cut short)."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import threading
import time
import zlib
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest

from tests.conftest import REPO, shared_trace
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


# ---------------------------------------------------------------------------------------------------------------
# A head start: a helper reads the file on its own before the reader reaches it (`ChunkHelpers.head_start`)


def begun(helpers: ChunkHelpers, seconds: float = 0.5) -> ChunkHelpers:
    """HELPERS once their head start has begun, and SECONDS more (the helper makes chunks meanwhile)."""
    deadline = time.monotonic() + 60
    while not helpers.started[0].has_begun():
        assert time.monotonic() < deadline, "the head start never began"
        time.sleep(0.01)
    time.sleep(seconds)
    return helpers


def read_ahead_of(path: Path, chunk_bytes: int, helpers: ChunkHelpers) -> tuple[TraceParts, int]:
    """PATH read with HELPERS, and how many of its chunks the reader took from their head start."""
    taken = []
    made_ahead = helpers.made_ahead

    def counted(*args):
        for chunk in made_ahead(*args):
            taken.append(chunk)
            yield chunk

    with mock.patch.object(helpers, "made_ahead", counted):
        parts = read_trace(path, chunk_bytes, helpers)
    return parts, len(taken)


@pytest.mark.parametrize("relative", [
    "nvidia/a100_trainer_rank0of16_cudagraph.json.gz",
    "amd/mi300x_vllm_decode_graph_execution.json.gz",  # HIP graph replays, serving, no ProfilerStep
    "nvidia/h100_bert-small.json.gz",  # keys after traceEvents
    "legacy/resnet50_2020-12_bare_list.pt.trace.json.gz",  # a bare list of entries
    "legacy/kineto_cuda_sync_before_fix.json",  # not gzip
])
def test_a_head_start_gives_the_tables_of_the_reader_alone(relative):
    path = shared_trace(relative)
    chunk_bytes = max(len(read_bytes(path)) // 40, 1 << 12)
    alone = read_trace(path, chunk_bytes)
    with begun(ChunkHelpers(1, head_start_bytes=0).head_start([str(path)], chunk_bytes)) as helpers:
        ahead, taken = read_ahead_of(path, chunk_bytes, helpers)
    assert taken > 0  # chunks the helper made before the reader came, taken
    assert_same_parts(ahead, alone)


def test_a_head_start_keeps_at_most_head_chunks(tmp_path, monkeypatch):
    """However long the reader takes to come, the helper holds at most HEAD_CHUNKS chunks' tables; the reader reads
    the rest as without a head start."""
    path = write_trace(tmp_path / "t.json.gz", tricky_entries(3000))
    monkeypatch.setattr(chunk_workers, "HEAD_CHUNKS", 3)
    with begun(ChunkHelpers(1, head_start_bytes=0).head_start([path], 1 << 14), 1.0) as helpers:
        ahead, taken = read_ahead_of(path, 1 << 14, helpers)
    assert taken == 3
    assert_same_parts(ahead, read_trace(path, 1 << 14))


def test_a_cut_file_read_ahead_keeps_what_precedes_the_cut(tmp_path):
    path = write_trace(tmp_path / "cut.json.gz", tricky_entries(3000), cut=0.6)
    alone = read_trace(path, 1 << 14)
    with begun(ChunkHelpers(1, head_start_bytes=0).head_start([path], 1 << 14)) as helpers:
        ahead, taken = read_ahead_of(path, 1 << 14, helpers)
    assert taken > 0
    assert "truncated" in ahead.entries.notes.column("reason").to_pylist()
    assert_same_parts(ahead, alone)


def test_a_file_changed_after_its_head_start_is_read_as_it_now_is(tmp_path):
    path = write_trace(tmp_path / "t.json.gz", tricky_entries(3000))
    with begun(ChunkHelpers(1, head_start_bytes=0).head_start([path], 1 << 14)) as helpers:
        write_trace(path, tricky_entries(2500))  # another trace in its place
        now, taken = read_ahead_of(path, 1 << 14, helpers)
    assert taken == 0
    assert_same_parts(now, read_trace(path, 1 << 14))


def test_chunks_made_ahead_are_taken_only_while_they_match_the_readers(tmp_path):
    """Chunks made ahead of another file (same cuts for the first, other bytes after): the reader takes the
    matching ones and reads from the first that differs, with the ids a reader alone gives."""
    from tracekit.read.columns import entry_tables
    from tracekit.read.text import text_chunks

    entries = tricky_entries(3000)
    path = write_trace(tmp_path / "t.json.gz", entries)
    other = write_trace(tmp_path / "o.json.gz", entries[:1500] + [{**e, "name": e.get("name", "") + "!"}
                                                                    for e in entries[1500:]])
    made = [(len(c), zlib.crc32(c), memoryview(chunk_workers.encoded(entry_tables("", c, 0))))
            for c in text_chunks(other, 1 << 14)]
    taken = []
    with mock.patch.object(ChunkHelpers, "made_ahead", lambda *_: (taken.append(m) or m for m in made)), \
            ChunkHelpers(0) as helpers:
        parts = read_trace(path, 1 << 14, helpers)
    assert 0 < len(taken) < len(made)
    assert_same_parts(parts, read_trace(path, 1 << 14))


def test_a_head_start_of_what_is_no_kineto_trace_leaves_the_reader_its_answer(tmp_path):
    """The helper gives up where the file is no trace it can stream (an Execution Trace, text that is not JSON):
    the reader reads as it would alone, and the helper then helps with the next file."""
    not_json = tmp_path / "bad.json"
    not_json.write_text('{"traceEvents": [{"ph": "X", "name": op5}]}')
    execution_trace = shared_trace("et_pairs/rtx2080ti_linear/et.json.gz")
    after = write_trace(tmp_path / "t.json.gz", tricky_entries(3000))
    for path in (not_json, execution_trace):
        with begun(ChunkHelpers(1, head_start_bytes=0).head_start([path], 1 << 14), 0.2) as helpers:
            try:
                alone = read_trace(path, 1 << 14)
            except InputError as error:
                with pytest.raises(InputError) as ahead:
                    read_trace(path, 1 << 14, helpers)
                assert str(ahead.value) == str(error)
            else:
                assert alone.is_execution_trace
                assert read_trace(path, 1 << 14, helpers).top == alone.top
            helped, made = helped_read(after, 1 << 14, helpers)
        assert made > 0
        assert_same_parts(helped, read_trace(after, 1 << 14))


def test_a_head_start_the_reader_reaches_first_is_not_waited_for(tmp_path):
    """A read that comes before the helper has begun (a caller with its imports done) takes nothing from it, and
    shares the file's chunks with it as without a head start."""
    path = write_trace(tmp_path / "t.json.gz", tricky_entries(3000))
    with ChunkHelpers(1, head_start_bytes=0).head_start([path], 1 << 14) as helpers:
        assert not helpers.started[0].has_begun()  # a fresh interpreter: ~0.1 s before it reads a byte
        ahead, taken = read_ahead_of(path, 1 << 14, helpers)
        assert taken == 0
        helped, made = helped_read(path, 1 << 14, helpers)
    assert made > 0
    assert_same_parts(ahead, read_trace(path, 1 << 14))
    assert_same_parts(helped, read_trace(path, 1 << 14))


def test_a_head_start_needs_a_large_local_file(tmp_path):
    small = write_trace(tmp_path / "small.json.gz", tricky_entries(100))
    with ChunkHelpers(1).head_start([str(small), str(tmp_path)]) as helpers:
        assert helpers.started == [] and helpers.ahead is None
    with ChunkHelpers(1, head_start_bytes=0).head_start([str(tmp_path), "s3://bucket/t.json"]) as helpers:
        assert helpers.started == [] and helpers.ahead is None  # a folder, a URL: nothing to read ahead


def test_a_head_start_has_a_size_of_its_own(tmp_path):
    """A head start begins from `head_start_bytes` of JSON, whatever a read needs before it starts helpers
    (`min_text_bytes`): the helper a head start begins starts while a core is idle (the command's imports)."""
    path = write_trace(tmp_path / "t.json.gz", tricky_entries(3000))
    size = chunk_workers.text_bytes(path)
    with ChunkHelpers(1, min_text_bytes=size + 1, head_start_bytes=size).head_start([path], 1 << 14) as helpers:
        assert len(helpers.started) == 1 and helpers.ahead is not None
    with ChunkHelpers(1, min_text_bytes=0, head_start_bytes=size + 1).head_start([path], 1 << 14) as helpers:
        assert helpers.started == [] and helpers.ahead is None


@pytest.mark.parametrize("relative, above_helper_bytes", [
    ("diff_pairs/resnet50_v100_workers0_vs_workers4/workers0.pt.trace.json.gz", True),  # 35 MB of JSON
    ("nvidia/a100_trainer_rank0of16_cudagraph.json.gz", False),  # 24.6 MB: a head start, no helper mid-read
])
def test_the_report_command_reads_its_trace_ahead_and_writes_the_same_workbook(tmp_path, relative,
                                                                               above_helper_bytes):
    """`tracekit report` of a trace over HEAD_START_TEXT_BYTES of JSON starts its helper before its imports, and
    its read takes what the helper made: the same workbook as the API's report, which reads without. In this process
    the imports are done, so the read waits for the helper to begin (in a command it has, by then)."""
    from click.testing import CliRunner

    from tracekit.cli.app import main
    from tracekit.inputs import resolve_inputs
    from tracekit.output.workbooks import report

    path = shared_trace(relative)
    size = chunk_workers.text_bytes(path)
    assert size >= chunk_workers.HEAD_START_TEXT_BYTES
    assert (size >= chunk_workers.HELPER_TEXT_BYTES) == above_helper_bytes
    taken = []
    made_ahead = ChunkHelpers.made_ahead

    def once_begun(helpers, *args):
        begun(helpers, 0.3)
        for chunk in made_ahead(helpers, *args):
            taken.append(chunk)
            yield chunk

    with mock.patch.object(ChunkHelpers, "made_ahead", once_begun):
        result = CliRunner().invoke(main, ["report", str(path), "-o", str(tmp_path / "cli")])
    assert result.exit_code == 0, result.output
    assert taken
    report(resolve_inputs([path]), tmp_path / "api")
    assert (tmp_path / "cli" / "rank0.xlsx").read_bytes() == (tmp_path / "api" / "rank0.xlsx").read_bytes()


# A forked head start, run in a fresh process of one thread (a test runner may hold others, and then no helper is
# forked): the tables of the reader alone, chunks taken from the fork, and what the helper was
FORKED_READ = ("import json, sys\n"
               "import tracekit.read.kineto  # the reader, imported before the fork (as cli.app.head_started does)\n"
               "from tests.read.test_chunk_helpers import assert_same_parts, begun, read_ahead_of\n"
               "from tracekit.read.chunk_workers import ChunkHelpers\n"
               "from tracekit.read.kineto import read_trace\n"
               "path, chunk_bytes = sys.argv[1], int(sys.argv[2])\n"
               "alone = read_trace(path, chunk_bytes)\n"
               "with begun(ChunkHelpers(1, head_start_bytes=0).head_start([path], chunk_bytes, forked=True)) as h:\n"
               "    helper = type(h.started[0].process).__name__\n"
               "    ahead, taken = read_ahead_of(path, chunk_bytes, h)\n"
               "    process = h.started[0].process\n"
               "assert_same_parts(ahead, alone)\n"
               "print(json.dumps({'helper': helper, 'taken': taken, 'exit': process.returncode}))\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="helpers are forked on Linux only")
@pytest.mark.parametrize("relative", [
    "nvidia/h100_bert-small.json.gz",  # keys after traceEvents
    "legacy/resnet50_2020-12_bare_list.pt.trace.json.gz",  # a bare list of entries
    None,  # notes, repairs and bad entries (tricky_entries)
])
def test_a_forked_head_start_gives_the_tables_of_the_reader_alone(tmp_path, relative):
    path = write_trace(tmp_path / "t.json.gz", tricky_entries(3000)) if relative is None else shared_trace(relative)
    chunk_bytes = max(len(read_bytes(path)) // 40, 1 << 12)
    proc = subprocess.run([sys.executable, "-c", FORKED_READ, str(path), str(chunk_bytes)], capture_output=True,
                          text=True, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["helper"] == "ForkedHelper"
    assert seen["taken"] > 0
    assert seen["exit"] in (0, -signal.SIGKILL)  # ended by the reader (stopped, or its stdin closed)


def test_a_process_with_other_threads_starts_fresh_helpers():
    """A fork copies only the thread that forks: a lock another thread held would stay held in the child."""
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        with ChunkHelpers(1) as helpers:
            (helper,) = helpers.start(forked=True)
            assert isinstance(helper.process, subprocess.Popen)
            assert helper.submit(b"[]").result(timeout=60)  # a working helper
    finally:
        release.set()
        other.join()
