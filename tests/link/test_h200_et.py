"""The Execution Trace + Kineto pair recorded on an H200 (tests/data/gpu: et_train.json.gz, schema 1.1.1-chakra.0.0.4,
PyTorch 2.11): links against the raw files' record-function ids, the ordered match against those links."""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path

import polars as pl
import pyarrow as pa

import tracekit
from tracekit.link import et
from tracekit.query import analyses

DATA = Path(__file__).parents[1] / "data" / "gpu"
KINETO, ET = DATA / "kineto_train.json.gz", DATA / "et_train.json.gz"


@functools.cache
def tables() -> tracekit.TraceTables:
    return tracekit.load([KINETO, ET])


def raw_links() -> tuple[dict[int, int], int]:
    """ET node id → traceEvents position of the Kineto event with the node's rf_id, and the ET's node count."""
    nodes = json.loads(gzip.decompress(ET.read_bytes()))["nodes"]
    entries = json.loads(gzip.decompress(KINETO.read_bytes()))["traceEvents"]
    by_rf_id = {e["args"]["Record function id"]: i for i, e in enumerate(entries)
                if e.get("ph") == "X" and "Record function id" in e.get("args", {})}
    rf_ids = {n["id"]: next(a["value"] for a in n["attrs"] if a["name"] == "rf_id") for n in nodes}
    return {node: by_rf_id[rf] for node, rf in rf_ids.items() if rf in by_rf_id}, len(nodes)


def test_every_node_links_to_the_event_with_its_record_function_id():
    expected, total = raw_links()
    nodes = tables().polars("et_nodes")
    assert nodes.height == total == 9448
    got = dict(nodes.filter(pl.col("event_id").is_not_null()).select("id", "event_id").iter_rows())
    assert got == expected and len(got) == 9445
    # the unlinked three are the observer's process and thread roots (rf_id 0)
    assert nodes.filter(pl.col("event_id").is_null())["name"].str.starts_with("[pytorch|profiler|execution_").all()
    coverage = analyses.run(tables(), "et_link_coverage").row(0, named=True)
    assert (coverage["et_nodes"], coverage["linked_nodes"], coverage["linked_ops"], coverage["link_method"]) == (
        9448, 9445, len(set(expected.values())), "rf_id")


def test_name_order_links_agree_with_rf_id_links():
    """With Kineto's record-function ids hidden, the ordered match (name, thread, order) makes only links the ids
    make."""
    truth = tables().polars("et_nodes").select("rank", "id", truth="event_id")
    column = tables().events.schema.get_field_index("record_function_id")
    hidden = tables().events.set_column(column, "record_function_id", pa.nulls(tables().events.num_rows, pa.int64()))
    relinked = et.link_events(tables().with_tables(events=hidden)).polars("et_nodes")
    both = relinked.join(truth, on=["rank", "id"]).filter(pl.col("event_id").is_not_null())
    assert both.height >= 0.99 * truth["truth"].count()
    assert (both["event_id"] == both["truth"]).all()
