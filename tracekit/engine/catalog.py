"""The SQL catalog: the files of `queries/`, their headers, and DuckDB connections with what a query needs defined.

    queries/NAME.sql         an analysis, under its public name (`tracekit run NAME`, `tracekit queries`)
    queries/lib/NAME.sql     macros shared by analyses and ad-hoc SQL (`.macros` at the prompt)
    queries/link/NAME.sql    the passes of the link stage (edges, Execution Trace links), run by tracekit/link/
    queries/scope/NAME.sql   a step's rows of each table (tracekit/query/step_scope.py)
    queries/output/NAME.sql  queries of the writers (the graph of a window)
    queries/export/NAME.sql  the timeline and Chakra ET exports
    queries/replay/NAME.sql  the replay's graph
    queries/diff/NAME.sql    the two-run queries of `tracekit diff`

Each file starts with a header of `-- key: value` comment lines:

    -- question: Where does GPU time go, per rank?      (lib files: `about:`, what the file holds)
    -- inputs: events, edges                           tables (and analyses) it reads, through its includes too
    -- outputs: step_scopes                            a stage file's result name (default: the file's name)
    -- includes: lib/launches, lib/categories          files whose macros it calls
    -- columns:                                        an analysis's result columns, in order
    --   rank: rank
    --   busy_ms: ms, time at least one GPU op runs
    --     (a deeper-indented line continues the entry)
    -- macros:                                         the macros a lib file defines, each documented
    --   gpu_ops(): every kernel, memcpy and memset with its launch call
    -- notes: free text (definitions, deliberate differences from other tools)

Before a file runs, the macros it calls from the files it includes are defined, with the macros they call, each
after those it calls and each once per connection (`define_macros`): DuckDB
binds a macro when it is created, so a macro whose callees are not defined fails to define.
A macro whose name starts with `_` is a private helper of its file; the others are public (listed by `.macros`).

An input may be another analysis (e.g. `-- inputs: op_summary, ranks` in the cross-rank queries): it is run first
and its result bound under its name, so a query reads it like a table. `analysis_order` is the one resolver of
those dependencies; how each result is bound is the caller's: `prepare` defines views (ad-hoc SQL, TraceDatabase),
tracekit/query/analyses.py materialises results (runs of several analyses that share them).

Stage files are ordered the same way: `stage_order` runs each after the files of its folder whose outputs its
inputs name, and `run_stage`, which runs every stage file, binds each result under its output name for the ones
after it.

Python only orchestrates: it loads the text, registers the tables and returns the result.
"""

from __future__ import annotations

import re
import threading
import weakref
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from tracekit.engine import call_trees, connection
from tracekit.engine.tables import TraceTables

if TYPE_CHECKING:
    import polars as pl  # only `sql` returns a polars frame (DuckDB makes it): the link stage needs no polars

PACKAGE_DIR = Path(__file__).resolve().parent.parent


def data_dir(name: str) -> Path:
    """Top-level folder NAME (queries, reports) beside the package in a checkout, or the `_NAME` copy inside an
    installed wheel (pyproject's force-include)."""
    for candidate in (PACKAGE_DIR.parent / name, PACKAGE_DIR / f"_{name}"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"{name}/ not found next to the tracekit package")


def queries_dir() -> Path:
    return data_dir("queries")


@dataclass(frozen=True)
class Query:
    name: str  # path under queries/ without .sql: kernel_summary, lib/launches, link/launch_edges
    sql: str
    question: str
    inputs: tuple[str, ...]
    columns: dict[str, str]  # column → "unit, meaning"
    notes: str
    includes: tuple[str, ...] = ()
    # "across ranks": each row may combine ranks, so the query runs where every rank's results meet (its inputs are
    # then per-rank analyses and `ranks`); otherwise its rows for a rank depend on that rank's rows only
    scope: str = "per rank"
    macros: dict[str, str] = field(default_factory=dict)  # macro → "(parameters): doc", as its header documents it
    # a stage file's result is bound under this name for the files that read it (header `outputs:`; default: the
    # file's own name, link/launch_edges → launch_edges)
    output: str = ""
    # the relations the file reads, without their glosses: `-- inputs: events (through ...), $step` → events
    # ($parameters left out)
    input_names: tuple[str, ...] = ()

    @property
    def statement(self) -> str:
        """The text DuckDB runs: the file with its whole-line comments emptied (the header, mostly). Line numbers
        stay those of the file, for DuckDB's errors; and the text is ASCII, which DuckDB's Python layer tokenizes
        several times faster (~60 ms of a small report's CPU, bench/RESULTS.md)."""
        return statement_text(self.sql)


COMMENT_LINE = re.compile(r"^[ \t]*--.*$", re.MULTILINE)


@cache
def statement_text(sql: str) -> str:
    return COMMENT_LINE.sub("", sql)


HEADER_LINE = re.compile(r"^--\s?(.*)$")
LISTS = ("columns", "macros")
SCOPES = ("per rank", "across ranks")  # header keys whose value is a list of `  entry: description` lines


def parse_fields(text: str) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    fields: dict[str, str] = {}
    lists: dict[str, dict[str, str]] = {key: {} for key in LISTS}
    current = None
    for line in text.splitlines():
        match = HEADER_LINE.match(line)
        if not match:
            break
        body = match.group(1)
        entries = lists.get(current)
        if entries is not None and body.startswith("    ") and entries:  # an entry's description, continued
            last = next(reversed(entries))
            entries[last] = f"{entries[last]} {body.strip()}"
            continue
        if entries is not None and body.startswith("  "):
            entry, _, desc = body.strip().partition(":")
            entries[entry.strip()] = desc.strip()
            continue
        key, sep, value = body.partition(":")
        if sep and re.fullmatch(r"[a-z_]+", key.strip()):
            current = key.strip()
            fields[current] = value.strip()
        elif current:
            fields[current] = (fields[current] + " " + body.strip()).strip()
    return fields, lists


def parse_header(name: str, text: str) -> Query:
    fields, lists = parse_fields(text)
    required = {"about"} if name.startswith("lib/") else {"question", "inputs"}
    if "/" not in name:
        required |= {"columns"}
    if fields.get("scope", "per rank") not in SCOPES:
        raise ValueError(f"queries/{name}.sql: scope {fields['scope']!r} is not one of {SCOPES}")
    missing = required - fields.keys()
    if missing:
        raise ValueError(f"queries/{name}.sql: header lacks {sorted(missing)}")
    return Query(name, text, fields.get("question", fields.get("about", "")), split_list(fields.get("inputs", "")),
                 lists["columns"], fields.get("notes", ""), split_list(fields.get("includes", "")),
                 fields.get("scope", "per rank"),
                 {re.sub(r"\(.*", "", entry): entry[len(re.sub(r"\(.*", "", entry)):] + ": " + doc
                  for entry, doc in lists["macros"].items()},
                 (relation_names(fields["outputs"]) or ("",))[0] if "outputs" in fields else name.rpartition("/")[2],
                 relation_names(fields.get("inputs", "")))


def relation_names(value: str) -> tuple[str, ...]:
    """The relations a header list names, without their glosses: `events (through ...), $step` → (events,)
    ($parameters left out)."""
    return tuple(m.group(0) for entry in split_outside_parentheses(value)
                 if (m := re.match(r"[a-z_][a-z_0-9]*", entry)))


def split_list(value: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in value.split(",") if t.strip())


def split_outside_parentheses(value: str) -> list[str]:
    """VALUE split at the commas outside parentheses: `a (x, y), b` → [`a (x, y)`, `b`]."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(value):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(value[start:i].strip())
            start = i + 1
    return [p for p in parts + [value[start:].strip()] if p]


@cache
def load_query(name: str) -> Query:
    path = queries_dir() / f"{name}.sql"
    return parse_header(name, path.read_text())


def available() -> list[str]:
    """The analyses: the files at the top of queries/."""
    return sorted(p.stem for p in queries_dir().glob("*.sql"))


def library() -> list[str]:
    """The macro files, lib/NAME."""
    return sorted(f"lib/{p.stem}" for p in (queries_dir() / "lib").glob("*.sql"))


MACRO_DEFINITION = re.compile(r"create\s+or\s+replace\s+macro\s+([a-z_][a-z_0-9]*)", re.IGNORECASE)


def defined_macros(text: str) -> list[str]:
    return MACRO_DEFINITION.findall(text)


@cache
def macro_files() -> dict[str, str]:
    """Every macro of queries/lib → the file that defines it."""
    return {macro: name for name in library() for macro in defined_macros(load_query(name).sql)}


def macro_returns(macro: str) -> str:
    """"table" for a table macro, else "scalar"."""
    text = load_query(macro_files()[macro]).sql
    return "table" if re.search(rf"macro\s+{macro}\s*\([^)]*\)\s+as\s+table", text, re.IGNORECASE) else "scalar"


def public_macros() -> dict[str, str]:
    """Public macro → "(parameters): doc" from its file's header (private ones, `_name`, left out)."""
    return {macro: load_query(name).macros.get(macro, "") for macro, name in sorted(macro_files().items())
            if not macro.startswith("_")}


def include_order(names) -> list[str]:
    """NAMES and the files they include, transitively, each after its includes (each once)."""
    return dependency_order(names, lambda name: load_query(name).includes, "includes", "includes", "does not exist")


def dependency_order(names, needs, relation: str, verb: str, missing: str) -> list[str]:
    """NAMES and the query files they need (`needs(name)`: their includes, or the analyses they read), transitively,
    each after what it needs, each once. FileNotFoundError naming the file that needs a missing one ("queries/A.sql
    VERB B, which MISSING"), ValueError for a cycle ("circular RELATION A → B → A")."""
    order: list[str] = []

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if name in order:
            return
        if name in chain:
            raise ValueError(f"queries/{chain[0]}.sql: circular {relation} {' → '.join(chain + (name,))}")
        if not (queries_dir() / f"{name}.sql").is_file():
            raise FileNotFoundError(f"queries/{chain[-1]}.sql {verb} {name}, which {missing}" if chain
                                    else f"queries/{name}.sql does not exist")
        for needed in needs(name):
            visit(needed, chain + (name,))
        order.append(name)

    for name in names:
        visit(name, ())
    return order


def stage_order(names, bound=()) -> list[str]:
    """Stage files NAMES (link/flow_edges, scope/members, ...) and the files of their folders whose results they
    read, transitively, each after those: the one order of a stage's passes, from what each file declares.

    A file reads another of its folder when its `inputs:` names that file's output (`outputs:`, by default its
    name); its other inputs are trace tables, parameters or relations its caller binds. A file whose output is in
    `bound` (made by an earlier run_stage on the connection) is neither run again nor followed."""
    bound = set(bound)

    def reads(name: str) -> list[str]:
        folder = name.rpartition("/")[0]
        made = {load_query(f"{folder}/{p.stem}").output: f"{folder}/{p.stem}"
                for p in sorted((queries_dir() / folder).glob("*.sql"))}
        return [made[i] for i in load_query(name).input_names if i in made and made[i] != name and i not in bound]

    return dependency_order(names, reads, "inputs", "reads", "does not exist")


def run_stage(con: duckdb.DuckDBPyConnection, names, parameters: dict[str, dict] | None = None,
              temp_tables: bool = False, bound=()) -> dict:
    """Run stage files NAMES and what they read, in stage_order, each result bound on `con` under its output name
    for the files after it to read: registered as an Arrow table, or with `temp_tables` kept as a DuckDB temp table.
    `parameters`: file → its named parameters. `bound`: outputs an earlier run_stage on `con` made (a stage with a
    Python pass between its files runs in two calls: the second is given the first's results). Returns output
    name → Arrow table (None for a temp table).

    Every stage file runs here (tests/query/test_stage_order.py runs each on a connection holding only what it
    declares)."""
    results = {}
    for name in stage_order(names, bound):
        output, params = load_query(name).output, (parameters or {}).get(name)
        if temp_tables:
            con.execute(f"create or replace temp table {output} as {ready(con, name)}", params)
            results[output] = None
        else:
            results[output] = con.sql(ready(con, name), params=params).to_arrow_table()
            con.register(output, results[output])
    return results


MACRO_CALL = re.compile(r"\b([a-z_][a-z_0-9]*)\s*\(", re.IGNORECASE)


@cache
def macro_definitions() -> dict[str, str]:
    """Every macro of queries/lib → its `create or replace macro ...` statement, in the order the files define them
    (each after the macros it calls: DuckDB binds a macro when it is created)."""
    definitions = {}
    for name in include_order(library()):
        text = load_query(name).statement
        found = list(MACRO_DEFINITION.finditer(text))
        for here, after in zip(found, found[1:] + [None]):
            definitions[here.group(1)] = text[here.start():after.start() if after else len(text)]
    return definitions


@cache
def macro_calls(text: str) -> frozenset[str]:
    """The macros of queries/lib that TEXT calls (a definition's own name left out)."""
    own = MACRO_DEFINITION.match(text.lstrip())
    return frozenset(MACRO_CALL.findall(text[own.end():] if own else text)) & macro_files().keys()


# What each live connection has defined (macros) and bound (analyses as views), and which table macros it computes
# once into tables (`connect(materialize=True)`). A cursor made by `cursor` shares its connection's entry, as it
# shares its database's catalog; `lock` serialises definitions made from several threads. Weak keys: forgotten
# with the connection, so this holds no state of its own beyond the connections' lifetimes.
@dataclass(frozen=True)
class Catalogued:
    done: set[str] = field(default_factory=set)  # analyses bound as views
    macros: set[str] = field(default_factory=set)  # macros defined
    materialize: tuple[str, ...] = ()  # table macros computed into tables as they are defined
    lock: threading.RLock = field(default_factory=threading.RLock)


_CATALOGUED: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, Catalogued] = weakref.WeakKeyDictionary()


def catalogued(con: duckdb.DuckDBPyConnection) -> Catalogued:
    return _CATALOGUED.setdefault(con, Catalogued())


def cursor(con: duckdb.DuckDBPyConnection, tables: TraceTables, bound: dict | None = None
           ) -> duckdb.DuckDBPyConnection:
    """A second connection to CON's database, for a query on another thread: TABLES and the Arrow tables BOUND (name
    → table) registered on it, and CON's macros, shared tables and results (all in the database's catalog) read
    through it as through CON."""
    cur = tables.connect(con.cursor())
    for name, table in (bound or {}).items():
        cur.register(name, table)
    _CATALOGUED[cur] = catalogued(con)
    return cur


def loaded(con: duckdb.DuckDBPyConnection) -> set[str]:
    return catalogued(con).done


def called_macros(macros, made=frozenset()) -> set[str]:
    """MACROS and the macros they call, transitively; not through a macro in MADE (a materialized macro whose table
    exists reads that table alone)."""
    needed = set(macros)
    for macro in reversed(macro_definitions()):  # each after every macro that calls it
        if macro in needed and macro not in made:
            needed |= macro_calls(macro_definitions()[macro])
    return needed


def define_macros(con: duckdb.DuckDBPyConnection, macros) -> None:
    """Define on `con` the macros MACROS and the macros they call, transitively, each after those it calls and each
    once per connection; each table macro the connection materializes (`connect(materialize=True)`) is computed
    into a table instead and defined to read it (`materialize_macro`).

    DuckDB binds a macro when it is created, expanding every macro it calls (lib/steps took ~0.18 s to define
    whole): a connection defines only what its queries call, and the macros defined after a materialized one bind
    its table, not its body (bench/RESULTS.md)."""
    state = catalogued(con)
    needed = called_macros(macros, state.macros & set(state.materialize)) - state.macros
    for macro, definition in macro_definitions().items():
        if macro not in needed:
            continue
        if macro in state.materialize or macro in FINISHED_IN_NUMPY:
            materialize_macro(con, macro)
            continue
        with state.lock:
            if macro not in state.macros:
                con.execute(definition)
                state.macros.add(macro)


def materialize_macro(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Compute table macro NAME (`create or replace macro NAME() as table ...`) once into a table, and define the
    macro to read it. Its body is bound once, by the table's query: creating the macro first would bind it twice.
    A macro of FINISHED_IN_NUMPY is its body's result, finished by its function.
    The table is computed outside the definitions' lock: other threads' queries run meanwhile (`shared_tables`)."""
    state = catalogued(con)
    if name in state.macros:
        return
    body = table_macro_body(name)
    define_macros(con, macro_calls(macro_definitions()[name]))
    finish = FINISHED_IN_NUMPY.get(name)
    if finish is None:
        con.execute(f"create or replace table {name}_result as {body}")
    else:
        con.register(f"{name}_finished", finish(con.sql(body).to_arrow_table()))
        try:
            con.execute(f"create or replace table {name}_result as from {name}_finished")
        finally:
            con.unregister(f"{name}_finished")
    with state.lock:
        con.execute(f"create or replace macro {name}() as table from {name}_result")
        state.macros.add(name)


def table_macro_body(name: str) -> str:
    """The query of table macro NAME without parameters (`create or replace macro NAME() as table QUERY`)."""
    definition = macro_definitions()[name]
    head = re.match(rf"\s*create\s+or\s+replace\s+macro\s+{name}\s*\(\s*\)\s+as\s+table\b", definition,
                    re.IGNORECASE)
    if head is None:
        raise ValueError(f"{name}: only a table macro without parameters can be materialized")
    return definition[head.end():].strip().rstrip(';')


def shared_tables(con: duckdb.DuckDBPyConnection, macros) -> set[str]:
    """The table macros `con` materializes, and has not yet, among MACROS and the macros they call (not through one
    it has: that reads its table alone)."""
    state = catalogued(con)
    materialized = set(state.materialize)
    return called_macros(macros, state.macros & materialized) & materialized - state.macros


def read_shared_tables(con: duckdb.DuckDBPyConnection, macros) -> set[str]:
    """The table macros `con` materializes that MACROS read: those they call, and those called by the macros they
    call that are not materialized themselves (a materialized one read its own inputs once, when computed)."""
    materialized = set(catalogued(con).materialize)
    return called_macros(macros, materialized) & materialized


def drop_shared_table(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Free the table of materialized macro NAME (`materialize_macro`): the next query that calls NAME computes it
    again. The macros defined over its table (those that read it: `read_shared_tables`, unless materialized) are
    defined again then too."""
    state = catalogued(con)
    with state.lock:
        con.execute(f"drop table if exists {name}_result")
        state.macros.difference_update({name} | {
            macro for macro in state.macros if macro not in state.materialize
            and name in read_shared_tables(con, macro_calls(macro_definitions()[macro]))})


def query_macros(name: str) -> frozenset[str]:
    """The macros queries/NAME.sql calls from the files it includes."""
    return macro_calls(load_query(name).statement) & included_macros(name)


def ready(con: duckdb.DuckDBPyConnection, name: str) -> str:
    """The SQL of queries/NAME.sql, with the macros it calls from the files it includes defined on `con`: how every
    stage runs a file."""
    define_macros(con, query_macros(name))
    return load_query(name).statement


@cache
def included_macros(name: str) -> frozenset[str]:
    """The macros of the files queries/NAME.sql includes, transitively."""
    return frozenset(macro for lib in include_order(load_query(name).includes)
                     for macro in defined_macros(load_query(lib).sql))


@cache
def preludes() -> str:
    """The text of every lib file, in dependency order (what every connection once ran; kept for the
    tracekit.analyses shim), but the files of the macros FINISHED_IN_NUMPY and those that include them: SQL alone
    cannot define those (`define_macros` does)."""
    finished = {macro_files()[macro] for macro in FINISHED_IN_NUMPY}
    return "\n".join(load_query(name).sql for name in include_order(library())
                     if not finished & set(include_order([name])))


def analysis_inputs(name: str) -> list[str]:
    """The other analyses NAME reads (its inputs named like a query that are not tables), in header order."""
    tables = set(TraceTables.names()) | set(TraceTables.reference_names())
    return [i for i in load_query(name).inputs if i not in tables and re.fullmatch(r"[a-z_0-9]+", i)]


@cache
def walks_critical_path(name: str) -> bool:
    """Whether queries/NAME.sql, or an analysis it reads, walks the critical path (`_critical_path_walk` of
    queries/lib/critical_path.sql): the costliest analyses of a report, which `tracekit report --no-critical-path`
    leaves out. A missing analysis walks nothing (running it says it is missing)."""
    try:
        order = analysis_order(name)
    except FileNotFoundError:
        return False
    return any("_critical_path_walk" in called_macros(query_macros(step)) for step in order)


def across_ranks(name: str) -> bool:
    """NAME combines ranks in a row (header `scope: across ranks`): it runs where the ranks' results meet."""
    return load_query(name).scope == "across ranks"


def analysis_order(name: str) -> list[str]:
    """NAME and the analyses it reads, transitively, each after the ones it reads: the one dependency resolver.

    FileNotFoundError for a missing analysis (NAME, or one it reads), ValueError for a cycle."""
    return dependency_order([name], analysis_inputs, "inputs", "reads", "is neither a table nor an analysis")


# Table macros that several analyses call. DuckDB inlines macros, so each query would recompute them (and bind
# their bodies again); a connection made for many analyses computes each once into a table, when a query first
# calls it, and points the macro at it. The step macros: 5 of the report's analyses expand step_windows()
# (2026-11-26). The critical path's stages: each its own statement, whose sorts and joins are freed before the next
# one starts (the walk in one statement set the report's peak, bench/RESULTS.md); not its states, which only the
# lanes' sort reads (queries/lib/critical_path.sql). collective_kernels: one analysis of a report reads it, but as a
# macro its body (a dozen category regexes) was bound twice, when defined and when called; as a table, once.
# frames_only_threads: step_or_trace_windows and the critical path's walk each grouped every event by thread for it
# (80M instructions of OWLv2's 783M walk). gpu_op_categories and op_name_categories: the categories of each
# distinct name, so the category macros' regexes are planned once a connection, not in each statement that joins them.
SHARED_TABLE_MACROS = ("gpu_op_categories", "op_name_categories", "gpu_ops", "launch_ancestors",
                       "launch_op_ancestors", "op_calls", "gpu_op_owners", "step_windows", "step_metrics",
                       "steady_steps", "frames_only_threads", "step_or_trace_windows", "rank_devices",
                       "_critical_path_events", "_critical_path_calls", "_critical_path_lanes", "step_critical_paths",
                       "collective_kernels")


# Table macros whose SQL body gives the inputs of a numpy function that computes the table (always materialized,
# on any connection): the critical path's call trees, whose siblings and last descendants took two window sorts and
# a recursive CTE of one iteration per tree level (tracekit/engine/call_trees.py).
FINISHED_IN_NUMPY = {"_critical_path_calls": call_trees.finished_calls}


def connect(tables: TraceTables, materialize: bool = False, threads: int | None = None, *,
            held_to_input: bool = True) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with every table registered; the catalog's macros are defined as queries call them.

    With `materialize` (a connection for running several analyses, or a statement that calls a shared macro many
    times), each shared table macro is computed once, when the first query that calls it is run (`define_macros`),
    and DuckDB's memory is held to the tables' size (`connection.limit_to_input`) unless `held_to_input` is false
    (then the default limit, as without `materialize`).
    `threads` caps DuckDB's threads (default: all cores); the analyses give the same bits with any number.
    """
    con = tables.connect(threads=threads)
    if materialize:
        if held_to_input:
            connection.limit_to_input(con, tables.nbytes)
        _CATALOGUED[con] = Catalogued(materialize=SHARED_TABLE_MACROS)
    return con


IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


def prepare(con: duckdb.DuckDBPyConnection, query: str, problems: dict[str, str] | None = None) -> None:
    """Define on `con` what the ad-hoc QUERY names from the catalog: the macros it calls (with those they call) and
    a view per analysis it reads, after the views of the analyses that one reads.

    A view that cannot be defined is left out, with the reason in `problems`; the query then fails on its own
    terms, naming the missing table."""
    words = set(IDENTIFIER.findall(query))
    define_macros(con, words & macro_files().keys())
    done = loaded(con)
    problems = {} if problems is None else problems
    for named in sorted(words & viewable() - done):
        for name in analysis_order(named):
            if name in done or name in problems:
                continue
            try:
                con.execute(f"create or replace view {name} as {ready(con, name).strip().rstrip(';')}")
                done.add(name)
            except duckdb.Error as exc:
                problems[name] = str(exc).splitlines()[0]


@cache
def viewable() -> frozenset[str]:
    """Analyses that read only tables and other analyses (every analysis at the top of queries/)."""
    known = set(TraceTables.names()) | set(TraceTables.reference_names()) | set(available())
    return frozenset(name for name in available() if set(load_query(name).inputs) <= known)


def sql(tables: TraceTables, query: str) -> pl.DataFrame:
    """Ad-hoc SQL over the tables, with the catalog's macros (op_category, op_calls(), ...) and analyses available:
    the one SQL entry point (`TraceTables.sql`, `tracekit.analyses.sql`; `TraceDatabase.sql` prepares its own
    long-lived connection the same way)."""
    with connect(tables) as con:
        prepare(con, query)
        return con.sql(query).pl()
