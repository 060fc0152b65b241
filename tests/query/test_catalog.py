"""The SQL catalog tells the truth: what each file of queries/ calls is included, includes exist and form no cycle,
public macros and analyses are documented, and the tables a file reads are its declared inputs.

(That each analysis header's columns match its result is test_headers_document_every_column_and_keep_the_contract
in test_analyses.py.)
"""

from __future__ import annotations

import re

import duckdb
import pytest

from tracekit.engine import catalog
from tracekit.engine.tables import TraceTables


def every_file() -> list[str]:
    root = catalog.queries_dir()
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.sql"))


def code_of(text: str) -> str:
    """TEXT without comments and string literals: what is left is what DuckDB runs, as names and punctuation."""
    # one pass, left to right: a quote inside a comment starts no string, and `--` inside a string no comment
    return re.sub(r"'(?:[^']|'')*'|--[^\n]*", lambda m: "''" if m.group().startswith("'") else "", text)


def called(text: str) -> set[str]:
    """The catalog macros TEXT calls: `name(` where NAME is a macro some queries/lib file defines (DuckDB's own
    functions, and CTE or column names followed by a parenthesis, are not catalog macros and are not counted)."""
    return {name for name in re.findall(r"\b([a-z_][a-z_0-9]*)\s*\(", code_of(text), re.IGNORECASE)
            if name in catalog.macro_files()}


def undeclared_macros(text: str, includes: tuple[str, ...]) -> set[str]:
    """The macros TEXT calls that neither it nor the files it includes (transitively) define."""
    reachable = set(catalog.defined_macros(text))
    for name in catalog.include_order(includes):
        reachable |= set(catalog.defined_macros(catalog.load_query(name).sql))
    return called(text) - reachable


@pytest.mark.parametrize("name", every_file())
def test_every_macro_a_file_calls_is_in_its_includes(name):
    query = catalog.load_query(name)
    assert not undeclared_macros(query.sql, query.includes), f"queries/{name}.sql calls macros it does not include"


def test_the_check_catches_a_file_that_does_not_include_what_it_calls():
    """The test above can fail: a query calling gpu_ops() and op_category() with no includes is caught, and DuckDB
    itself refuses it on a connection with only its (empty) includes loaded."""
    text = ("-- question: q\n-- inputs: events\n-- columns:\n--   n: count\n"
            "select count(*) as n from gpu_ops() where op_category(name) = 'GEMM' -- not_a_call(x)\n")
    query = catalog.parse_header("probe", text)
    assert undeclared_macros(query.sql, query.includes) == {"gpu_ops", "op_category"}
    assert undeclared_macros(query.sql, ("lib/launches",)) == set()  # lib/launches includes lib/categories
    with TraceTables().connect() as con, pytest.raises(duckdb.CatalogException):
        catalog.define_macros(con, [])  # its includes: none
        con.sql(query.sql)


def test_includes_exist_and_form_no_cycle():
    order = catalog.include_order(every_file())  # raises on a missing include or a cycle
    assert set(order) == set(every_file())
    for name in order:  # each after what it includes
        assert all(order.index(i) < order.index(name) for i in catalog.load_query(name).includes), name


def test_a_missing_include_and_a_cycle_are_refused(tmp_path, monkeypatch):
    """The check above can fail: on a catalog of three probe files, a missing include and a cycle raise."""
    (tmp_path / "lib").mkdir()
    for name, includes in (("lib/probe_a", "lib/probe_b"), ("lib/probe_b", "lib/probe_a"), ("lib/probe_c", "lib/gone")):
        (tmp_path / f"{name}.sql").write_text(f"-- about: a probe\n-- includes: {includes}\n")
    monkeypatch.setattr(catalog, "queries_dir", lambda: tmp_path)
    catalog.load_query.cache_clear()
    try:
        with pytest.raises(ValueError, match="circular includes lib/probe_a → lib/probe_b → lib/probe_a"):
            catalog.include_order(["lib/probe_a"])
        with pytest.raises(FileNotFoundError, match="probe_c.sql includes lib/gone, which does not exist"):
            catalog.include_order(["lib/probe_c"])
    finally:
        catalog.load_query.cache_clear()


@pytest.mark.parametrize("name", every_file())
def test_each_file_loads_with_only_its_includes(name):
    """DuckDB binds a macro or view when it is created: a file loads on a fresh connection with only its declared
    includes (the analyses it reads bound as views first), or it calls something it does not include."""
    with TraceTables().connect() as con:
        if name.startswith("lib/"):
            catalog.define_macros(con, catalog.included_macros(name))
            for macro in catalog.defined_macros(catalog.load_query(name).sql):  # the file's macros in order, binding
                if macro in catalog.FINISHED_IN_NUMPY:  # only what it includes (a finished one: its table)
                    catalog.materialize_macro(con, macro)
                else:
                    con.execute(catalog.macro_definitions()[macro])
            return
        if "/" in name:  # link/, output/ and diff/ passes read results of earlier passes: only their includes load
            catalog.define_macros(con, catalog.included_macros(name))
            return
        for step in catalog.analysis_order(name):
            con.execute(f"create view {step} as {catalog.ready(con, step).strip().rstrip(';')}")


def test_public_macros_and_analyses_are_documented():
    documented = {}
    for name in catalog.library():
        query = catalog.load_query(name)
        defined = set(catalog.defined_macros(query.sql))
        assert query.question, f"queries/{name}.sql: no about: line"
        assert set(query.macros) <= defined, f"queries/{name}.sql documents macros it does not define"
        documented.update(query.macros)
    public = {m for m in catalog.macro_files() if not m.startswith("_")}
    undocumented = sorted(m for m in public if len(documented.get(m, "").partition(": ")[2]) < 10)
    assert not undocumented, f"public macros without a doc in their file's macros: header: {undocumented}"
    assert set(catalog.public_macros()) == public
    for name in catalog.available():
        query = catalog.load_query(name)
        assert query.question and query.inputs and query.columns, name
    for name in every_file():
        if "/" in name and not name.startswith("lib/"):
            assert catalog.load_query(name).question, name


@pytest.mark.parametrize("name", catalog.available())
def test_inputs_name_the_tables_an_analysis_reads(name):
    """The tables an analysis reads, in its own text or through its includes, are among its declared inputs (the
    header of op_summary, one call to op_rollup, says events and edges because lib/launches reads them)."""
    query = catalog.load_query(name)
    texts = [query.sql] + [catalog.load_query(i).sql for i in catalog.include_order(query.includes)]
    read = {t for text in map(code_of, texts) for t in TraceTables.names()
            if re.search(rf"\b(from|join)\s+{t}\b", text, re.IGNORECASE)
            and not re.search(rf"\b{t}\s+as\s+(materialized\s+)?\(", text, re.IGNORECASE)}  # a CTE of that name
    assert read <= set(query.inputs), f"queries/{name}.sql reads {sorted(read - set(query.inputs))}"
