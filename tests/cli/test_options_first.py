"""Every option is checked before any work: a bad option is the error even when the input would take minutes to
read (here the input does not exist, so an option checked late would be reported as the missing input instead), and
`--scheduler` refuses Execution Traces before it starts or reaches a cluster."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, shared_trace


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracekit.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300, check=False)


CASES = {
    "timeline_out_dir": (["timeline", "{missing}", "-o", "{tmp}/no/such/dir/t.json.gz"], "no such directory"),
    "timeline_out_is_dir": (["timeline", "{missing}", "-o", "{tmp}"], "is a directory"),
    "graph_out_dir": (["graph", "{missing}", "--step", "1", "-o", "{tmp}/no/g.dot"], "no such directory"),
    "graph_format": (["graph", "{missing}", "--step", "1", "-o", "{tmp}/g.png"], "unknown graph format"),
    "graph_range": (["graph", "{missing}", "--start-ns", "5", "-o", "{tmp}/g.dot"], "go together"),
    "sql_out_dir": (["sql", "select 1", "{missing}", "-o", "{tmp}/no/r.csv"], "no such directory"),
    "sql_format": (["sql", "select 1", "{missing}", "-o", "{tmp}/r.txt"], "cannot tell the format"),
    "run_analysis": (["run", "nosuch", "{missing}"], "no such analysis"),
    "run_out_dir": (["run", "op_summary", "{missing}", "-o", "{tmp}/no/r.csv"], "no such directory"),
    "replay_out_dir": (["replay", "{missing}", "-o", "{tmp}/no/t.json.gz"], "no such directory"),
    "replay_selector": (["replay", "{missing}", "--scale", "nonsense"], "SELECTOR=FACTOR"),
    "scheduler_syntax": (["report", "{missing}", "-o", "{tmp}/r", "--scheduler", "lots"], "not local:N"),
    "max_rows": (["sql", "select 1", "{missing}", "-n", "-3"], "-3"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_option_is_reported_before_the_input_is_read(case, tmp_path):
    template, needle = CASES[case]
    args = [a.format(missing=tmp_path / "missing.json", tmp=tmp_path) for a in template]
    result = run_cli(*args)
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr and "missing.json" not in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["report", "ingest"])
def test_scheduler_refuses_an_execution_trace_before_reaching_the_cluster(command, tmp_path):
    """The scheduler's address is unreachable: had the command started work there first, the error would say so."""
    pair = shared_trace("et_pairs/a100_simple_add")
    result = run_cli(command, str(pair), "-o", str(tmp_path / "out"), "--scheduler", "tcp://127.0.0.1:9")
    assert result.returncode == 2, result.stderr
    assert "et.json.gz: an Execution Trace: --scheduler links Kineto traces only" in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()
