"""The link's pass families skipped on a trace without their entries (edges.FAMILY_RESULTS): the edges and
diagnostics are those of every pass run, on real traces with and without cuda_sync events, fwdbwd flows and host
points on two threads of a rank."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from tests.conftest import shared_trace
from tracekit.link import edges
from tracekit.pipeline import read_files

# (trace, the families of cuda_sync events and fwdbwd flows it has entries of)
TRACES = [
    ("nvidia/a100_event_sync.json.gz", {"sync"}),
    ("nvidia/a100_alexnet_cuda_sync.json.gz", {"sync"}),
    ("legacy/kineto_cuda_sync_before_fix.json", {"sync"}),
    ("nvidia/v100_ns_resolution.json.gz", {"flow"}),
    ("amd/mi250_minitoy_train.json.gz", {"flow"}),
    ("nvidia/h100_qwen1.5-0.5b.json.gz", set()),
    ("nvidia/b200_eager_rank0of8.json.gz", set()),  # one host thread too: every family skipped
    ("amd/mi300x_vllm_decode_graph_capture.json.gz", set()),
    ("legacy/resnet50_2020-12_bare_list.pt.trace.json.gz", set()),
]
EDGE_KEYS = ["rank", "kind", "src", "dst", "subkind", "lag"]
NOTE_KEYS = ["rank", "position", "stage", "reason", "detail"]


def in_order(table: pa.Table, keys: list[str]) -> pa.Table:
    """The rows in one order: the passes' temp tables come back in the order DuckDB's threads wrote them."""
    return table.sort_by([(key, "ascending") for key in keys])


def points_on_two_threads(tables) -> bool:
    """Whether a rank has timed cpu_ops, annotations or Python frames on two threads (pid, tid) or more, in SQL."""
    kinds = ", ".join(f"'{kind}'" for kind in edges.THREAD_WAIT_POINT_KINDS)
    return tables.sql(f"select count(*) > 0 from (select rank from events where kind in ({kinds}) and ts is not null "
                      "group by rank having count(distinct (pid, tid)) > 1)").item()


@pytest.mark.parametrize("relative, present", TRACES, ids=[t for t, _ in TRACES])
def test_skipped_families_change_nothing(relative, present, monkeypatch):
    tables = read_files([shared_trace(relative)], None, None, edges=False, workers=None)
    assert edges.absent_families(tables) == {"sync", "flow"} - present
    nest_edges = edges.nest_edges
    if points_on_two_threads(tables):
        present = present | {"thread_wait"}
    assert nest_edges(tables.events)[2] == ("thread_wait" in present)
    skipped = edges.build_edges(tables)
    monkeypatch.setattr(edges, "absent_families", lambda _tables: set())
    monkeypatch.setattr(edges, "nest_edges", lambda events: (*nest_edges(events)[:2], True))
    every_pass = edges.build_edges(tables)
    assert in_order(skipped.edges, EDGE_KEYS).equals(in_order(every_pass.edges, EDGE_KEYS))
    assert in_order(skipped.diagnostics, NOTE_KEYS).equals(in_order(every_pass.diagnostics, NOTE_KEYS))
    # what the skipped passes would have found: nothing, where the trace has none of their entries
    kinds = set(every_pass.edges.column("kind").to_pylist())
    if "sync" not in present:
        assert "sync" not in kinds
    if "flow" not in present:
        assert "flow" not in kinds
    if "thread_wait" not in present:
        assert "thread_wait_inferred" not in kinds
    # a trace with a family's entries gets its edges, or diagnostics saying why not (libkineto's records before
    # its cuda_sync fix name no event: every wait unresolved)
    reasons = set(every_pass.diagnostics.column("reason").to_pylist())
    for family in present - {"thread_wait"}:  # two threads need not wait on each other
        assert family in kinds or any(reason.startswith(family) for reason in reasons)


def test_the_thread_wait_points_are_the_kinds_its_pass_reads():
    """The nest pass decides whether the thread-wait pass can find anything from THREAD_WAIT_POINT_KINDS: a kind its
    SQL reads and the constant lacks would skip the pass on a trace it has edges for."""
    from tracekit.engine.catalog import load_query

    filters = re.findall(r"kind in \(([^)]*)\)", load_query("link/thread_wait_inferred_edges").statement)
    assert filters
    for listed in filters:
        assert set(re.findall(r"'([a-z_]+)'", listed)) == set(edges.THREAD_WAIT_POINT_KINDS), listed
