"""Every option is checked before any work: a bad option is the error even when the input would take minutes to
read (here the input does not exist, so an option checked late would be reported as the missing input instead).
In process (click's CliRunner): the order of the checks is the point here, not the process (tests/cli/test_cli_errors
runs real processes)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tracekit.cli import main


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
    "jobs_and_scheduler": (["diff", "{missing}", "{missing}", "--jobs", "2", "--scheduler", "local:2"], "give one"),
    "max_rows": (["sql", "select 1", "{missing}", "-n", "-3"], "-3"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_option_is_reported_before_the_input_is_read(case, tmp_path):
    template, needle = CASES[case]
    args = [a.format(missing=tmp_path / "missing.json", tmp=tmp_path) for a in template]
    result = CliRunner().invoke(main, args)
    assert isinstance(result.exception, SystemExit), result.exception  # no other exception escaped
    assert result.exit_code == 2, result.stderr
    assert needle in result.stderr and "missing.json" not in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
