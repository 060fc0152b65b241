"""Execution Trace rows linked to Kineto events, and the et_ctrl / et_data edges between them.

Linking to Kineto (`events` of kind cpu_op / user_annotation, same rank) is done with joins:
- `rf_id`: ET `rf_id` = `events.record_function_id`, where the rank's Kineto events carry record function ids;
- `name_order`: otherwise the n-th node named X on an ET thread ↔ the n-th op named X on the matching Kineto thread.

Edges (`et_ctrl` parent → child, `et_data` producer → consumer of a tensor) go to the `edges` table with
`src` / `dst` = `et_nodes.id`.
"""

from __future__ import annotations

import msgspec
import polars as pl
import pyarrow as pa

from tracekit import schema, storage
from tracekit.engine import catalog
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.read.execution_trace import execution_trace_rank, read_execution_trace
from tracekit.read.text import ParsedFile, parse_file
from tracekit.storage import Location

_encode = msgspec.json.encode

# --------------------------------------------------------------------------- the stage


def attach_execution_traces(tables: TraceTables, traces: list[ParsedFile | Location]) -> TraceTables:
    """Tables with the Execution Traces read into et_nodes / et_tensors, linked to events, and et_* edges added."""
    if not traces:
        return tables
    kineto_ranks = tables.rank_list
    pid_ranks = (pl.from_arrow(tables.events.select(["rank", "pid"])).unique().group_by("pid")
                 .agg(pl.col("rank").sort()))
    pid_ranks = dict(zip(pid_ranks["pid"].to_list(), pid_ranks["rank"].to_list()))
    parts, notes, sources = [], [], {}
    for trace in traces:
        parsed = trace if isinstance(trace, ParsedFile) else parse_file(storage.location(trace))
        rank, how = execution_trace_rank(parsed, kineto_ranks, pid_ranks)
        if rank is None:
            notes.append(dict(rank=None, source_file=str(parsed.path), position=None, stage="et",
                              reason="et_rank_unknown", detail=f"Execution Trace not read: {how}", dropped=True,
                              raw=None))
            continue
        if rank in sources:
            raise InputError(f"{parsed.path}: Execution Trace for rank {rank}, which {sources[rank]} is too "
                             f"(name ET files like et_rank3.json)")
        sources[rank] = str(parsed.path)
        parts.append(read_execution_trace(parsed, rank))
        # The file's own header (schema, pid, time, start_ts, finish_ts) is kept here, with where its rank came from.
        header = "{" + ",".join(f"{_encode(k).decode()}:{bytes(v).decode()}" for k, v in parsed.top.items()) + "}"
        notes.append(dict(rank=rank, source_file=str(parsed.path), position=None, stage="et", reason="et_file",
                          detail=f"Execution Trace read as rank {rank} (rank from {how}); header {header}",
                          dropped=False, raw=None))
    notes_table = pa.Table.from_pylist(notes, schema=schema.DIAGNOSTICS.arrow_schema)
    read = tables.with_tables(**{name: pa.concat_tables([getattr(tables, name)] + [p[name] for p in parts])
                                 for name in ("et_nodes", "et_tensors")},
                              diagnostics=pa.concat_tables([tables.diagnostics, notes_table]
                                                           + [p["diagnostics"] for p in parts]))
    return link_events(read, sources)


# --------------------------------------------------------------------------- linking

def link_events(tables: TraceTables, sources: dict[int, str] | None = None) -> TraceTables:
    """TABLES with et_nodes' `event_id` and `link_method` filled, the et_ctrl / et_data edges added, and the stage's
    notes (stage et, naming each rank's file from `sources`) in diagnostics."""
    made = link_stage(tables)
    notes = [pl.concat([pl.from_arrow(made[name]) for name in ("et_thread_notes", "et_link_notes")]),
             pl.from_arrow(made["et_missing_parents"])]
    return tables.with_tables(
        et_nodes=linked_nodes(tables, made).to_arrow(),
        edges=pa.concat_tables([tables.edges] + [schema.conform("edges", made[name])
                                                 for name in ("et_ctrl_edges", "et_data_edges")]),
        diagnostics=pa.concat_tables([tables.diagnostics] + [stage_notes(n, sources or {}) for n in notes]))


# The stage's results (queries/link/et_*.sql), made in two runs of the catalog's order around thread_map, a Python
# pass: the first run makes what thread_map reads, the second what reads it.
BEFORE_THREAD_MAP = ["link/et_thread_agreement"]
LINK_RESULTS = ["link/et_links", "link/et_thread_notes", "link/et_link_notes", "link/et_ctrl_edges",
                "link/et_data_edges", "link/et_missing_parents"]


def link_stage(tables: TraceTables) -> dict[str, pa.Table]:
    """The ET link stage on TABLES: output name → result (et_links: each linked node's event; notes on the thread
    matches, on what was left unlinked and on missing parents; the et_ctrl / et_data edges)."""
    with tables.connect() as con:
        made = catalog.run_stage(con, BEFORE_THREAD_MAP)
        con.register("thread_map", thread_map(pl.from_arrow(made["et_thread_agreement"])))
        return made | catalog.run_stage(con, LINK_RESULTS, bound=made)


def linked_nodes(tables: TraceTables, made: dict[str, pa.Table]) -> pl.DataFrame:
    """et_nodes with event_id and link_method from the stage's et_links, in their order."""
    return pl.from_arrow(tables.et_nodes).drop("event_id", "link_method").join(
        pl.from_arrow(made["et_links"]), on=["rank", "id"], how="left", maintain_order="left")


def stage_notes(notes: pl.DataFrame, sources: dict[int, str]) -> pa.Table:
    """(rank, reason, detail) rows → diagnostics of stage et, naming each rank's ET file."""
    return schema.conform("diagnostics", notes.with_columns(
        rank=pl.col("rank").cast(pl.Int32), stage=pl.lit("et"), dropped=pl.lit(False),
        source_file=pl.col("rank").replace_strict(sources, default=None, return_dtype=pl.String)).to_arrow())


def thread_map(agreement: pl.DataFrame) -> pl.DataFrame:
    """One Kineto thread per ET thread and vice versa, maximising the agreement: greedily, best pair first.

    The frame has one row per (ET thread, Kineto thread) pair that share an op name, a handful per rank, so this
    walks threads, not events.
    """
    chosen, used_et, used_kineto = [], set(), set()
    for row in agreement.sort(["agree", "rank", "et_tid", "pid", "tid"], descending=[True, False, False, False, False],
                              nulls_last=True).iter_rows(named=True):
        et_key, kineto_key = (row["rank"], row["et_tid"]), (row["rank"], row["pid"], row["tid"])
        if et_key in used_et or kineto_key in used_kineto:
            continue
        used_et.add(et_key)
        used_kineto.add(kineto_key)
        chosen.append(row)
    return pl.DataFrame(chosen, schema=agreement.schema)
