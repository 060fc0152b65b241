"""The diff's sections, as data: what is compared between two runs, from which analysis, keyed and judged how.

A section is one entry of SECTIONS: its source analysis (and any other it reads), the key columns matched between
the runs, the metrics compared with their direction and floor, which metrics decide a row's verdict, whether it is
compared rank by rank, the analysis run once per step for the verdicts' per-step values, how `--metric` names its
measures, its label in the terminal and whether it is listed among the top changes. Everything else (the analyses
a diff runs, the comparison, the workbook frames, the terminal summary) is derived from these entries. Adding a
section is one entry here (plus its query in queries/; a sheet in reports/diff.toml to show it in the workbook).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from tracekit.diff.measures import (
    TIMELINE_STEP_COLUMNS,
    analysis_measures,
    collective_measures,
    collective_role_measures,
    critical_path_measures,
    op_rate_measures,
    phase_measures,
    step_time_measures,
    timeline_measures,
)
from tracekit.engine import catalog


@dataclass(frozen=True)
class Metric:
    name: str
    direction: int  # +1: larger is slower (times); -1: larger is faster (bandwidth); 0: no verdict (counts)
    aggregation: str  # how the value is made from steps or calls: sum, mean, median
    abs_floor: float  # changes up to this (in the metric's unit) are never called
    label: str = ""  # short name in the terminal's top changes (default: the name)
    # What carries the time: DEVICE, HOST (a CPU time) or HOST_IF_GPU_IDLE (the step: a host time when the GPU sat
    # idle for most of it). With one capture a side, host times are judged against the host floor (comparison.py).
    carried_by: str = "device"

    @property
    def to_ms(self) -> float | None:
        """Factor from the metric's unit to milliseconds (None: not a time)."""
        return {"ms": 1.0, "us": 1e-3}.get(self.name.rsplit("_", 1)[-1])


def sum_ms(name: str, label: str = "", carried_by: str = "device") -> Metric:
    return Metric(name, +1, "sum", 0.001, label, carried_by)


def sum_us(name: str, label: str = "") -> Metric:
    return Metric(name, +1, "sum", 1.0, label)


DEVICE, HOST, HOST_IF_GPU_IDLE = "device", "host", "host if the GPU idles"
COUNT = Metric("count", 0, "sum", 0.0)

# Top changes: "yes" lists the section's rows; the kernel-name sections give way to op categories when the two runs'
# kernel names mostly differ (another vendor, another library); the rest repeat what those show.
TOP_CHANGES = ("yes", "unless_kernel_names_differ", "when_kernel_names_differ", "no")


@dataclass(frozen=True)
class Section:
    name: str
    source: str  # the analysis its values over the whole trace come from
    key_types: dict[str, pl.DataType]  # key columns (matched between the sides) and their types
    metrics: tuple[Metric, ...]
    deciders: tuple[str, ...]  # metrics that can decide the row's verdict, by priority (first significant wins)
    per_rank: bool  # compared rank by rank as well as for all ranks together
    attributes: tuple[str, ...] = ()  # descriptive columns of `source` carried from either side (an op's category)
    # The analysis run once per step for the per-step values, where that is a group-by of its columns (rolled up to
    # the section's keys when it is not `source`); None: the section's measures find them in the whole-trace results.
    per_step_source: str | None = None
    reads: tuple[str, ...] = ()  # further analyses its measures read over the whole trace
    # One side's measures: (con, side, section, warmup) → long frame (tracekit/diff/measures.py).
    measures: Callable = analysis_measures
    metric_name: str | None = None  # how --metric / DiffResult.metric names one of its rows: "op:NAME"
    top_changes: str = "no"  # one of TOP_CHANGES

    def __post_init__(self):
        if self.top_changes not in TOP_CHANGES:
            raise ValueError(f"section {self.name}: top_changes {self.top_changes!r} is not one of {TOP_CHANGES}")

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self.key_types)

    @property
    def key_type(self) -> pl.Struct:
        return pl.Struct(self.key_types)

    @property
    def analyses(self) -> tuple[str, ...]:
        """Every analysis the section reads over the whole trace."""
        return tuple(dict.fromkeys((self.source, *self.reads, *filter(None, (self.per_step_source,)))))


OP_METRICS = (COUNT, sum_ms("direct_kernel_ms", "kernel"), sum_ms("subtree_kernel_ms"),
              sum_ms("total_cpu_ms", carried_by=HOST), sum_ms("self_cpu_ms", "self cpu", carried_by=HOST))
OP_DECIDERS = ("direct_kernel_ms", "self_cpu_ms")
SECTIONS: dict[str, Section] = {s.name: s for s in (
    Section("step_time", "steps", {"measure": pl.String},
            (Metric("step_time_ms", +1, "median", 0.001, carried_by=HOST_IF_GPU_IDLE),),
            ("step_time_ms",), True, reads=("gpu_timeline",), measures=step_time_measures),
    Section("phases", "steps", {"phase": pl.String}, (Metric("iteration_ms", +1, "median", 0.001, "iteration"),),
            ("iteration_ms",), True, measures=phase_measures, metric_name="phase:PHASE"),
    Section("gpu_timeline", "gpu_timeline", {"category": pl.String}, (sum_ms("time_ms", "time"),), ("time_ms",), True,
            reads=("steps",), measures=timeline_measures, metric_name="gpu:CATEGORY"),
    Section("ops", "op_summary", {"name": pl.String}, OP_METRICS, OP_DECIDERS, False, ("category",),
            per_step_source="op_by_shape", metric_name="op:NAME", top_changes="yes"),
    Section("ops_by_shape", "op_by_shape", {"name": pl.String, "input_dims": pl.String, "input_type": pl.String},
            OP_METRICS, OP_DECIDERS, False, ("category",), per_step_source="op_by_shape"),
    # achieved TFLOP/s per modelled op call shape (op_perf; docs/perf_models.md)
    Section("op_rates", "op_perf", {"name": pl.String, "input_dims": pl.String, "input_type": pl.String},
            (COUNT, sum_us("kernel_total_us", "kernel"), Metric("tflops_per_s", -1, "mean", 0.01, "TFLOP/s")),
            ("tflops_per_s", "kernel_total_us"), False, ("category",), per_step_source="op_perf",
            measures=op_rate_measures),
    Section("kernels", "kernel_summary", {"kernel_name": pl.String}, (COUNT, sum_us("total_us", "kernel")),
            ("total_us",), False, ("category",), per_step_source="kernel_summary", metric_name="kernel:NAME",
            top_changes="unless_kernel_names_differ"),
    Section("categories", "op_categories", {"category": pl.String}, (COUNT, sum_ms("direct_kernel_ms", "kernel")),
            ("direct_kernel_ms",), False, per_step_source="op_categories", metric_name="category:NAME",
            top_changes="when_kernel_names_differ"),
    Section("collectives", "collectives",
            {"collective": pl.String, "dtype": pl.String, "bytes": pl.Int64, "group_size": pl.Int64},
            (COUNT, sum_us("time_us", "time"), Metric("busbw_gbps", -1, "mean", 0.1, "busbw")),
            ("time_us", "busbw_gbps"), True, per_step_source="collectives", measures=collective_measures,
            top_changes="yes"),
    # Comparable across world sizes and devices (mismatch.py): all-ranks values are the mean per rank.
    Section("collective_roles", "collectives", {"collective": pl.String, "role": pl.String},
            (COUNT, sum_us("time_us", "time")), ("time_us",), True, per_step_source="collectives",
            measures=collective_role_measures),
    Section("critical_path", "critical_path_summary", {"category": pl.String}, (sum_ms("time_ms", "time"),),
            ("time_ms",), True, measures=critical_path_measures),
)}


def without_critical_path(sections: dict[str, Section]) -> dict[str, Section]:
    """SECTIONS less those whose analyses walk the critical path (`tracekit diff --no-critical-path`): the costliest
    analyses of each side."""
    return {name: s for name, s in sections.items() if not any(map(catalog.walks_critical_path, s.analyses))}


def totals_analyses(sections: dict[str, Section]) -> tuple[str, ...]:
    """The analyses a diff runs over each whole trace."""
    return tuple(dict.fromkeys(name for s in sections.values() for name in s.analyses))


def per_step_analyses(sections: dict[str, Section]) -> tuple[str, ...]:
    """The analyses a diff runs once per step."""
    return tuple(dict.fromkeys(s.per_step_source for s in sections.values() if s.per_step_source))


def top_change_sections(sections: dict[str, Section], kernel_names_differ: bool = False) -> tuple[str, ...]:
    """The sections whose rows are listed among the top changes."""
    wanted = ("yes", "when_kernel_names_differ" if kernel_names_differ else "unless_kernel_names_differ")
    return tuple(s.name for s in sections.values() if s.top_changes in wanted)


TOP_CHANGE_SECTIONS = top_change_sections(SECTIONS)


def parse_metric_name(name: str, sections: dict[str, Section] = SECTIONS) -> tuple[str, str]:
    """(section, item) of a measure named as --metric names it: step_time, a bare GPU timeline category, or one of
    the sections' `metric_name` forms (gpu:CATEGORY, op:NAME, ...)."""
    named = {s.metric_name.partition(":")[0]: s for s in sections.values() if s.metric_name}
    prefix, sep, rest = name.partition(":")
    if not sep:
        if name == "step_time":
            return "step_time", "step time"
        if name in TIMELINE_STEP_COLUMNS or name == "no_launcher_excluded":
            return "gpu_timeline", name
        forms = ", ".join(s.metric_name for s in named.values())
        raise LookupError(f"{name}: unknown metric (step_time, {forms})")
    if prefix not in named:
        raise LookupError(f"{name}: unknown metric prefix {prefix!r} ({', '.join(named)})")
    return named[prefix].name, rest
