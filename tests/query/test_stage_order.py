"""Stage SQL (queries/link, scope, output, export, replay, diff) declares what it reads, and the catalog orders the
passes from those declarations: a file that reads a relation its `inputs:` header leaves out fails here (by its
text, and by running every file of every folder on a connection holding only what it declares), as does a pass that
would run before a pass it reads, stage SQL run outside catalog.run_stage, and a file whose result another file
reads without a columns header (or whose columns are not its header's)."""

from __future__ import annotations

import re
import sys
import threading

import polars as pl
import pytest

import tracekit
from tests.conftest import REPO, shared_trace
from tests.query.test_catalog import code_of, every_file
from tracekit.engine import catalog, connection
from tracekit.engine.tables import TraceTables
from tracekit.link import edges as link_edges

STAGE_FILES = [name for name in every_file() if "/" in name and not name.startswith("lib/")]
# SQL words that may follow FROM or JOIN without naming a relation
NOT_RELATIONS = {"lateral", "unnest", "select", "values"}
# `name as (`, `name as materialized (`, `name(columns) as (` (a recursive CTE)
CTE = r"\b([a-z_][a-z_0-9]*)\s*(?:\([^()]*\))?\s+as\s+(?:not\s+)?(?:materialized\s+)?\("


def relations_read(name: str) -> set[str]:
    """What queries/NAME.sql reads: every relation after FROM or JOIN in its own text (not a CTE of its own, a table
    function call or `is [not] distinct from`), and the trace tables its include files read."""
    query = catalog.load_query(name)
    own = code_of(query.sql)
    ctes = {m.lower() for m in re.findall(CTE, own, re.IGNORECASE)}
    read = set()
    for m in re.finditer(r"\b(distinct\s+)?(?:from|join)\s+([a-z_][a-z_0-9]*)\b(\s*\()?", own, re.IGNORECASE):
        relation = m.group(2).lower()
        if not (m.group(1) or m.group(3) or relation in ctes or relation in NOT_RELATIONS):
            read.add(relation)
    for include in catalog.include_order(query.includes):
        text = code_of(catalog.load_query(include).sql)
        read |= {t for t in TraceTables.names() if re.search(rf"\b(from|join)\s+{t}\b", text, re.IGNORECASE)}
    return read


@pytest.mark.parametrize("name", STAGE_FILES)
def test_a_stage_file_reads_only_its_declared_inputs(name):
    undeclared = relations_read(name) - set(catalog.load_query(name).input_names)
    assert not undeclared, f"queries/{name}.sql reads {sorted(undeclared)} without declaring them in inputs:"


def test_the_check_catches_an_undeclared_read(tmp_path, monkeypatch):
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "bad.sql").write_text("-- question: q\n-- inputs: events (all of them, in order)\n"
                                               "with up(a) as (select 1) select * from events e\n"
                                               "join launch_edges l on l.dst = e.id join up on true\n"
                                               "where e.id is not distinct from l.src\n")
    monkeypatch.setattr(catalog, "queries_dir", lambda: tmp_path)
    catalog.load_query.cache_clear()
    try:
        assert catalog.load_query("link/bad").input_names == ("events",)
        assert relations_read("link/bad") == {"events", "launch_edges"}
    finally:
        catalog.load_query.cache_clear()


def test_a_file_whose_result_another_reads_documents_its_columns():
    outputs = {catalog.load_query(name).output: name for name in STAGE_FILES}
    read = {i for name in STAGE_FILES for i in catalog.load_query(name).input_names}
    undocumented = sorted(outputs[o] for o in read & outputs.keys()
                          if not re.search(r"^-- columns:", catalog.load_query(outputs[o]).sql, re.MULTILINE))
    assert not undocumented, f"read by another file but no columns: header: {undocumented}"


def test_passes_run_after_the_passes_they_read():
    """An independent check of stage_order: in every stage folder, each pass comes after every pass of its folder
    whose output its inputs name, and each runs once; a pass an earlier run made (`bound`) is not run again."""
    folders = sorted({name.rpartition("/")[0] for name in STAGE_FILES})
    assert folders == ["diff", "export", "link", "output", "replay", "scope"]
    for folder in folders:
        roots = [name for name in STAGE_FILES if name.startswith(f"{folder}/")]
        order = catalog.stage_order(roots)
        assert len(order) == len(set(order)) and set(order) == set(roots)
        made = {catalog.load_query(name).output: i for i, name in enumerate(order)}
        for i, name in enumerate(order):
            for needed in catalog.load_query(name).input_names:
                assert made.get(needed, -1) < i, f"{name} runs before {needed}, which it reads"
    assert catalog.stage_order(["scope/members"]) == ["scope/members_by_step", "scope/windows", "scope/members"]
    assert catalog.stage_order(["export/chakra_deps"]) == [
        "export/chakra_owners", "export/chakra_compute", "export/chakra_nodes", "export/chakra_deps"]
    assert catalog.stage_order(["link/et_offsets"], bound={"et_seq"}) == [
        "link/et_link_method", "link/kineto_sequences", "link/et_offsets"]


@pytest.fixture
def stages_run_alone(monkeypatch):
    """catalog.run_stage, with every file it runs also run on a connection of its own that holds only the relations
    its header declares (copied from the caller's connection): an undeclared read fails to bind there. Returns the
    files run, the stage files whose SQL was taken from the catalog (`ready`) outside run_stage, and the files whose
    result's columns are not their header's."""
    original_run, original_ready = catalog.run_stage, catalog.ready
    seen = {"ran": [], "outside": [], "columns": []}
    # One connection per set of include files, holding their macros and nothing else between runs (the relations a
    # file declares are dropped after it ran): as a fresh connection would be, without connecting and defining the
    # same macros again for every file run. Stages may run on two threads at once (the timeline's): each thread
    # counts its own depth, and the connections alone serve one file at a time.
    alone_by_includes = {}
    alone_lock, thread = threading.Lock(), threading.local()

    def ready(con, name):
        if "/" in name and not name.startswith("lib/") and not getattr(thread, "depth", 0):
            seen["outside"].append(name)
        return original_ready(con, name)

    def run_stage(con, names, parameters=None, temp_tables=False, bound=()):
        thread.depth = getattr(thread, "depth", 0) + 1
        try:
            made = {}
            for name in catalog.stage_order(names, bound):
                query = catalog.load_query(name)
                includes = frozenset(catalog.include_order(query.includes))
                with alone_lock:
                    if includes not in alone_by_includes:
                        alone_by_includes[includes] = connection.connect(threads=1)
                    alone = alone_by_includes[includes]
                    try:
                        for relation in query.input_names:
                            alone.register(relation, con.sql(f"from {relation}").to_arrow_table())
                        result = alone.sql(ready(alone, name), params=(parameters or {}).get(name)).to_arrow_table()
                    finally:
                        for relation in query.input_names:
                            alone.unregister(relation)
                if query.columns and list(query.columns) != result.column_names:  # the header's, in order
                    seen["columns"].append(f"{name}: header {list(query.columns)}, result {result.column_names}")
                made |= original_run(con, [name], parameters, temp_tables, set(bound) | made.keys())
                seen["ran"].append(name)
            return made
        finally:
            thread.depth -= 1

    monkeypatch.setattr(catalog, "ready", ready)
    for module in list(sys.modules.values()):  # modules that imported the names themselves
        if getattr(module, "__name__", "").startswith("tracekit.") and module is not catalog:
            for attribute, replacement in (("run_stage", run_stage), ("ready", ready)):
                if getattr(module, attribute, None) in (original_run, original_ready):
                    monkeypatch.setattr(module, attribute, replacement)
    monkeypatch.setattr(catalog, "run_stage", run_stage)
    yield seen
    # a module first imported during the test took the replacements from catalog: monkeypatch does not know them,
    # and later tests in this process would run stages on the closed connections below
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("tracekit."):
            for attribute, replacement, original in (("run_stage", run_stage, original_run),
                                                     ("ready", ready, original_ready)):
                if getattr(module, attribute, None) is replacement:
                    setattr(module, attribute, original)
    for alone in alone_by_includes.values():
        alone.close()


def test_every_stage_file_runs_with_only_its_declared_inputs(tmp_path, stages_run_alone):
    """Every command that runs stage SQL, on a synthetic job (steps, GPU work, collectives) and an Execution Trace
    pair: each file of every stage folder binds with only what it declares, and no stage SQL runs outside
    catalog.run_stage."""
    from tracekit import diff, replay, synth
    from tracekit.output import chakra, graph, timeline
    from tracekit.query import step_scope

    et_pair = tracekit.load(shared_trace("et_pairs/a100_simple_add"))  # linked by name order: every ET pass
    assert et_pair.et_nodes.num_rows > 0
    gpu_data = REPO / "tests" / "data" / "gpu"  # a graph replay with its capture: every graph-capture pass
    replayed = tracekit.load(gpu_data / "graph_fork_replay.json.gz",
                             graph_captures=gpu_data / "graph_fork_capture.json.gz")
    assert replayed.graph_kernels.num_rows > 0
    synth.generate(tmp_path / "job", ranks=2, steps=3, seed=1)
    tables = tracekit.load(tmp_path / "job")
    link_edges.inferred_edges(tables, recorded_first=False)
    graph.write_graph(tables, tmp_path / "step.dot", step=1)
    first = pl.from_arrow(tables.events)["ts"].min()
    graph.write_graph(tables, tmp_path / "range.dot", start_ns=first, end_ns=first + 10**6)
    timeline.write_timeline(tables, tmp_path / "timeline.json", step=1)
    chakra.write_chakra(tables, tmp_path / "chakra")
    replay.replay(tables, scale={"kernel:": 2.0}, step=1)
    with pytest.raises(tracekit.InputError, match="matches nothing"):
        replay.replay(tables, scale={"kernel:no such kernel": 2.0})
    with pytest.raises(tracekit.InputError, match="no ProfilerStep#99"):
        step_scope.step_tables(tables, 99)
    diff.compare(tables, tables)
    assert not stages_run_alone["outside"], f"stage SQL run outside catalog.run_stage: {stages_run_alone['outside']}"
    assert not stages_run_alone["columns"], "\n".join(stages_run_alone["columns"])
    missing = sorted(set(STAGE_FILES) - set(stages_run_alone["ran"]))
    assert not missing, f"stage files no command ran here: {missing}"
