"""Properties every load must have, whatever the input: shared by the reliability and fuzz tests.

Written against the tables' meaning, not tracekit's code: entries are counted from the tables and the dropped
diagnostics; launch edges are checked against a join on (rank, correlation); acyclicity by graphlib.
"""

from __future__ import annotations

import graphlib
import gzip
import json

import polars as pl

import tracekit

GPU_KINDS = ["kernel", "memcpy", "memset"]
LAUNCHER_KINDS = ["runtime", "driver"]


def trace_entries(path) -> list:
    """The entries of a Kineto trace file, read with the json module (an oracle independent of tracekit's reader)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        doc = json.load(fh)
    return doc if isinstance(doc, list) else doc["traceEvents"]


def accounted_entries(tables: tracekit.TraceTables) -> int:
    """Rows of the tables made from entries, plus dropped diagnostics: must equal the entries read."""
    rows = sum(getattr(tables, t).num_rows for t in ("events", "instants", "flows"))
    meta = sum(tables.polars(t)["source_entries"].sum() for t in ("threads", "processes"))
    return rows + meta + tables.polars("diagnostics")["dropped"].sum()


def ordering_edges(edges: pl.DataFrame) -> pl.DataFrame:
    """EDGES less blocking copies' waits for their own op: such a sync_inferred edge (own op → the call) reverses the
    call's launch edge, a cycle of events but not of their starts and ends (the call starts before its op, the op
    ends before the call). Only memcpy/memset waits may do that. Less thread waits into an end (subkind *_end): they
    order the waiting call's end (run_backward returning after the autograd thread's last op), and the call starts
    before what it waits for, as a blocking copy does."""
    edges = edges.filter(~((pl.col("kind") == "thread_wait_inferred") & pl.col("subkind").str.ends_with("_end")))
    launches = edges.filter(pl.col("kind") == "launch").select("rank", src="dst", dst="src")
    own_op_waits = edges.filter(pl.col("kind") == "sync_inferred").join(launches, on=["rank", "src", "dst"], how="semi")
    assert set(own_op_waits["subkind"]) <= {"memcpy", "memset"}
    return edges.join(own_op_waits, on=["rank", "src", "dst", "kind"], how="anti")


def assert_graph_invariants(tables: tracekit.TraceTables) -> None:
    """Ids unique per rank; one launch edge per GPU op whose correlation has a launcher on its rank, and none
    other; unique edges, no self-loops; all edges together acyclic (ordering_edges)."""
    events, edges = tables.polars("events"), tables.polars("edges")
    assert events.select("rank", "id").is_unique().all(), "event ids repeat within a rank"
    gpu = events.filter(pl.col("kind").is_in(GPU_KINDS))
    launchers = events.filter(pl.col("kind").is_in(LAUNCHER_KINDS) & pl.col("correlation").is_not_null())
    linkable = gpu.join(launchers.select("rank", "correlation").unique(), on=["rank", "correlation"], how="semi")
    launch = edges.filter(pl.col("kind") == "launch")
    assert launch.select("rank", "dst").is_unique().all(), "a GPU op has two launch edges"
    assert set(launch.select("rank", "dst").rows()) == set(linkable.select("rank", "id").rows())
    assert not edges.select("rank", "src", "dst", "kind").is_duplicated().any()
    assert (edges["src"] != edges["dst"]).all()
    predecessors: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for rank, src, dst in (ordering_edges(edges).filter(~pl.col("kind").str.starts_with("et_"))
                           .select("rank", "src", "dst").iter_rows()):
        predecessors.setdefault((rank, dst), []).append((rank, src))
    list(graphlib.TopologicalSorter(predecessors).static_order())  # raises CycleError on a cycle
