"""Every command that reads traces, against every kind of bad input: exit code 2, one line on stderr that starts
`tracekit: error: `, names the path and says the problem; no traceback, no warning, nothing written.

The whole matrix runs in-process (click's CliRunner: fast); each input also runs once in a real process, the command
rotating through the list, so exit codes and the absence of tracebacks are checked where a user would see them.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

import tracekit
from tests.conftest import REPO
from tracekit import synth
from tracekit.cli import main

UNREADABLE = Path("/proc/sys/vm/drop_caches")  # mode 0200: even root gets EACCES reading it


@dataclass(frozen=True)
class BadInput:
    name: str
    needle: str  # what the message must say
    path: Path  # the path given on the command line


def make_dataset(root: Path, good: tracekit.TraceTables, name: str) -> Path:
    path = root / name
    tracekit.write_dataset(good, path)
    return path


@pytest.fixture(scope="module")
def good_trace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("good")
    synth.generate(root, ranks=1, steps=2, seed=5)
    return root / "rank0.json"


@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory, good_trace) -> dict[str, BadInput]:
    root = tmp_path_factory.mktemp("bad")
    good = tracekit.load(good_trace)  # each bad dataset starts as this trace's dataset
    found: list[BadInput] = []

    def add(name: str, needle: str, path: Path):
        found.append(BadInput(name, needle, path))

    add("missing", "no such file or directory", root / "missing.json")
    (root / "empty.json").write_bytes(b"")
    add("empty", "empty file (0 bytes)", root / "empty.json")
    (root / "empty.json.gz").write_bytes(gzip.compress(b""))
    add("empty_gzip", "empty once gunzipped", root / "empty.json.gz")
    (root / "picture.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01")
    add("png", "not valid JSON", root / "picture.png")
    (root / "table.csv").write_text("name,dur\naten::mm,12\n")
    add("csv", "not valid JSON", root / "table.csv")
    (root / "object.json").write_text('{"a": 1}')
    add("json_object", "not a Kineto trace", root / "object.json")
    # A bare list is the legacy trace format; entries that are not objects are not events.
    (root / "numbers.json").write_text("[1, 2]")
    add("json_list_of_numbers", "no trace events (none of its 2 entries", root / "numbers.json")
    (root / "no_events.json").write_text('{"traceEvents": [], "schemaVersion": 1}')
    add("empty_trace_events", "no trace events (traceEvents is empty)", root / "no_events.json")
    (root / "notes").mkdir()
    (root / "notes" / "readme.txt").write_text("no traces here")
    add("directory_without_traces", "holds no trace files", root / "notes")
    (root / "plain_file").write_text("x")
    add("parent_is_a_file", "no such file or directory", root / "plain_file" / "trace.json")
    (root / "dangling.json").symlink_to(root / "gone.json")
    add("broken_symlink", "broken symbolic link", root / "dangling.json")
    os.mkfifo(root / "pipe.json")
    add("fifo", "not a regular file", root / "pipe.json")
    add("unreadable", "permission denied", UNREADABLE)
    add("name_too_long", "file name too long", root / ("t" * 300 + ".json"))

    corrupt = make_dataset(root, good, "corrupt_parquet.tables")
    next((corrupt / "events").rglob("*.parquet")).write_bytes(b"PAR1 this is not parquet")
    add("dataset_corrupt_parquet", "not a readable Parquet file", corrupt)
    marker = make_dataset(root, good, "corrupt_marker.tables")
    (marker / "_tracekit.json").write_text("{not json")
    add("dataset_corrupt_marker", "_tracekit.json: not valid JSON", marker)
    newer = make_dataset(root, good, "newer.tables")
    manifest = json.loads((newer / "_tracekit.json").read_text())
    (newer / "_tracekit.json").write_text(json.dumps({**manifest, "schema_version": 99}))
    add("dataset_newer_format", "schema version 99", newer)
    incomplete = make_dataset(root, good, "incomplete.tables")
    shutil.rmtree(incomplete / "edges")
    add("dataset_missing_table", "incomplete or was altered", incomplete)
    return {b.name: b for b in found}


# Each command with every output it can write pointed into OUT, which must stay empty.
COMMANDS = {
    "ingest": lambda bad, good, out: ["ingest", bad, "-o", f"{out}/dataset"],
    "report": lambda bad, good, out: ["report", bad, "-o", f"{out}/report"],
    "diff": lambda bad, good, out: ["diff", bad, good, "-o", f"{out}/diff.xlsx"],
    "diff_candidate": lambda bad, good, out: ["diff", good, bad, "-o", f"{out}/diff.xlsx"],
    "graph": lambda bad, good, out: ["graph", bad, "--step", "1", "-o", f"{out}/g.graphml", "-o", f"{out}/g.dot"],
    "sql": lambda bad, good, out: ["sql", "select count(*) from events", bad, "-o", f"{out}/rows.csv"],
    "run": lambda bad, good, out: ["run", "gpu_timeline", bad, "-o", f"{out}/rows.parquet"],
}
# diff reads (and summarises) the baseline first: a bad candidate costs a summary, so only some inputs try it
CANDIDATE_INPUTS = {"empty", "png", "json_list_of_numbers", "dataset_corrupt_parquet", "unreadable"}

BAD_INPUT_NAMES = ["missing", "empty", "empty_gzip", "png", "csv", "json_object", "json_list_of_numbers",
                   "empty_trace_events", "directory_without_traces", "parent_is_a_file", "broken_symlink", "fifo",
                   "unreadable", "name_too_long", "dataset_corrupt_parquet", "dataset_corrupt_marker", "dataset_newer_format",
                   "dataset_missing_table"]


def test_the_matrix_names_every_bad_input(bad_inputs):
    assert sorted(bad_inputs) == sorted(BAD_INPUT_NAMES)


def usable(bad: BadInput) -> None:
    if bad.name == "unreadable":
        try:
            UNREADABLE.open("rb").close()
        except PermissionError:
            return
        except OSError:
            pass
        pytest.skip(f"{UNREADABLE} is not an unreadable file here")


def check_one_error_line(stderr: str, bad: BadInput) -> None:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"tracekit: error: {bad.path}"), lines[0]
    assert bad.needle in lines[0], lines[0]


# Every command with every bad input, in process; but a FIFO runs in a subprocess only (if it were opened, an
# in-process run would block for ever), and a bad diff candidate is a sample of the inputs (each costs a baseline
# summary).
IN_PROCESS = [(command, name) for name in BAD_INPUT_NAMES for command in COMMANDS
              if name != "fifo" and (command != "diff_candidate" or name in CANDIDATE_INPUTS)]


@pytest.mark.parametrize(("command", "input_name"), IN_PROCESS)
def test_bad_input_in_process(command, input_name, bad_inputs, good_trace, tmp_path):
    bad = bad_inputs[input_name]
    usable(bad)
    out = tmp_path / "out"
    out.mkdir()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(main, COMMANDS[command](str(bad.path), str(good_trace), out))
    assert isinstance(result.exception, SystemExit), result.exception  # no other exception escaped
    assert result.exit_code == 2, result.output
    check_one_error_line(result.stderr, bad)
    assert result.stdout == ""
    assert [str(w.message) for w in caught] == []
    assert list(out.iterdir()) == [], "nothing written"


@pytest.mark.parametrize("input_name", BAD_INPUT_NAMES)
def test_bad_input_in_a_real_process(input_name, bad_inputs, good_trace, tmp_path):
    bad = bad_inputs[input_name]
    usable(bad)
    commands = [c for c in COMMANDS if c != "diff_candidate"]
    # the FIFO under every command: each must refuse it without opening it (which would block)
    chosen = commands if input_name == "fifo" else [commands[BAD_INPUT_NAMES.index(input_name) % len(commands)]]
    for command in chosen:
        out = tmp_path / command
        out.mkdir()
        args = COMMANDS[command](str(bad.path), str(good_trace), out)
        result = subprocess.run([sys.executable, "-m", "tracekit.cli", *args], capture_output=True, text=True,
                                cwd=REPO, timeout=60, check=False)
        assert result.returncode == 2, (command, result.stderr)
        assert "Traceback" not in result.stderr
        check_one_error_line(result.stderr, bad)
        assert list(out.iterdir()) == [], "nothing written"


def test_files_without_events_beside_a_trace_are_ranks_without_events(good_trace, tmp_path):
    """Only an input with no events at all is refused; an empty rank file among others keeps its rank."""
    (tmp_path / "rank0.json").write_bytes(good_trace.read_bytes())
    (tmp_path / "rank1.json").write_text('{"traceEvents": []}')
    (tmp_path / "stray.json").write_text("[1, 2]")
    tables = tracekit.load(tmp_path)
    assert tables.polars("ranks").select("rank", "rank_source").rows() == [
        (0, "distributedInfo"), (1, "file_name"), (2, "file_order")]
    assert tables.polars("diagnostics").filter(source_file=str(tmp_path / "stray.json"))["dropped"].sum() == 2


# Queries as users paste them: longer than a file name may be, over several lines with `--` comments. None is a path.
ODD_QUERIES = {
    "longer_than_a_file_name": "with kernels as (select name, dur from events where kind = 'kernel'), "
                               + " ".join(f"k{i} as (select * from kernels)," for i in range(12))
                               + " longest as (select count(*) as n from kernels) select n from longest",
    "lines_and_comments": "-- kernels in the trace\nselect count(*) as n -- one row\nfrom events\n"
                          "where kind = 'kernel' -- GPU kernels only\n",
}


@pytest.mark.parametrize("name", list(ODD_QUERIES))
def test_odd_query_arguments_answer(name, good_trace):
    query = ODD_QUERIES[name]
    assert len(query) > 255 or "\n" in query
    kernels = sum(1 for e in json.loads(good_trace.read_text())["traceEvents"]
                  if e.get("ph") == "X" and e.get("cat") == "kernel")
    result = CliRunner().invoke(main, ["sql", query, str(good_trace), "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["n", str(kernels)]


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_during_a_query_ends_in_aborted_not_a_traceback(good_trace, tmp_path):
    # DuckDB turns a Ctrl-C that arrives while it runs a query into the query's error ("Query interrupted"): the
    # program reports it as click reports a Ctrl-C anywhere else. The query runs for hours; the trace is read in well
    # under the 3 s before the signal (and a Ctrl-C that came earlier must end the same way).
    proc = subprocess.Popen([sys.executable, "-m", "tracekit.cli", "sql", "select sum(range) from range(1000000000000)",
                             str(good_trace)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert err.strip().splitlines()[-1] == "Aborted!"
    assert "Traceback" not in err


def test_an_error_without_ctrl_c_still_shows_its_traceback(tmp_path):
    # the Ctrl-C rule swallows nothing else: a bug still surfaces whole
    code = ("import sys; from tracekit.cli import app\n"
            "def broken(): raise RuntimeError('Query interrupted')\n"
            "app.main = broken; app.run()\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "RuntimeError: Query interrupted" in proc.stderr
