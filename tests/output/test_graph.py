"""`tracekit graph`: window selection against the step oracle and a direct filter of the tables, GraphML and DOT
well-formed and exact."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import polars as pl
import pytest

import tracekit
from tests.conftest import REPO, shared_trace
from tests.support import step_oracle
from tracekit.output.graph import write_graph

NS = {"g": "http://graphml.graphdrawing.org/xmlns"}
TRAINER = "nvidia/a100_trainer_rank0of16_cudagraph.json.gz"
# Names real traces hold (templates, operators) and worse: every character XML and DOT treat specially.
NASTY = ['void f<float, 4>(int&, char const*)', 'operator<<', 'a & b && "c" \'d\'', 'back\\slash \\N \\" end\\',
         'line\nbreak', 'brace { } [ ] ; -> --', 'ctl\x01\x1f', 'émoji 😀 <![CDATA[x]]> <!-- c -->']


@pytest.fixture(scope="module")
def trainer():
    return tracekit.load(shared_trace(TRAINER))


def expected_window(tables, start: int, end: int) -> tuple[set[int], pl.DataFrame]:
    """Events overlapping [start, end) (zero-length ones inside it) and the edges among them, by plain filters."""
    events = tables.polars("events")
    ends = pl.col("ts") + pl.col("dur").fill_null(0)
    inside = events.filter((pl.col("ts") < end) & ((ends > start) | (pl.col("ts") >= start)))
    ids = set(inside["id"])
    edges = tables.polars("edges").filter(pl.col("src").is_in(ids) & pl.col("dst").is_in(ids))
    return ids, edges


def parse_graphml(path):
    root = ET.parse(path).getroot()
    keys = {k.get("id"): k.get("attr.name") for k in root.findall("g:key", NS)}
    nodes = {n.get("id"): {keys[d.get("key")]: d.text for d in n.findall("g:data", NS)}
             for n in root.findall(".//g:node", NS)}
    edges = [(e.get("source"), e.get("target"), {keys[d.get("key")]: d.text for d in e.findall("g:data", NS)})
             for e in root.findall(".//g:edge", NS)]
    return nodes, edges


DOT_TOKEN = re.compile(r'\s*(?:("(?:\\.|[^"\\])*")|(->)|([{}\[\];,=])|(-?[\w.]+))', re.S)


def dot_unquote(token: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), token[1:-1], flags=re.S)


def parse_dot(text: str):
    """A small DOT reader for what the writer emits: tokens, brace balance, node and edge statements."""
    tokens, pos, size = [], 0, len(text.rstrip())
    while pos < size:
        match = DOT_TOKEN.match(text, pos)
        assert match and match.end() > pos, f"unparsable DOT at {text[pos:pos + 40]!r}"
        tokens.append(match.group(match.lastindex))
        pos = match.end()
    assert tokens[:2] == ["digraph", "tracekit"] and tokens[2] == "{" and tokens[-1] == "}"
    depth = 0
    for t in tokens:
        depth += (t == "{") - (t == "}")
        assert depth >= 0
    assert depth == 0
    nodes, edges = {}, []
    body = tokens[3:-1]
    i = 0
    while i < len(body):
        end = body.index(";", i)
        stmt = body[i:end]
        i = end + 1
        if stmt[0] == "node":
            continue
        attrs_at = stmt.index("[")
        pairs = stmt[attrs_at + 1:-1]
        attrs = {}
        for j in range(0, len(pairs), 4):  # key = value ,
            assert pairs[j + 1] == "="
            value = pairs[j + 2]
            attrs[pairs[j]] = dot_unquote(value) if value.startswith('"') else value
        if len(stmt[:attrs_at]) == 3:
            assert stmt[1] == "->"
            edges.append((dot_unquote(stmt[0]), dot_unquote(stmt[2]), attrs))
        else:
            nodes[dot_unquote(stmt[0])] = attrs
    return nodes, edges


def test_step_graph_is_the_step_events_and_the_edges_among_them(trainer, tmp_path):
    members = step_oracle.step_members(trainer.polars("events"), trainer.polars("edges"))
    ids = set(members.filter(pl.col("step") == 552)["id"])
    edges = trainer.polars("edges").filter(pl.col("src").is_in(ids) & pl.col("dst").is_in(ids)
                                           & ~pl.col("kind").str.starts_with("et_"))
    graph = write_graph(trainer, tmp_path / "g.graphml", step=552)
    write_graph(trainer, tmp_path / "g.dot", step=552)
    nodes, xml_edges = parse_graphml(tmp_path / "g.graphml")
    assert {int(n["event"]) for n in nodes.values()} == ids
    assert len(xml_edges) == edges.height == graph.edges.num_rows
    assert sorted((int(s[3:]), int(d[3:]), a["kind"]) for s, d, a in xml_edges) == sorted(
        edges.select("src", "dst", "kind").rows())
    assert {"nest", "launch", "stream"} <= {a["kind"] for _, _, a in xml_edges}
    dot_nodes, dot_edges = parse_dot((tmp_path / "g.dot").read_text())
    assert set(dot_nodes) == set(nodes)
    assert sorted((s, d, a["kind"]) for s, d, a in dot_edges) == sorted((s, d, a["kind"]) for s, d, a in xml_edges)
    assert all(s in dot_nodes and d in dot_nodes for s, d, _ in dot_edges)


def test_range_window_and_its_edges(trainer, tmp_path):
    events = trainer.polars("events")
    start = int(events["ts"].quantile(0.40))
    end = int(events["ts"].quantile(0.45))
    ids, edges = expected_window(trainer, start, end)
    write_graph(trainer, tmp_path / "g.graphml", start_ns=start, end_ns=end)
    nodes, xml_edges = parse_graphml(tmp_path / "g.graphml")
    assert {int(n["event"]) for n in nodes.values()} == ids
    assert len(xml_edges) == edges.height
    # Edges only join listed nodes; attributes keep their values.
    assert all(s in nodes and d in nodes for s, d, _ in xml_edges)
    lags = sorted(int(a["lag"]) for _, _, a in xml_edges if "lag" in a)
    assert lags == sorted(edges["lag"].drop_nulls().to_list())


@pytest.fixture
def nasty_trace(tmp_path):
    """Ops with hostile names, each launching a kernel with a hostile name, inside ProfilerStep#3."""
    entries = [dict(ph="X", cat="user_annotation", name="ProfilerStep#3", pid=1, tid=1, ts=0, dur=1000)]
    for i, name in enumerate(NASTY):
        ts = 10 + 100 * i
        entries += [
            dict(ph="X", cat="cpu_op", name=name, pid=1, tid=1, ts=ts, dur=50),
            dict(ph="X", cat="cuda_runtime", name="cudaLaunchKernel", pid=1, tid=1, ts=ts + 10, dur=5,
                 args={"correlation": i + 1}),
            dict(ph="X", cat="kernel", name=name, pid=0, tid=7, ts=ts + 30, dur=20,
                 args={"correlation": i + 1, "device": 0, "stream": 7}),
        ]
    path = tmp_path / "nasty.json"
    path.write_text(json.dumps({"traceEvents": entries}))
    return path


def test_names_survive_both_formats_exactly(nasty_trace, tmp_path):
    tables = tracekit.load(nasty_trace)
    write_graph(tables, tmp_path / "g.graphml", step=3)
    write_graph(tables, tmp_path / "g.dot", step=3)
    nodes, edges = parse_graphml(tmp_path / "g.graphml")
    n = len(NASTY)
    assert len(nodes) == 1 + 3 * n
    # step → op, op → launch call (nest); call → kernel (launch); kernel → kernel (stream)
    assert len(edges) == n + n + n + (n - 1)
    xml_safe = [s.replace("\x01", "\ufffd").replace("\x1f", "\ufffd") for s in NASTY]
    cpu_names = sorted(v["name"] for v in nodes.values() if v["kind"] == "cpu_op")
    gpu_names = sorted(v["name"] for v in nodes.values() if v["kind"] == "kernel")
    assert cpu_names == gpu_names == sorted(xml_safe)
    dot_nodes, dot_edges = parse_dot((tmp_path / "g.dot").read_text(encoding="utf-8"))
    dot_safe = [s.replace("\x01", " ").replace("\x1f", " ") for s in NASTY]
    assert sorted(v["label"] for v in dot_nodes.values() if v["kind"] == "cpu_op") == sorted(dot_safe)
    assert len(dot_edges) == len(edges)
    assert all(s in dot_nodes and d in dot_nodes for s, d, _ in dot_edges)


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "tracekit.cli", *args], capture_output=True, text=True, cwd=REPO)


def test_cli_writes_both_formats(nasty_trace, tmp_path):
    result = run_cli("graph", str(nasty_trace), "--step", "3", "-o", str(tmp_path / "a.graphml"),
                     "-o", str(tmp_path / "a.gv"))
    assert result.returncode == 0, result.stderr
    assert "25 nodes" in result.stdout and (tmp_path / "a.gv").read_text().startswith("digraph")
    ET.parse(tmp_path / "a.graphml")


@pytest.mark.parametrize("args,needle", [
    (["--step", "4"], "no ProfilerStep#4"),
    (["--step", "3", "--start-ns", "0", "--end-ns", "5"], "either a step"),
    ([], "either a step"),
    (["--start-ns", "5"], "go together"),
    (["--start-ns", "9", "--end-ns", "5"], "range is empty"),
    (["--start-ns", "5000000000", "--end-ns", "5000000001"], "no event overlaps the range"),  # not an empty graph
])
def test_cli_window_errors_are_one_line_and_exit_2(nasty_trace, tmp_path, args, needle):
    result = run_cli("graph", str(nasty_trace), *args, "-o", str(tmp_path / "a.dot"))
    assert result.returncode == 2 and needle in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cli_unknown_format_is_refused_before_reading(tmp_path):
    result = run_cli("graph", str(tmp_path / "missing.json"), "--step", "1", "-o", str(tmp_path / "g.png"))
    assert result.returncode == 2 and "g.png" in result.stderr and "unknown graph format" in result.stderr


def test_cli_window_options_are_checked_before_reading(tmp_path):
    result = run_cli("graph", str(tmp_path / "missing.json"), "--start-ns", "9", "--end-ns", "5",
                     "-o", str(tmp_path / "g.dot"))
    assert result.returncode == 2 and "range is empty" in result.stderr and "missing.json" not in result.stderr
