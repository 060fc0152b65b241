"""One step scoper (tracekit/query/step_scope.py): `run --step`, `graph --step`, `timeline --step` and `replay
--step` select the same window, the events of step N that tests/support/step_oracle.py finds from the tables in
polars, and refuse a step no rank has with the same one line and exit code 2."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import polars as pl
import pytest
from click.testing import CliRunner

import tracekit
from tests.support import step_oracle
from tracekit import synth
from tracekit.cli import main
from tracekit.output.graph import window_graph

STEP = 1


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    root = tmp_path_factory.mktemp("steps")
    synth.generate(root / "in", ranks=2, steps=3, seed=4)
    tables = tracekit.load(root / "in")
    events = tables.polars("events").with_columns(pl.col("rank").cast(pl.Int64))
    members = step_oracle.step_members(tables.polars("events"), tables.polars("edges"))
    expected = events.join(members.filter(pl.col("step") == STEP).select("rank", "id"), on=["rank", "id"])
    assert expected["rank"].n_unique() == 2 and expected.height > 0
    return root, tables, expected


def micros_to_ns(value) -> int:
    whole, _, frac = repr(value).partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3]) if frac else int(whole) * 1000


def test_every_command_selects_the_same_step(trace):
    root, tables, expected = trace
    keys = set(zip(expected["rank"], expected["id"]))
    with tracekit.from_tables(tables) as db, db.scoped(step=STEP) as part:
        api = part.sql("select rank, id from events")
    assert set(zip(api["rank"].cast(pl.Int64), api["id"])) == keys
    nodes = pl.from_arrow(window_graph(tables, step=STEP).nodes)
    assert set(zip(nodes["rank"].cast(pl.Int64), nodes["event"])) == keys
    # the timeline names no event ids: its slices are the step's timed events, by (rank, name, start)
    out = root / "t.json.gz"
    result = CliRunner().invoke(main, ["timeline", str(root / "in"), "-o", str(out), "--step", str(STEP),
                                       "--no-critical-path"])
    assert result.exit_code == 0, result.output
    with gzip.open(out, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    shown = Counter((e["args"]["rank"], e["name"], doc["baseTimeNanoseconds"] + micros_to_ns(e["ts"]))
                    for e in doc["traceEvents"] if e["ph"] == "X")
    timed = expected.filter(pl.col("ts").is_not_null())
    assert shown == Counter(zip(timed["rank"], timed["name"], timed["ts"]))
    # replay: the rows of that step only, one per rank that has it
    result = CliRunner().invoke(main, ["replay", str(root / "in"), "--step", str(STEP), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert sorted((row["rank"], row["step"]) for row in rows) == [(0, STEP), (1, STEP)]


def test_a_missing_step_is_the_same_one_line_error_everywhere(trace, tmp_path):
    root = trace[0]
    src = str(root / "in")
    commands = {"run": ["run", "op_summary", src], "graph": ["graph", src, "-o", str(tmp_path / "g.dot")],
                "timeline": ["timeline", src, "-o", str(tmp_path / "t.json")], "replay": ["replay", src]}
    messages = {}
    for name, args in commands.items():
        result = CliRunner().invoke(main, [*args, "--step", "99"])
        assert result.exit_code == 2, (name, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1, (name, result.output)
        messages[name] = lines[0]
    assert len(set(messages.values())) == 1, messages
    assert "--step 99: no ProfilerStep#99" in messages["run"] and "0, 1, 2" in messages["run"]
    assert not (tmp_path / "g.dot").exists() and not (tmp_path / "t.json").exists()
