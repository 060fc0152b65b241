"""Progress on stderr while a command works, when stderr is a terminal (a pseudo-terminal here), and nothing when it
is not. The delay before it shows (2 s) is set to 0 through TRACEKIT_PROGRESS_AFTER: no timing in the test."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading

import pytest

from tests.conftest import REPO
from tracekit import synth


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("progress")
    synth.generate(root, ranks=2, steps=2, seed=2)
    return root


def run_with_terminal_stderr(args: list[str], env: dict) -> tuple[int, str, bytes]:
    """(exit code, stdout, what the terminal on stderr received)."""
    primary, secondary = pty.openpty()
    received = bytearray()

    def drain():
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the command ended and closed the terminal
                return
            if not chunk:
                return
            received.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    process = subprocess.Popen([sys.executable, "-m", "tracekit.cli", *args], stdout=subprocess.PIPE,
                               stderr=secondary, env=env, cwd=REPO)
    os.close(secondary)
    stdout, _ = process.communicate(timeout=300)
    reader.join(timeout=30)
    os.close(primary)
    return process.returncode, stdout.decode(), bytes(received)


COMMANDS = {
    "timeline": (["timeline", "{traces}", "-o", "{out}.json.gz"], b"writing the timeline"),
    "graph": (["graph", "{traces}", "--step", "1", "-o", "{out}.dot"], b"writing"),
    "sql": (["sql", "select count(*) from op_summary", "{traces}"], b"running the query"),
    "replay": (["replay", "{traces}"], b"replaying the graph"),
    "export": (["export", "chakra", "{traces}", "-o", "{out}/et"], b"writing the Chakra files"),
    "diff": (["diff", "{traces}", "{traces}", "-o", "{out}.xlsx"], b"analysing"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_progress_shows_on_a_terminal_only(traces, tmp_path, command):
    template, needle = COMMANDS[command]
    env = {**os.environ, "TRACEKIT_PROGRESS_AFTER": "0", "COLUMNS": "120"}
    args = [a.format(traces=traces, out=tmp_path / "terminal") for a in template]
    code, _, terminal = run_with_terminal_stderr(args, env)
    assert code == 0, terminal.decode(errors="replace")
    assert needle in terminal and b"reading" in terminal

    args = [a.format(traces=traces, out=tmp_path / "piped") for a in template]
    piped = subprocess.run([sys.executable, "-m", "tracekit.cli", *args], capture_output=True, env=env, cwd=REPO,
                           timeout=300, check=False)
    assert piped.returncode == 0 and piped.stderr == b"", piped.stderr
