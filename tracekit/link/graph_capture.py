"""Graph replays owned by the ops that captured them: a capture trace's launches matched to the replayed GPU ops.

A CUDA/HIP graph launch replays every kernel of the graph under one correlation, so the replay trace says nothing of
the ops that made them. The trace of capturing the graph does: each launch call inside a capture region
(`*StreamBeginCapture` .. `*StreamEndCapture`) sits under the op, shapes and module stack that made it.
`queries/link/capture_launches.sql` lists those launches per graph over each capture trace's own tables; over the
replay, `graph_replayed` → `graph_pairs` → `graph_choices` → `graph_kernels` pick the graph each launch replayed
and pair its GPU ops with the graph's launches (by kernel name and occurrence where the capture names kernels, else
by position), and `graph_capture_notes` says in `diagnostics` what could not be paired, and why.

Which capture belongs to which rank: its own rank (distributedInfo) where the replay has that rank; a single-rank
capture of a single-rank replay is that rank whatever it says.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from tracekit import schema
from tracekit.engine import catalog
from tracekit.engine.tables import TraceTables

CAPTURED = "captured_launches"  # the relation the replay-side passes read: every capture's launches, ranks mapped


def captured_launches(capture: TraceTables) -> pa.Table:
    """The launches of every graph captured in one capture trace's tables (queries/link/capture_launches.sql)."""
    with capture.connect() as con:
        return catalog.run_stage(con, ["link/capture_launches"])["capture_launches"]


def attach_graph_captures(tables: TraceTables, captures: list[TraceTables]) -> TraceTables:
    """TABLES (edges built) with `graph_kernels` filled from the CAPTURES (each a capture trace's tables, edges
    built), and a `graph_capture_*` diagnostics row for whatever of the replays could not be paired."""
    if not captures:
        return tables
    replay_ranks = tables.rank_list
    launches = pa.concat_tables([on_replay_rank(captured_launches(c), c.rank_list, replay_ranks) for c in captures],
                                promote_options="permissive")
    with tables.connect() as con:
        con.register(CAPTURED, launches)
        made = catalog.run_stage(con, ["link/graph_kernels", "link/graph_capture_notes"])
    notes = schema.conform("diagnostics", made["graph_capture_notes"])
    return tables.with_tables(graph_kernels=made["graph_kernels"],
                              diagnostics=pa.concat_tables([tables.diagnostics, notes]))


def on_replay_rank(launches: pa.Table, capture_ranks: list[int], replay_ranks: list[int]) -> pa.Table:
    """A single-rank capture of a single-rank replay is read as the replay's rank (a capture trace often says no
    rank, or another than its replay's file order gave); otherwise ranks stay as the traces say."""
    if len(capture_ranks) == 1 and len(replay_ranks) == 1 and capture_ranks != replay_ranks:
        return launches.set_column(launches.schema.get_field_index("rank"), "rank",
                                   pc.cast(pa.array([replay_ranks[0]] * launches.num_rows), pa.int32()))
    return launches
