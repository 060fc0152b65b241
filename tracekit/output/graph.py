"""The dependency graph of a time window, written as GraphML or Graphviz DOT text.

A window is a profiler step (`ProfilerStep#N`, per rank) or an explicit [start_ns, end_ns) range. Its graph holds
the step's events (tracekit/query/step_scope.py: the same events as every other --step) or the events overlapping
the range, and every edge between two of those events. The writers are our own: they stream text, escape names
(which hold <, >, &, quotes and backslashes) and need no Graphviz binary.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import pyarrow as pa

from tracekit.engine import catalog
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.output.atomic import replacing_file
from tracekit.query.step_scope import step_tables

GRAPHML_SUFFIXES = (".graphml",)
DOT_SUFFIXES = (".dot", ".gv")

# (column, GraphML type) of what each node and edge carries; nulls are left out.
NODE_ATTRIBUTES = (("rank", "int"), ("event", "long"), ("kind", "string"), ("name", "string"), ("pid", "string"),
                   ("tid", "string"), ("ts", "long"), ("dur", "long"), ("device", "int"), ("stream", "long"))
EDGE_ATTRIBUTES = (("kind", "string"), ("subkind", "string"), ("lag", "long"))

@dataclass(frozen=True)
class WindowGraph:
    nodes: pa.Table  # rank, event, kind, name, pid, tid, ts, dur, device, stream
    edges: pa.Table  # rank, src, dst, kind, subkind, lag


def window_graph(tables: TraceTables, step: int | None = None, start_ns: int | None = None,
                 end_ns: int | None = None) -> WindowGraph:
    """The step's events (step_scope.step_tables) or the events overlapping the range, and the edges among them; a
    window without events is an InputError (an empty graph file is no answer)."""
    check_window(step, start_ns, end_ns)
    if step is not None:
        tables = step_tables(tables, step)  # the window is every event left
    with catalog.connect(tables) as con:
        if step is not None:
            con.register("window_events", tables.events.select(["rank", "id"]))
            made = {"window_events": None}
        else:
            made = catalog.run_stage(con, ["output/range_window_events"], temp_tables=True,
                                     parameters={"output/range_window_events": {"start": start_ns, "end": end_ns}})
            if not con.execute("from window_events limit 1").fetchall():
                [(first, last)] = con.execute("select min(ts), max(ts + coalesce(dur, 0)) from events").fetchall()
                raise InputError(f"--start-ns {start_ns} --end-ns {end_ns}: no event overlaps the range (the "
                                 f"trace's events span {first} to {last} ns)")
        # queries/output/: the window's nodes, then the edges among them, each kept as a temp table
        catalog.run_stage(con, ["output/window_edges"], temp_tables=True, bound=made)
        return WindowGraph(con.sql("select * from window_nodes").to_arrow_table(),
                           con.sql("select * from window_edges").to_arrow_table())


def check_window(step: int | None, start_ns: int | None, end_ns: int | None) -> None:
    """Refuse a window that is not one, before any trace is read."""
    if (step is None) == (start_ns is None and end_ns is None):
        raise InputError("give either a step (--step N) or a time range (--start-ns A --end-ns B)")
    if step is None:
        if start_ns is None or end_ns is None:
            raise InputError("--start-ns and --end-ns go together")
        if start_ns >= end_ns:
            raise InputError(f"--start-ns {start_ns} --end-ns {end_ns}: the range is empty")


def write_graph(tables: TraceTables, path: str | Path, step: int | None = None, start_ns: int | None = None,
                end_ns: int | None = None) -> WindowGraph:
    """Write the window's graph to `path`: GraphML for *.graphml, Graphviz DOT for *.dot / *.gv."""
    path = Path(path)
    writer = graph_writer(path)
    graph = window_graph(tables, step, start_ns, end_ns)
    with replacing_file(path) as temp, temp.open("w", encoding="utf-8", newline="\n") as out:
        writer(graph, out)
    return graph


def graph_writer(path: Path):
    name = path.name.lower()
    if name.endswith(GRAPHML_SUFFIXES):
        return write_graphml
    if name.endswith(DOT_SUFFIXES):
        return write_dot
    raise InputError(f"{path}: unknown graph format (use .graphml, .dot or .gv)")


def node_id(rank: int, event: int) -> str:
    return f"r{rank}e{event}"


def rows(table: pa.Table, columns: Iterable[str]) -> Iterator[tuple]:
    return zip(*(table.column(c).to_pylist() for c in columns))


# --- GraphML ----------------------------------------------------------------------------------------------------
# XML 1.0 cannot hold most control characters, lone surrogates or U+FFFE/U+FFFF, even escaped: they become U+FFFD.
XML_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
XML_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;",
                             "\n": "&#10;", "\r": "&#13;", "\t": "&#9;"})


def xml_escape(value: object) -> str:
    """Text safe in XML content and in double-quoted attributes (line breaks kept as character references)."""
    return XML_INVALID.sub("\ufffd", str(value)).translate(XML_ESCAPES)


def write_graphml(graph: WindowGraph, out: TextIO) -> None:
    out.write('<?xml version="1.0" encoding="UTF-8"?>\n'
              '<graphml xmlns="http://graphml.graphdrawing.org/xmlns" '
              'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
              'xsi:schemaLocation="http://graphml.graphdrawing.org/xmlns '
              'http://graphml.graphdrawing.org/xmlns/1.0/graphml.xsd">\n')
    for scope, attributes in (("node", NODE_ATTRIBUTES), ("edge", EDGE_ATTRIBUTES)):
        for name, type_ in attributes:
            out.write(f'  <key id="{scope[0]}_{name}" for="{scope}" attr.name="{name}" attr.type="{type_}"/>\n')
    out.write('  <graph id="tracekit" edgedefault="directed">\n')
    node_columns = [name for name, _ in NODE_ATTRIBUTES]
    for values in rows(graph.nodes, node_columns):
        attrs = dict(zip(node_columns, values))
        data = "".join(f'<data key="n_{k}">{xml_escape(v)}</data>' for k, v in attrs.items() if v is not None)
        out.write(f'    <node id="{node_id(attrs["rank"], attrs["event"])}">{data}</node>\n')
    edge_columns = [name for name, _ in EDGE_ATTRIBUTES]
    for i, (rank, src, dst, *values) in enumerate(rows(graph.edges, ["rank", "src", "dst", *edge_columns])):
        data = "".join(f'<data key="e_{k}">{xml_escape(v)}</data>'
                       for k, v in zip(edge_columns, values) if v is not None)
        out.write(f'    <edge id="x{i}" source="{node_id(rank, src)}" target="{node_id(rank, dst)}">{data}</edge>\n')
    out.write("  </graph>\n</graphml>\n")


# --- DOT --------------------------------------------------------------------------------------------------------
DOT_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")


def dot_quote(value: object) -> str:
    """A DOT double-quoted string. Backslashes are doubled so Graphviz shows them as written (and `\\N`-style label
    escapes cannot fire), quotes escaped, line breaks as `\\n`; other control characters become spaces."""
    text = DOT_CONTROL.sub(" ", str(value).replace("\r\n", "\n"))
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def dot_attributes(pairs: Iterable[tuple[str, object]]) -> str:
    return ", ".join(f"{k}={v}" if isinstance(v, int) else f"{k}={dot_quote(v)}" for k, v in pairs if v is not None)


def write_dot(graph: WindowGraph, out: TextIO) -> None:
    out.write("digraph tracekit {\n  node [shape=box];\n")
    node_columns = [name for name, _ in NODE_ATTRIBUTES]
    for values in rows(graph.nodes, node_columns):
        attrs = dict(zip(node_columns, values))
        label = [("label", attrs.pop("name"))]
        out.write(f"  {dot_quote(node_id(attrs['rank'], attrs['event']))} "
                  f"[{dot_attributes(label + list(attrs.items()))}];\n")
    edge_columns = [name for name, _ in EDGE_ATTRIBUTES]
    for rank, src, dst, *values in rows(graph.edges, ["rank", "src", "dst", *edge_columns]):
        out.write(f"  {dot_quote(node_id(rank, src))} -> {dot_quote(node_id(rank, dst))} "
                  f"[{dot_attributes(zip(edge_columns, values))}];\n")
    out.write("}\n")
