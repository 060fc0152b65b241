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
    linked = link_events(read, sources)
    edges, edge_notes = et_edges(linked)
    return linked.with_tables(edges=pa.concat_tables([linked.edges, edges]),
                              diagnostics=pa.concat_tables([linked.diagnostics, stage_notes(edge_notes, sources)]))


# --------------------------------------------------------------------------- linking

def link_events(tables: TraceTables, sources: dict[int, str] | None = None) -> TraceTables:
    """et_nodes with `event_id` and `link_method` filled; link notes (stage et) in diagnostics."""
    sources = sources or {}
    with tables.connect() as con:
        keep(con, "link_method", "link/et_link_method")
        links = [con.sql(catalog.ready(con, "link/et_rf_id_links")).pl()]
        notes = []
        if con.sql("select count(*) from link_method where method = 'name_order'").fetchall()[0][0]:
            keep(con, "et_seq", "link/et_sequences")
            keep(con, "k_seq", "link/kineto_sequences")
            mapping = thread_map(con.sql(catalog.ready(con, "link/et_thread_agreement")).pl())
            con.register("thread_map", mapping)
            offsets = con.sql(catalog.ready(con, "link/et_offsets")).pl()
            con.register("offsets", offsets)
            links.append(con.sql(catalog.ready(con, "link/et_name_order_links")).pl())
            notes.append(mapping.join(offsets, on=["rank", "et_tid"], how="left").select(
                "rank", reason=pl.lit("et_thread_map"),
                detail=pl.format("ET tid {} ↔ Kineto pid {} tid {} ({} name occurrences agree); Kineto position = "
                                 "ET position + {} ({} sequence-number anchors)",
                                 "et_tid", "pid", "tid", "agree", pl.col("delta").fill_null(0),
                                 pl.col("anchors").fill_null(0))))
        link_frame = pl.concat(links)
        nodes = pl.from_arrow(tables.et_nodes).drop("event_id", "link_method").join(
            link_frame, on=["rank", "id"], how="left", maintain_order="left")
        con.register("et_nodes", nodes.to_arrow())
        notes.append(con.sql(catalog.ready(con, "link/et_link_notes")).pl())
    return tables.with_tables(
        et_nodes=nodes.to_arrow(),
        diagnostics=pa.concat_tables([tables.diagnostics, stage_notes(pl.concat(notes), sources)]))


def keep(con, table: str, name: str) -> None:
    """The result of queries/NAME.sql as the temp table TABLE, which later passes read."""
    con.execute(f"create temp table {table} as {catalog.ready(con, name)}")


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


# --------------------------------------------------------------------------- edges

def et_edges(tables: TraceTables) -> tuple[pa.Table, pl.DataFrame]:
    """et_ctrl and et_data edges (src / dst are et_nodes ids), and notes (rank, reason, detail) on missing parents."""
    with tables.connect() as con:
        ctrl = con.sql(catalog.ready(con, "link/et_ctrl_edges")).to_arrow_table()
        keep(con, "subtree", "link/et_subtree_ends")
        data = con.sql(catalog.ready(con, "link/et_data_edges")).to_arrow_table()
        notes = con.sql(catalog.ready(con, "link/et_missing_parents")).pl()
    return pa.concat_tables([schema.conform("edges", ctrl), schema.conform("edges", data)]), notes
