"""Replay and what-if: re-time the dependency graph (events + edges) and compare each step with its measurement.

`replay(tables, scale=..., remove=...)` returns one row per rank and step (a rank without ProfilerSteps: one
window) with the measured and predicted duration, and the predicted step's GPU-time breakdown. What is modelled
and what is not: docs/replay.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import polars as pl

from tracekit.engine import catalog
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError, closest_names
from tracekit.output.timeline import write_timeline
from tracekit.query import step_scope
from tracekit.query.analyses import run as run_analysis
from tracekit.replay.graph import build, inside_selection
from tracekit.replay.solve import solve

SELECTORS = ("kernel", "op", "category", "cpu")
WHAT = {"kernel": "names of GPU ops", "op": "names of cpu_ops, annotations and Python functions",
        "cpu": "names of host events", "category": "GPU timeline and op categories"}
BREAKDOWN = ("busy_ms", "idle_ms", "computation_ms", "communication_ms", "exposed_communication_ms", "memcpy_ms")


@dataclass(frozen=True)
class Selector:
    """kernel:PATTERN, op:PATTERN, category:NAME or cpu:PATTERN (see queries/replay/selected.sql); an empty
    PATTERN picks every GPU op (kernel:), op or host event (cpu:)."""

    kind: str
    pattern: str

    @classmethod
    def parse(cls, text: str) -> Selector:
        kind, sep, pattern = text.partition(":")
        if not sep or kind not in SELECTORS or (kind == "category" and not pattern):
            raise InputError(f"{text!r}: a selector is one of {', '.join(k + ':PATTERN' for k in SELECTORS)}")
        return cls(kind, pattern)

    def __str__(self) -> str:
        return f"{self.kind}:{self.pattern}"


def parse_scale(text: str) -> tuple[Selector, float]:
    """SELECTOR=FACTOR (the last '=' splits: a pattern may hold '=')."""
    selector, sep, factor = text.rpartition("=")
    try:
        value = float(factor)
    except ValueError:
        value = -1.0
    if not sep or not value >= 0 or not np.isfinite(value):
        raise InputError(f"--scale {text}: expected SELECTOR=FACTOR with a factor >= 0")
    return Selector.parse(selector), value


def as_factors(scale: Mapping[str, float] | Iterable[tuple[str | Selector, float]] | None,
               remove: Iterable[str | Selector] | None) -> list[tuple[Selector, float]]:
    items = list(scale.items()) if isinstance(scale, Mapping) else list(scale or [])
    factors = [(s if isinstance(s, Selector) else Selector.parse(s), float(f)) for s, f in items]
    return factors + [(s if isinstance(s, Selector) else Selector.parse(s), 0.0) for s in remove or []]


def replayed_events(tables: TraceTables, scale=None, remove=None,
                    con: duckdb.DuckDBPyConnection | None = None) -> tuple[pl.DataFrame, int]:
    """rank, id, ts, dur of every re-timed event under the what-if, with inferred_wait (true where an inferred
    wait holds the event's start or end: sync_inferred, stream_wait_inferred, thread_wait_inferred), and the
    solver's passes (on `con`, a `catalog.connect(tables)` connection, when given)."""
    factors = as_factors(scale, remove)
    with nullcontext(con) if con is not None else catalog.connect(tables) as con:
        made = catalog.run_stage(con, ["replay/nodes", "replay/constraints", "replay/collectives"])
        nodes, constraints, collectives = (pl.from_arrow(made[f"replay_{name}"])
                                           for name in ("nodes", "constraints", "collectives"))
        nodes = nodes.with_row_index("row")
        selected = []
        for selector, factor in factors:
            params = {"selector": selector.kind, "pattern": selector.pattern}
            frame = pl.from_arrow(catalog.run_stage(con, ["replay/selected"], {"replay/selected": params})
                                  ["replay_selected"])
            if frame.is_empty():
                names = pl.from_arrow(catalog.run_stage(con, ["replay/selector_names"], {
                    "replay/selector_names": {"selector": selector.kind}})["replay_selector_names"])
                raise InputError(f"selector {selector} matches nothing in the input ({WHAT[selector.kind]}); "
                                 f"closest names: {closest_names(selector.pattern, names['name'].drop_nulls())}")
            selected.append(frame.with_columns(factor=pl.lit(factor)))
    keys = nodes.select("rank", "id", "row")
    nodes = nodes.join(keys.rename({"id": "parent", "row": "parent_row"}), on=["rank", "parent"], how="left",
                       maintain_order="left").with_columns(pl.col("parent_row").fill_null(-1).cast(pl.Int64))
    constraints = (constraints
                   .join(keys.rename({"id": "src", "row": "src_row"}), on=["rank", "src"])
                   .join(keys.rename({"id": "dst", "row": "dst_row"}), on=["rank", "dst"])
                   .with_columns(pl.col("src_row", "dst_row").cast(pl.Int64)))
    collectives = collectives.join(keys, on=["rank", "id"]).with_columns(pl.col("row").cast(pl.Int64))
    n = nodes.height
    own = {part: np.ones(n) for part in ("gpu", "cpu")}
    parent_row = nodes["parent_row"].to_numpy()
    launches = constraints.filter(pl.col("kind") == "launch")
    launch_src, launch_dst = launches["src_row"].to_numpy(), launches["dst_row"].to_numpy()
    for frame in selected:
        # A selector applies once to an event, however many of its ancestors it also picked (aten::to in aten::to),
        # and once to a GPU op it picks both itself and through the op that launched it (category:communication:
        # the NCCL kernel and its record_param_comms).
        picked = frame.join(keys, on=["rank", "id"])
        factor = frame["factor"][0] if frame.height else 1.0
        host = np.zeros(n, dtype=bool)
        host[picked.filter(pl.col("part").is_in(("cpu", "op")))["row"].to_numpy()] = True
        op = np.zeros(n, dtype=bool)
        op[picked.filter(pl.col("part") == "op")["row"].to_numpy()] = True
        gpu = np.zeros(n, dtype=bool)
        gpu[picked.filter(pl.col("part") == "gpu")["row"].to_numpy()] = True
        gpu[launch_dst[inside_selection(op, parent_row)[launch_src]]] = True
        own["cpu"] = np.where(inside_selection(host, parent_row), own["cpu"] * factor, own["cpu"])
        own["gpu"] = np.where(gpu, own["gpu"] * factor, own["gpu"])
    chains, cons, measured = build(nodes, constraints, collectives, own["cpu"], own["gpu"])
    times, passes = solve(chains, cons, measured)
    times = times[:2 * n]
    inferred = np.zeros(n, dtype=bool)
    inferred[constraints.filter(pl.col("inferred"))["dst_row"].to_numpy()] = True
    result = nodes.select("rank", "id").with_columns(ts=pl.Series(times[0::2]),
                                                     dur=pl.Series(times[1::2] - times[0::2]),
                                                     inferred_wait=pl.Series(inferred))
    return result, passes


def retimed_tables(tables: TraceTables, scale=None, remove=None,
                   con: duckdb.DuckDBPyConnection | None = None) -> TraceTables:
    """`tables` with every re-timed event's ts and dur replaced by the replay's (other events as measured)."""
    return with_times(tables, replayed_events(tables, scale, remove, con)[0])


def with_times(tables: TraceTables, retimed: pl.DataFrame) -> TraceTables:
    events = pl.from_arrow(tables.events)
    updated = (events.join(retimed.select("rank", "id", new_ts="ts", new_dur="dur"), on=["rank", "id"], how="left",
                           maintain_order="left")
               .with_columns(ts=pl.coalesce("new_ts", "ts"),
                             dur=pl.when(pl.col("new_ts").is_not_null() & pl.col("dur").is_not_null())
                             .then(pl.col("new_dur")).otherwise(pl.col("dur")))
               .drop("new_ts", "new_dur"))
    return tables.with_tables(events=updated.to_arrow())


def windows(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """The windows of the tables registered on `con` (queries/replay/windows.sql)."""
    return pl.from_arrow(catalog.run_stage(con, ["replay/windows"])["replay_windows"])


def replay(tables: TraceTables, scale=None, remove=None, timeline: str | Path | None = None,
           step: int | None = None) -> pl.DataFrame:
    """One row per rank and step: rank, step (null: a rank without ProfilerSteps, replayed as one window),
    measured_ms, predicted_ms, error_percent (predicted vs measured), inferred_waits (events of the step, by their
    measured start, that an inferred wait holds: the prediction rests on inference where it is not 0) and the
    predicted step's GPU time (busy_ms, idle_ms, computation_ms, communication_ms, exposed_communication_ms,
    memcpy_ms, as the `steps` analysis defines them).

    scale: {selector: factor} or [(selector, factor)]; remove: [selector] (factor 0). Selectors: kernel:PATTERN,
    op:PATTERN, category:NAME, cpu:PATTERN. With `timeline`, the replayed events are also written there as a
    Chrome-trace timeline (tracekit.output.timeline; processes labelled "replayed"): the "after" picture.
    With `step`, the rows (and the timeline) of training step N only; the whole graph is still replayed, so the
    step starts where the steps before it leave it."""
    # One connection: the measured windows, the replay's queries, then the re-timed tables registered in place of
    # the measured ones for the predicted windows and breakdown (the catalog's macros stay loaded).
    with catalog.connect(tables) as con:
        if step is not None:
            step_scope.require_step(con, step)
        measured = windows(con)
        retimed, _ = replayed_events(tables, scale, remove, con)
        after = with_times(tables, retimed)
        after.connect(con)
        predicted = windows(con).select("rank", "window_id", predicted_ns="duration_ns")
        breakdown = run_analysis(after, "steps", con).select(pl.col("rank"), pl.col("step").alias("window_id"),
                                                             *BREAKDOWN)
    if timeline is not None:
        write_timeline(after, timeline, step=step, label="replayed")
    starts = (retimed.filter("inferred_wait").select("rank", "id")
              .join(pl.from_arrow(tables.events.select(["rank", "id", "ts"])), on=["rank", "id"]))
    inferred = (measured.select("rank", "window_id", "start_ns", "end_ns").join(starts, on="rank")
                .filter(pl.col("ts") >= pl.col("start_ns"), pl.col("ts") < pl.col("end_ns"))
                .group_by("rank", "window_id").agg(inferred_waits=pl.len()))
    return (measured.join(predicted, on=["rank", "window_id"], how="left")
            .join(inferred, on=["rank", "window_id"], how="left")
            .join(breakdown, on=["rank", "window_id"], how="left")
            .select("rank", "step",
                    (pl.col("duration_ns") / 1e6).alias("measured_ms"),
                    (pl.col("predicted_ns") / 1e6).alias("predicted_ms"),
                    ((pl.col("predicted_ns") - pl.col("duration_ns")) / pl.col("duration_ns") * 100)
                    .alias("error_percent"),
                    pl.col("inferred_waits").fill_null(0).cast(pl.Int64), *BREAKDOWN)
            .filter(pl.lit(True) if step is None else pl.col("step") == step)
            .sort("rank", "step", nulls_last=True))
