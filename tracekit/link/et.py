"""Execution Trace rows linked to Kineto events, and the et_ctrl / et_data edges between them.

Linking to Kineto (`events` of kind cpu_op / user_annotation, same rank) is done with joins:
- `rf_id`: ET `rf_id` = `events.record_function_id`, where the rank's Kineto events carry record function ids;
- `name_order`: otherwise the n-th node named X on an ET thread ↔ the n-th op named X on the matching Kineto thread.

Edges (`et_ctrl` parent → child, `et_data` producer → consumer of a tensor) go to the `edges` table with
`src` / `dst` = `et_nodes.id`.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import polars as pl
import pyarrow as pa

from tracekit import schema
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.read.execution_trace import execution_trace_rank, read_execution_trace
from tracekit.read.text import ParsedFile, parse_file

LINKABLE_KINDS = ("cpu_op", "user_annotation")
_encode = msgspec.json.encode

# --------------------------------------------------------------------------- the stage


def attach_execution_traces(tables: TraceTables, traces: list[ParsedFile | Path]) -> TraceTables:
    """Tables with the Execution Traces read into et_nodes / et_tensors, linked to events, and et_* edges added."""
    if not traces:
        return tables
    kineto_ranks = tables.rank_list
    pid_ranks = (pl.from_arrow(tables.events.select(["rank", "pid"])).unique().group_by("pid")
                 .agg(pl.col("rank").sort()))
    pid_ranks = dict(zip(pid_ranks["pid"].to_list(), pid_ranks["rank"].to_list()))
    parts, notes, sources = [], [], {}
    for trace in traces:
        parsed = trace if isinstance(trace, ParsedFile) else parse_file(Path(trace))
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

# Per rank, which way to link: rf_id where the rank's Kineto ops carry record function ids (PyTorch ≥ 2.1 writes
# both sides); name_order where they do not (older traces, schema 1.0.1, whose `rf_id` Kineto never recorded).
LINK_METHOD_SQL = f"""
select n.rank,
       case when k.ops is null then null
            when k.with_rf > 0 and n.with_rf > 0 then 'rf_id'
            else 'name_order' end as method
from (select rank, count(rf_id) as with_rf from et_nodes group by rank) n
left join (select rank, count(*) as ops, count(record_function_id) as with_rf
           from events where kind in {LINKABLE_KINDS} group by rank) k using (rank)
"""

# rf_id is unique per record function on both sides; ids that repeat (the ET's root nodes all carry 0) link nothing.
RF_ID_LINKS_SQL = f"""
with nodes as (
    select rank, id, rf_id from et_nodes
    where rf_id is not null and rank in (select rank from link_method where method = 'rf_id')
    qualify count(*) over (partition by rank, rf_id) = 1
),
ops as (
    select rank, id, record_function_id from events
    where kind in {LINKABLE_KINDS} and record_function_id is not null
    qualify count(*) over (partition by rank, record_function_id) = 1
)
select n.rank, n.id, o.id as event_id, 'rf_id' as link_method
from nodes n join ops o on o.rank = n.rank and o.record_function_id = n.rf_id
"""

# Each ET thread's nodes in id order (ids are handed out as ops start) and each Kineto thread's ops in start order.
# The observer's own process / thread root nodes have no Kineto counterpart: left out, so positions line up.
SEQUENCES_SQL = f"""
create temp table et_seq as
select rank, tid as et_tid, id, name, seq_id, row_number() over (partition by rank, tid order by id) as pos
from et_nodes
where rank in (select rank from link_method where method = 'name_order')
  and name not like '[pytorch|profiler|execution_%';
create temp table k_seq as
select rank, pid, tid, id, name, sequence_number, row_number() over (partition by rank, pid, tid order by ts, id) as pos
from events
where kind in {LINKABLE_KINDS} and ts is not null
  and rank in (select rank from link_method where method = 'name_order');
"""

# How many (name, n-th occurrence) pairs an ET thread and a Kineto thread share: the links the ordered match would
# make between them. ET `tid` is a small index the observer hands out, Kineto `tid` the OS thread id, so which is
# which is learnt from this agreement (see `thread_map`).
THREAD_AGREEMENT_SQL = """
select e.rank, e.et_tid, k.pid, k.tid, sum(least(e.n, k.n)) as agree
from (select rank, et_tid, name, count(*) as n from et_seq group by all) e
join (select rank, pid, tid, name, count(*) as n from k_seq group by all) k using (rank, name)
group by all
"""

# The ET may hold another stretch of the run than Kineto (e.g. one iteration out of forty). Nodes whose autograd
# sequence number and name equal a Kineto op's anchor the two sequences: the most common position difference is
# the offset of the ET window within the Kineto thread. Without anchors (the ET recorded another iteration than
# Kineto, as in the DLRM files) both sequences are taken from their start.
OFFSET_SQL = """
select e.rank, e.et_tid, k.pos - e.pos as delta, count(*) as anchors
from et_seq e
join thread_map m using (rank, et_tid)
join k_seq k on k.rank = e.rank and k.pid = m.pid and k.tid = m.tid and k.name = e.name
            and k.sequence_number = e.seq_id
where e.seq_id >= 0
group by e.rank, e.et_tid, k.pos - e.pos
qualify row_number() over (partition by e.rank, e.et_tid order by count(*) desc, abs(k.pos - e.pos)) = 1
"""

# Within the overlap of the two windows, the n-th ET node named X ↔ the n-th Kineto op named X.
NAME_ORDER_LINKS_SQL = """
with window_nodes as (
    select e.rank, e.et_tid, e.id, e.name,
           row_number() over (partition by e.rank, e.et_tid, e.name order by e.pos) as occurrence
    from et_seq e join thread_map m using (rank, et_tid) left join offsets o using (rank, et_tid)
    where e.pos + coalesce(o.delta, 0) >= 1
),
window_ops as (
    select k.rank, m.et_tid, k.id, k.name,
           row_number() over (partition by k.rank, m.et_tid, k.name order by k.pos) as occurrence
    from k_seq k join thread_map m on m.rank = k.rank and m.pid = k.pid and m.tid = k.tid
    left join offsets o on o.rank = m.rank and o.et_tid = m.et_tid
    where k.pos - coalesce(o.delta, 0) >= 1
)
select n.rank, n.id, o.id as event_id, 'name_order' as link_method
from window_nodes n join window_ops o using (rank, et_tid, name, occurrence)
"""

LINK_NOTES_SQL = f"""
with nodes as (select rank, count(*) as n, count(event_id) as linked from et_nodes group by rank),
ops as (
    select e.rank, count(*) as n, count(l.id) as linked
    from events e left join et_nodes l on l.rank = e.rank and l.event_id = e.id
    where e.kind in {LINKABLE_KINDS} group by e.rank
)
select nodes.rank, 'et_unlinked_nodes' as reason,
       (nodes.n - nodes.linked) || ' of ' || nodes.n || ' Execution Trace nodes have no Kineto event ('
       || coalesce('linked by ' || m.method, 'no Kineto cpu_op/user_annotation events on this rank') || ')' as detail
from nodes left join link_method m using (rank)
where nodes.linked < nodes.n
union all
select ops.rank, 'et_unlinked_ops',
       (ops.n - ops.linked) || ' of ' || ops.n || ' Kineto cpu_op/user_annotation events have no Execution Trace node'
       || ' (linked by ' || m.method || ')'
from ops join link_method m using (rank)
where ops.linked < ops.n
"""


def link_events(tables: TraceTables, sources: dict[int, str] | None = None) -> TraceTables:
    """et_nodes with `event_id` and `link_method` filled; link notes (stage et) in diagnostics."""
    sources = sources or {}
    with tables.connect() as con:
        con.execute(f"create temp table link_method as {LINK_METHOD_SQL}")
        links = [con.sql(RF_ID_LINKS_SQL).pl()]
        notes = []
        if con.sql("select count(*) from link_method where method = 'name_order'").fetchall()[0][0]:
            con.execute(SEQUENCES_SQL)
            mapping = thread_map(con.sql(THREAD_AGREEMENT_SQL).pl())
            con.register("thread_map", mapping)
            offsets = con.sql(OFFSET_SQL).pl()
            con.register("offsets", offsets)
            links.append(con.sql(NAME_ORDER_LINKS_SQL).pl())
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
        notes.append(con.sql(LINK_NOTES_SQL).pl())
    return tables.with_tables(
        et_nodes=nodes.to_arrow(),
        diagnostics=pa.concat_tables([tables.diagnostics, stage_notes(pl.concat(notes), sources)]))


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

# et_ctrl: the ET's own parent links (the root names itself as parent and gets none).
CTRL_EDGES_SQL = """
select c.rank, c.parent as src, c.id as dst, 'et_ctrl' as kind
from et_nodes c join et_nodes p on p.rank = c.rank and p.id = c.parent
where c.parent <> c.id
"""

# A parent id that names no node of the trace gets no et_ctrl edge: counted, not silently skipped.
MISSING_PARENT_SQL = """
select c.rank, 'et_missing_parent' as reason,
       count(*) || ' nodes name a parent that is not in the Execution Trace, e.g. node ' || min(c.id)
       || ' (parent ' || arg_min(c.parent, c.id) || ')' as detail
from et_nodes c anti join et_nodes p on p.rank = c.rank and p.id = c.parent
where c.parent is not null and c.parent <> c.id
group by c.rank
"""

# Where each node's subtree ends: the largest id among it and its descendants. A node has written its outputs only
# once its subtree is done, so an op nested inside an in-place op (zero_ → fill_) reads the tensor as it was
# before the enclosing op, not from it. Depth is capped so a malformed parent cycle cannot recurse for ever.
SUBTREE_END_SQL = """
with recursive up(rank, id, ancestor, depth) as (
    select rank, id, parent, 1 from et_nodes where parent is not null and parent <> id
    union all
    select u.rank, u.id, p.parent, u.depth + 1
    from up u join et_nodes p on p.rank = u.rank and p.id = u.ancestor
    where p.parent is not null and p.parent <> p.id and u.depth < 1000
)
select n.rank, n.id, greatest(n.id, coalesce(max(u.id), n.id)) as subtree_end
from et_nodes n left join up u on u.rank = n.rank and u.ancestor = n.id
group by n.rank, n.id
"""

# et_data: a tensor is identified by (tensor_id, storage_id); storage 0 is an undefined tensor, which carries no
# data. Its producer for a consumer is the latest node that output it and had finished (subtree_end < consumer id)
# when the consumer started; among nested ops finishing together, the innermost (highest id) one.
DATA_EDGES_SQL = """
with outs as (
    select t.rank, s.subtree_end, max(t.node) as node, t.tensor_id, t.storage_id
    from et_tensors t join subtree s on s.rank = t.rank and s.id = t.node
    where t.direction = 'output' and t.storage_id <> 0
    group by t.rank, s.subtree_end, t.tensor_id, t.storage_id
),
ins as (
    select distinct rank, node, tensor_id, storage_id from et_tensors where direction = 'input' and storage_id <> 0
)
select distinct i.rank, o.node as src, i.node as dst, 'et_data' as kind
from ins i asof join outs o
  on o.rank = i.rank and o.tensor_id = i.tensor_id and o.storage_id = i.storage_id and i.node > o.subtree_end
"""


def et_edges(tables: TraceTables) -> tuple[pa.Table, pl.DataFrame]:
    """et_ctrl and et_data edges (src / dst are et_nodes ids), and notes (rank, reason, detail) on missing parents."""
    with tables.connect() as con:
        ctrl = con.sql(CTRL_EDGES_SQL).to_arrow_table()
        con.execute(f"create temp table subtree as {SUBTREE_END_SQL}")
        data = con.sql(DATA_EDGES_SQL).to_arrow_table()
        notes = con.sql(MISSING_PARENT_SQL).pl()
    return pa.concat_tables([schema.conform("edges", ctrl), schema.conform("edges", data)]), notes
