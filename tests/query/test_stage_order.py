"""Stage SQL (queries/link, scope, output, export, replay, diff) declares what it reads, and the catalog orders the
passes from those declarations: a file that reads a relation its `inputs:` header leaves out fails here, as does
a pass that would run before a pass it reads, and a file whose result another file reads documents its columns."""

from __future__ import annotations

import re

import pytest

import tracekit
from tests.conftest import shared_trace
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
    """An independent check of stage_order: each pass comes after every pass of its folder whose output its
    inputs name, the link stage holds every pass build_edges keeps, and each runs once."""
    for roots in ([f"link/{name}" for name in link_edges.LINK_RESULTS], ["scope/members"],
                  ["export/chakra_nodes", "export/chakra_deps"]):
        order = catalog.stage_order(roots)
        assert len(order) == len(set(order)) and set(roots) <= set(order)
        made = {catalog.load_query(name).output: i for i, name in enumerate(order)}
        for i, name in enumerate(order):
            for needed in catalog.load_query(name).input_names:
                assert made.get(needed, -1) < i, f"{name} runs before {needed}, which it reads"
    assert catalog.stage_order(["scope/members"]) == ["scope/members_by_step", "scope/windows", "scope/members"]
    assert catalog.stage_order(["export/chakra_deps"]) == [
        "export/chakra_owners", "export/chakra_compute", "export/chakra_nodes", "export/chakra_deps"]


def test_each_link_pass_runs_with_only_its_declared_inputs():
    """Run every link pass of build_edges, in the catalog's order, on a connection holding only the relations its
    header declares (the trace tables and earlier passes' results it names): an undeclared read fails to bind."""
    tables = tracekit.load(shared_trace("nvidia/h100_bert-small.json.gz"))
    results = dict(tables.items())
    for name in catalog.stage_order([f"link/{name}" for name in link_edges.LINK_RESULTS]):
        query = catalog.load_query(name)
        with connection.connect(threads=1) as con:
            for relation in query.input_names:
                con.register(relation, results[relation])
            results[query.output] = con.sql(catalog.ready(con, name)).to_arrow_table()
        if query.columns:  # the header's columns are the result's, in order
            assert list(query.columns) == results[query.output].column_names, name
    assert results["launch_edges"].num_rows > 0
