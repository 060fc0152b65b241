"""What the two sides of a diff are, and where they differ: device, world size, rank set, PyTorch version.

A diff of runs on different hardware or world sizes is still useful (that is often the question), but its per-rank
rows no longer match one to one and collectives of a given size differ by construction: the headline names each
difference, and the `collective_roles` section compares collectives by type and process-group role instead of by
exact message size.
"""

from __future__ import annotations

import polars as pl

from tracekit.diff.side import RUN_INFO_SCHEMA, Side
from tracekit.engine.tables import TraceTables
from tracekit.read.ranks import pytorch_version


def run_info(tables: TraceTables) -> pl.DataFrame:
    """Per rank: device name, world size and the PyTorch version the trace records (null where it says nothing)."""
    ranks = pl.from_arrow(tables.ranks.select(["rank", "device_name", "world_size", "trace_metadata"]))
    if ranks.height == 0:
        return pl.DataFrame(schema=RUN_INFO_SCHEMA)
    versions = [pytorch_version(text) for text in ranks["trace_metadata"].to_list()]
    return ranks.select("rank", "device_name", "world_size").with_columns(
        pytorch_version=pl.Series(versions, dtype=pl.String)).cast(RUN_INFO_SCHEMA)


def described(values: list) -> str:
    known = sorted({str(v) for v in values if v is not None})
    return ", ".join(known) if known else "unknown"


def mismatches(base: list[Side], cand: list[Side], labels: tuple[str, str]) -> tuple[str, ...]:
    """One line per way the sides differ (every capture of a side counted): device, world size, rank set, PyTorch
    version; a property one side does not record is not called a difference."""
    infos = [pl.concat([s.run_info for s in sides]) for sides in (base, cand)]
    lines = []
    for column, what in (("device_name", "device"), ("world_size", "world size"),
                         ("pytorch_version", "PyTorch version")):
        values = [set(info[column].drop_nulls().to_list()) for info in infos]
        if all(values) and values[0] != values[1]:
            lines.append(f"{what} differs: {labels[0]} {described(list(values[0]))}, "
                         f"{labels[1]} {described(list(values[1]))}")
    ranks = [set(info["rank"].to_list()) for info in infos]
    if all(ranks) and ranks[0] != ranks[1]:
        lines.append(f"rank set differs: {labels[0]} {rank_text(ranks[0])}, {labels[1]} {rank_text(ranks[1])} "
                     "(per-rank rows of ranks on one side only are added/removed; compare the all-ranks rows)")
    if lines and any(line.startswith(("device", "world size")) for line in lines):
        lines.append("collectives are compared by type and process-group role (section collective_roles), "
                     "not by exact message size")
    return tuple(lines)


def rank_text(ranks: set[int]) -> str:
    ordered = sorted(ranks)
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return ",".join(map(str, ordered[:8])) + (f",… ({len(ordered)} ranks)" if len(ordered) > 8 else "")
