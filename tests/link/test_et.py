"""Execution Traces: every node read, links to Kineto checked against record-function ids and time order, edges
form a forest / a DAG whose data edges follow the tensors."""

from __future__ import annotations

import gzip
import json
import shutil

import polars as pl
import pyarrow as pa
import pytest

import tracekit
from tests.conftest import REPO, shared_trace
from tracekit.engine import catalog
from tracekit.link import et
from tracekit.query import analyses
from tracekit.read.ranks import RANK_FILE_PATTERN

ET_FILES = [
    "et_pairs/a100_simple_add/et.json.gz",
    "et_pairs/rtx2080ti_linear/et.json.gz",
    "et_pairs/cpu_torch2.13_single/et.json.gz",
    "multirank/dlrm_8ranks_v100/et_rank5.json.gz",
    "multirank/cpu_torch2.13_ddp_gloo_2ranks/et_rank1.json.gz",
]
NAME_ORDER_PAIRS = ["et_pairs/a100_simple_add", "et_pairs/rtx2080ti_linear", "multirank/dlrm_8ranks_v100"]


def et_document(path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def attr(node: dict, name: str):
    """A node attribute in either layout (flat key in 1.0.1, `attrs` list in 1.1.x)."""
    if "attrs" in node:
        return next((a["value"] for a in node["attrs"] if a["name"] == name), None)
    return node.get(name)


def linked(tables: tracekit.TraceTables) -> pl.DataFrame:
    """Linked nodes beside their Kineto events."""
    events = tables.polars("events").select("rank", "id", event_name="name", event_ts="ts", event_pid="pid",
                                            event_tid="tid", event_kind="kind")
    return tables.polars("et_nodes").filter(pl.col("event_id").is_not_null()).join(
        events, left_on=["rank", "event_id"], right_on=["rank", "id"])


@pytest.fixture(scope="module")
def dlrm(loaded_trace) -> tracekit.TraceTables:
    return loaded_trace("multirank/dlrm_8ranks_v100")


# --------------------------------------------------------------------------- reading


@pytest.mark.parametrize("relative", ET_FILES)
def test_every_node_becomes_one_row(relative, loaded_trace):
    """Nothing lost: one et_nodes row per node, with the file's ids, names, parents and rf_ids."""
    path = shared_trace(relative)
    nodes = et_document(path)["nodes"]
    rows = loaded_trace(relative).polars("et_nodes").sort("id")
    assert rows.height == len(nodes)
    expected = sorted(nodes, key=lambda n: n["id"])
    assert rows["id"].to_list() == [n["id"] for n in expected]
    assert rows["name"].to_list() == [n["name"] for n in expected]
    assert rows["parent"].to_list() == [n.get("parent", n.get("ctrl_deps")) for n in expected]
    assert rows["rf_id"].to_list() == [attr(n, "rf_id") for n in expected]
    assert rows["tid"].to_list() == [attr(n, "tid") for n in expected]


@pytest.mark.parametrize("relative", ET_FILES)
def test_every_tensor_argument_becomes_a_row(relative, loaded_trace):
    """et_tensors holds each tensor value of the file, including tensors inside (nested) lists."""
    path = shared_trace(relative)

    def leaves(value) -> list:
        """Tensor values ([id, storage, offset, numel, elem_bytes, device]) anywhere inside a value."""
        if isinstance(value, list) and len(value) == 6 and isinstance(value[0], int) and isinstance(value[5], str):
            return [value]
        return [t for v in value for t in leaves(v)] if isinstance(value, list) else []

    expected = []
    for node in et_document(path)["nodes"]:
        for direction in ("input", "output"):
            if "attrs" in node:
                values, types = node[direction + "s"]["values"], node[direction + "s"]["types"]
            else:
                values, types = node[direction + "s"], node[direction + "_types"]
            for value, type_ in zip(values, types):
                if "Tensor" in type_:
                    expected += [(node["id"], direction, t[0], t[1]) for t in leaves(value)]
    rows = loaded_trace(relative).polars("et_tensors")
    assert sorted(rows.select("node", "direction", "tensor_id", "storage_id").iter_rows()) == sorted(expected)


def test_tensors_inside_nested_lists_have_element_indexes(loaded_trace):
    """c10d::allgather_ takes a list of lists of tensors: each gets its own row, numbered depth-first."""
    rows = loaded_trace("multirank/cpu_torch2.13_ddp_gloo_2ranks/et_rank0.json.gz").polars("et_tensors")
    nodes = loaded_trace("multirank/cpu_torch2.13_ddp_gloo_2ranks/et_rank0.json.gz").polars("et_nodes")
    gather = nodes.filter(pl.col("name") == "c10d::allgather_")["id"][0]
    listed = rows.filter((pl.col("node") == gather) & (pl.col("direction") == "input") & (pl.col("position") == 0))
    assert listed["element"].to_list() == [0, 1]
    assert listed["shape"].to_list() == ["[256]", "[256]"] and set(listed["dtype"]) == {"float"}


def test_both_layouts_give_the_same_inputs_form(loaded_trace):
    """inputs / outputs are {values, shapes, types} in both schemas; op_schema and attrs come through."""
    old = loaded_trace("et_pairs/a100_simple_add/et.json.gz").polars("et_nodes")
    new = loaded_trace("et_pairs/cpu_torch2.13_single/et.json.gz").polars("et_nodes")
    for nodes in (old, new):
        empty = nodes.filter(pl.col("name") == "aten::empty").row(0, named=True)
        inputs = json.loads(empty["inputs"])
        assert set(inputs) >= {"values", "shapes", "types"} and len(inputs["values"]) == len(inputs["types"])
        assert empty["op_schema"].startswith("aten::empty")
        assert json.loads(empty["attrs"])["scope"] == 0
    assert "kernel_backend" in json.loads(new["attrs"][0])
    assert "fw_tid" in json.loads(old["attrs"][0])


def test_file_header_is_kept_in_diagnostics(loaded_trace):
    tables = loaded_trace("multirank/dlrm_8ranks_v100/et_rank4.json.gz")
    note = tables.polars("diagnostics").filter(pl.col("reason") == "et_file").row(0, named=True)
    assert note["rank"] == 4 and "rank from file_name" in note["detail"]
    header = json.loads(note["detail"].split("; header ", 1)[1])
    assert header["schema"] == "1.0.1" and header["pid"] == 59815 and "nodes" not in header


def test_unknown_keys_and_bad_nodes_are_kept_or_reported(tmp_path):
    nodes = [
        {"id": 1, "name": "[pytorch|profiler|execution_trace|process]", "parent": 1, "tid": 0, "inputs": [],
         "input_shapes": [], "input_types": [], "outputs": [], "output_shapes": [], "output_types": []},
        {"id": 2, "name": "aten::empty", "parent": 1, "tid": "1", "new_key": {"x": 1},
         "inputs": [], "input_shapes": [], "input_types": [],
         "outputs": [[3, 4, 0, 8, 4, "cpu"]], "output_shapes": [[2, 4]], "output_types": ["Tensor(float)"]},
        {"name": "no id"},
        {"id": 5, "name": "aten::add", "parent": 1, "inputs": [[3, 4, 0, 8, 4, "cpu"], "bogus"],
         "input_shapes": [[2, 4], []], "input_types": ["Tensor(float)", "Tensor(float)"],
         "outputs": [], "output_shapes": [], "output_types": []},
    ]
    path = tmp_path / "et_rank2.json"
    path.write_text(json.dumps({"schema": "1.0.1", "pid": 7, "nodes": nodes}))
    tables = tracekit.load(path)
    rows = tables.polars("et_nodes").sort("id")
    assert rows["id"].to_list() == [1, 2, 5] and set(rows["rank"]) == {2}
    assert rows["tid"].to_list() == [0, 1, None]  # "1" coerced
    assert json.loads(rows["attrs"][1])["new_key"] == {"x": 1}
    diag = tables.polars("diagnostics").filter(pl.col("stage") == "et")
    dropped = diag.filter(pl.col("dropped"))
    assert dropped["position"].to_list() == [2] and json.loads(dropped["raw"][0]) == {"name": "no id"}
    assert diag.filter(pl.col("reason") == "et_bad_tensor").height == 1
    data = tables.polars("edges").filter(pl.col("kind") == "et_data")
    assert data.select("src", "dst").rows() == [(2, 5)]


def test_missing_parent_is_reported(tmp_path):
    nodes = [{"id": 1, "name": "root", "parent": 1}, {"id": 2, "name": "a", "parent": 1},
             {"id": 3, "name": "b", "parent": 99}]
    path = tmp_path / "et.json"
    path.write_text(json.dumps({"schema": "1.0.1", "pid": 7, "nodes": nodes}))
    tables = tracekit.load(path)
    assert tables.polars("edges").filter(pl.col("kind") == "et_ctrl").select("src", "dst").rows() == [(1, 2)]
    note = tables.polars("diagnostics").filter(pl.col("reason") == "et_missing_parent")
    assert note["detail"].to_list() == [
        "1 nodes name a parent that is not in the Execution Trace, e.g. node 3 (parent 99)"]
    assert note["source_file"].to_list() == [str(path)]


# --------------------------------------------------------------------------- ranks


def test_rank_from_et_file_name():
    assert int(RANK_FILE_PATTERN.search("et_rank3.json.gz").group(1)) == 3


def test_dlrm_eight_ranks_of_nodes_each_linked_on_its_own_rank(dlrm):
    nodes = dlrm.polars("et_nodes")
    assert sorted(nodes["rank"].unique()) == list(range(8))
    for r in range(8):
        count = len(et_document(shared_trace(f"multirank/dlrm_8ranks_v100/et_rank{r}.json.gz"))["nodes"])
        assert nodes.filter(pl.col("rank") == r).height == count
    pairs = linked(dlrm)
    # Each rank's ET pid is that rank's Kineto process: a link never crosses ranks.
    assert (pairs["pid"] == pairs["event_pid"]).all()


def test_execution_trace_alone_is_read_with_its_rank(tmp_path, loaded_trace):
    tables = loaded_trace("multirank/dlrm_8ranks_v100/et_rank3.json.gz")
    assert set(tables.polars("et_nodes")["rank"]) == {3}
    plain = tmp_path / "trace.json.gz"
    shutil.copy(shared_trace("et_pairs/a100_simple_add/et.json.gz"), plain)
    alone = tracekit.load(plain)
    assert set(alone.polars("et_nodes")["rank"]) == {0}
    assert alone.polars("et_nodes")["event_id"].null_count() == alone.et_nodes.num_rows
    coverage = analyses.run(alone, "et_link_coverage")
    assert coverage.select("linked_nodes", "kineto_ops").row(0) == (0, 0)


def test_execution_trace_rank_by_pid_or_reported(tmp_path):
    pair = shared_trace("multirank/cpu_torch2.13_ddp_gloo_2ranks")
    for r in (0, 1):
        shutil.copy(pair / f"kineto_rank{r}.json.gz", tmp_path / f"kineto_rank{r}.json.gz")
    doc = et_document(pair / "et_rank1.json.gz")
    (tmp_path / "trace_et.json").write_text(json.dumps(doc))  # no rank in the name: the pid tells
    tables = tracekit.load(tmp_path)
    assert set(tables.polars("et_nodes")["rank"]) == {1}
    doc["pid"] = 1  # matches no Kineto process: cannot tell which of the two ranks
    (tmp_path / "trace_et.json").write_text(json.dumps(doc))
    tables = tracekit.load(tmp_path)
    assert tables.et_nodes.num_rows == 0
    note = tables.polars("diagnostics").filter(pl.col("reason") == "et_rank_unknown")
    assert note.height == 1 and note["dropped"][0]


def test_two_execution_traces_for_one_rank_is_an_input_error(tmp_path):
    for name in ("et_rank0.json.gz", "et-rank-0.json.gz"):
        shutil.copy(shared_trace("et_pairs/a100_simple_add/et.json.gz"), tmp_path / name)
    with pytest.raises(tracekit.InputError, match="rank 0"):
        tracekit.load(tmp_path)


# --------------------------------------------------------------------------- links


@pytest.mark.parametrize("relative,ranks", [("et_pairs/cpu_torch2.13_single", [0]),
                                            ("multirank/cpu_torch2.13_ddp_gloo_2ranks", [0, 1])])
def test_rf_id_links_cover_the_trace(relative, ranks, loaded_trace):
    tables = loaded_trace(relative)
    coverage = analyses.run(tables, "et_link_coverage")
    assert coverage["rank"].to_list() == ranks
    assert (coverage["node_share"] >= 0.995).all(), coverage
    assert set(coverage["link_method"]) == {"rf_id"}
    pairs = linked(tables)
    assert (pairs["rf_id"] > 0).all() and (pairs["name"] == pairs["event_name"]).all()
    if relative.endswith("single"):  # the MANIFEST's count
        assert coverage["linked_nodes"].to_list() == [2266]


@pytest.mark.parametrize("relative", ["et_pairs/cpu_torch2.13_single", "multirank/cpu_torch2.13_ddp_gloo_2ranks"])
def test_name_order_links_agree_with_rf_id_links(relative, loaded_trace):
    """Oracle for the ordered match: hide Kineto's record function ids and link again; every link made must be
    the one the record function ids make."""
    tables = loaded_trace(relative)
    truth = tables.polars("et_nodes").select("rank", "id", truth="event_id")
    column = tables.events.schema.get_field_index("record_function_id")
    hidden = tables.events.set_column(column, "record_function_id", pa.nulls(tables.events.num_rows, pa.int64()))
    relinked = et.link_events(tables.with_tables(events=hidden)).polars("et_nodes")
    assert set(relinked["link_method"].drop_nulls()) == {"name_order"}
    both = relinked.join(truth, on=["rank", "id"]).filter(pl.col("event_id").is_not_null())
    assert both.height >= 0.99 * truth["truth"].count()
    assert (both["event_id"] == both["truth"]).all()


@pytest.mark.parametrize("relative", NAME_ORDER_PAIRS)
def test_name_order_links_follow_names_and_time(relative, loaded_trace):
    """Schema 1.0.1 pairs: most nodes link, names agree, and on each ET thread the linked Kineto ops start in the
    order of the ET node ids, all on one Kineto thread."""
    tables = loaded_trace(relative)
    coverage = analyses.run(tables, "et_link_coverage")
    assert set(coverage["link_method"]) == {"name_order"}
    assert (coverage["node_share"] >= 0.94).all(), coverage
    pairs = linked(tables)
    assert (pairs["name"] == pairs["event_name"]).all()
    per_thread = pairs.sort("id").group_by("rank", "tid").agg(
        backwards=(pl.col("event_ts").diff() < 0).sum(), kineto_threads=pl.col("event_tid").n_unique())
    assert (per_thread["backwards"] == 0).all(), per_thread
    assert (per_thread["kineto_threads"] == 1).all()
    # Unlinked nodes are only the observer's own root nodes.
    unlinked = tables.polars("et_nodes").filter(pl.col("event_id").is_null())["name"]
    assert unlinked.str.starts_with("[pytorch|profiler|execution_").all()


def test_name_order_finds_the_recorded_iteration(loaded_trace):
    """rtx2080ti_linear: Kineto holds ~40 iterations, the ET one. Linked ops must be the ones whose autograd
    sequence numbers are the ET's (the first iteration would also match by names alone)."""
    tables = loaded_trace("et_pairs/rtx2080ti_linear")
    events = tables.polars("events").select("rank", "id", "sequence_number")
    pairs = tables.polars("et_nodes").filter(pl.col("seq_id") >= 0).join(
        events, left_on=["rank", "event_id"], right_on=["rank", "id"])
    assert pairs.height >= 200
    assert (pairs["seq_id"] == pairs["sequence_number"]).all()


def test_unlinked_counts_are_in_diagnostics(loaded_trace):
    tables = loaded_trace("et_pairs/rtx2080ti_linear")
    notes = tables.polars("diagnostics").filter(pl.col("stage") == "et")
    nodes = notes.filter(pl.col("reason") == "et_unlinked_nodes")["detail"].to_list()
    ops = notes.filter(pl.col("reason") == "et_unlinked_ops")["detail"].to_list()
    coverage = analyses.run(tables, "et_link_coverage").row(0, named=True)
    assert nodes == [f"{coverage['et_nodes'] - coverage['linked_nodes']} of {coverage['et_nodes']} Execution Trace "
                     f"nodes have no Kineto event (linked by name_order)"]
    assert ops[0].startswith(f"{coverage['kineto_ops'] - coverage['linked_ops']} of {coverage['kineto_ops']} ")


def test_coverage_query_is_a_documented_analysis(loaded_trace):
    query = catalog.load_query("et_link_coverage")
    assert set(query.inputs) == {"et_nodes", "events"}
    assert list(query.columns) == ["rank", "et_nodes", "linked_nodes", "node_share", "kineto_ops", "linked_ops",
                                   "op_share", "link_method"]
    tables = loaded_trace("et_pairs/a100_simple_add")
    with tables.connect() as con:
        direct = con.sql((REPO / "queries" / "et_link_coverage.sql").read_text()).pl()
    assert list(direct.columns) == list(query.columns)
    assert direct.row(0, named=True)["linked_ops"] == direct.row(0, named=True)["kineto_ops"] == 36


# --------------------------------------------------------------------------- edges


def ancestors_of(parents: dict[int, int], node: int) -> set[int]:
    seen = set()
    while node in parents and parents[node] != node and parents[node] not in seen:
        node = parents[node]
        seen.add(node)
    return seen


@pytest.mark.parametrize("relative", ET_FILES)
def test_control_edges_form_a_forest(relative, loaded_trace):
    tables = loaded_trace(relative)
    nodes = tables.polars("et_nodes")
    ctrl = tables.polars("edges").filter(pl.col("kind") == "et_ctrl")
    assert ctrl["dst"].is_unique().all()  # at most one parent
    parents = dict(zip(ctrl["dst"].to_list(), ctrl["src"].to_list()))
    roots = set(nodes["id"]) - set(parents)
    for node in nodes["id"]:  # walking up always ends at a root, never loops
        chain = ancestors_of(parents, node)
        assert not chain or (chain & roots)
    # Every node but the roots has its parent edge: the file's parents, nothing invented.
    expected = nodes.filter(pl.col("parent") != pl.col("id")).select(src="parent", dst="id")
    assert sorted(ctrl.select("src", "dst").rows()) == sorted(expected.rows())


@pytest.mark.parametrize("relative", ET_FILES)
def test_data_edges_follow_tensors_forward(relative, loaded_trace):
    """Each et_data edge: src < dst (so the graph is acyclic), src output a tensor that dst reads, src is not an
    ancestor of dst (an op has not written its outputs while its children run), and no other node wrote that
    tensor after src finished and before dst started."""
    tables = loaded_trace(relative)
    nodes = tables.polars("et_nodes")
    data = tables.polars("edges").filter(pl.col("kind") == "et_data")
    assert data.height > 0 and (data["src"] < data["dst"]).all()
    parents = dict(zip(nodes["id"].to_list(), nodes["parent"].to_list()))
    subtree_end = {n: n for n in parents}
    for n in parents:
        for a in ancestors_of(parents, n):
            subtree_end[a] = max(subtree_end[a], n)
    tensors = tables.polars("et_tensors").filter(pl.col("storage_id") != 0)
    key = ["tensor_id", "storage_id"]
    outs = tensors.filter(pl.col("direction") == "output").select("node", *key)
    ins = tensors.filter(pl.col("direction") == "input").select("node", *key)
    writers: dict[tuple, list[int]] = {}
    for node, *k in outs.iter_rows():
        writers.setdefault(tuple(k), []).append(node)
    shared = data.join(outs, left_on="src", right_on="node").join(ins, left_on=["dst", *key], right_on=["node", *key])
    assert shared.select("src", "dst").unique().height == data.height
    for src, dst, *k in shared.select("src", "dst", *key).iter_rows():
        assert src not in ancestors_of(parents, dst)
        later = [w for w in writers[tuple(k)] if subtree_end[src] < subtree_end[w] < dst and w != src]
        assert not later, (src, dst, later)
