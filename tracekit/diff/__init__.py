"""Compare two runs (baseline → candidate): what got slower or faster, judged step by step.

Each side is summarised by the contract analyses (`summarize`): totals over the trace, plus — where the side holds
several `ProfilerStep`s — the same analyses rerun once per step. `compare` turns both sides into long "measures"
(key, rank, metric, value over the capture, and the list of per-step values of the steady-state steps: the first
`warmup_steps` steps of each run are left out, and named) and lets DuckDB full-outer-join them
(queries/diff/compare.sql). The verdict rule is tracekit/verdicts.py: the candidate's steps are compared with the
baseline's by a Mann–Whitney rank test and a Hodges–Lehmann shift with its confidence interval; a measure is slower or
faster when the interval excludes 0 and the shift exceeds a practical floor (floor_percent of the per-step value).
Without enough steps for an interval at the chosen level the verdict is "not enough steps to say". Keys present on
one side only are added/removed. Ops are judged on their direct kernel time and their self CPU time (not total CPU
time, which would repeat a child's change in every ancestor and count time blocked in a synchronising child as the
op's own).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl

from tracekit.diff import verdicts
from tracekit.engine import catalog, connection
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.output import workbooks as report
from tracekit.output import xlsx
from tracekit.output.atomic import replacing_file
from tracekit.query import analyses

DEFAULT_ALPHA = 0.05  # two-sided level of the rank test; the shift's confidence interval is at 1 - alpha
DEFAULT_FLOOR_PERCENT = 1.0  # per-step shifts smaller than this share of the value are never called, however steady
DEFAULT_WARMUP_STEPS = 1  # leading steps of each run left out of the verdicts
SIGNIFICANT = ("slower", "faster", "added", "removed")

TOTALS_ANALYSES = ("gpu_timeline", "op_summary", "op_by_shape", "op_categories", "kernel_summary", "steps",
                   "collectives", "critical_path_summary")
PER_STEP_ANALYSES = ("op_by_shape", "kernel_summary", "collectives")


@dataclass(frozen=True)
class Metric:
    name: str
    direction: int  # +1: larger is slower (times); -1: larger is faster (bandwidth); 0: no verdict (counts)
    aggregation: str  # how the value is made from steps or calls: sum, mean, median
    abs_floor: float  # changes up to this (in the metric's unit) are never called

    @property
    def to_ms(self) -> float | None:
        """Factor from the metric's unit to milliseconds (None: not a time)."""
        return {"ms": 1.0, "us": 1e-3}.get(self.name.rsplit("_", 1)[-1])


def sum_ms(name: str) -> Metric:
    return Metric(name, +1, "sum", 0.001)


def sum_us(name: str) -> Metric:
    return Metric(name, +1, "sum", 1.0)


COUNT = Metric("count", 0, "sum", 0.0)


@dataclass(frozen=True)
class Section:
    name: str
    key_types: dict[str, pl.DataType]  # key columns (matched between the sides) and their types
    metrics: tuple[Metric, ...]
    deciders: tuple[str, ...]  # metrics that can decide the row's verdict, by priority (first significant wins)
    per_rank: bool  # compared rank by rank as well as for all ranks together
    attributes: tuple[str, ...] = ()  # descriptive columns carried from either side (an op's category)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self.key_types)

    @property
    def key_type(self) -> pl.Struct:
        return pl.Struct(self.key_types)


OP_METRICS = (COUNT, sum_ms("direct_kernel_ms"), sum_ms("subtree_kernel_ms"), sum_ms("total_cpu_ms"),
              sum_ms("self_cpu_ms"))
SECTIONS = {s.name: s for s in (
    Section("step_time", {"measure": pl.String}, (Metric("step_time_ms", +1, "median", 0.001),), ("step_time_ms",),
            True),
    Section("gpu_timeline", {"category": pl.String}, (sum_ms("time_ms"),), ("time_ms",), True),
    Section("ops", {"name": pl.String}, OP_METRICS, ("direct_kernel_ms", "self_cpu_ms"), False, ("category",)),
    Section("ops_by_shape", {"name": pl.String, "input_dims": pl.String, "input_type": pl.String}, OP_METRICS,
            ("direct_kernel_ms", "self_cpu_ms"), False, ("category",)),
    Section("kernels", {"kernel_name": pl.String}, (COUNT, sum_us("total_us")), ("total_us",), False, ("category",)),
    Section("categories", {"category": pl.String}, (COUNT, sum_ms("direct_kernel_ms")), ("direct_kernel_ms",), False),
    Section("collectives", {"collective": pl.String, "dtype": pl.String, "bytes": pl.Int64, "group_size": pl.Int64},
            (COUNT, sum_us("time_us"), Metric("busbw_gbps", -1, "mean", 0.1)), ("time_us", "busbw_gbps"), True),
    Section("critical_path", {"category": pl.String}, (sum_ms("time_ms"),), ("time_ms",), True),
)}
# Analysis each section's totals and per-step values come from, where that is a plain group-by of its columns.
STEP_SCHEMA = {"rank": pl.Int32, "step": pl.Int64}
SECTION_SOURCES = {"ops": "op_summary", "ops_by_shape": "op_by_shape", "kernels": "kernel_summary",
                   "categories": "op_categories"}
# gpu_timeline category → the `steps` column holding the same time per step.
TIMELINE_STEP_COLUMNS = {"computation": "computation_ms", "communication": "communication_ms", "memcpy": "memcpy_ms",
                         "exposed_communication": "exposed_communication_ms", "exposed_memcpy": "exposed_memcpy_ms",
                         "busy": "busy_ms", "idle": "idle_ms", "total": "duration_ms"}
EFFECT_COLUMNS = ("effect", "ci_low", "ci_high")  # per-step shift cand − base and its confidence interval
# Sections whose rows are listed among the top changes (categories and timeline repeat what these show).
TOP_CHANGE_SECTIONS = ("ops", "kernels", "collectives")


@dataclass(frozen=True)
class Side:
    """One run, summarised: analysis results over the whole trace, and the per-step ones the verdicts compare.

    `per_step[name]` holds the analysis `name` computed for each step separately, with a `step` column beside
    `rank`; `steps` (rank, step) lists the run's ProfilerSteps (empty without any).
    """

    label: str
    results: dict[str, pl.DataFrame]
    per_step: dict[str, pl.DataFrame] = field(default_factory=dict)
    steps: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=STEP_SCHEMA))
    failures: dict[str, str] = field(default_factory=dict)  # analysis → why it gave nothing (missing, failed)


@dataclass(frozen=True)
class Settings:
    alpha: float = DEFAULT_ALPHA
    floor_percent: float = DEFAULT_FLOOR_PERCENT
    warmup_steps: int = DEFAULT_WARMUP_STEPS


@dataclass(frozen=True)
class DiffResult:
    """The comparison: one wide frame per section, and every measure in long form.

    `sections[name]` has the section's key columns, `rank` where compared per rank (null: all ranks), and per metric
    m: base_m, cand_m, delta_m, percent_delta_m (values over the capture), effect_m, ci_low_m, ci_high_m (the
    per-step shift cand − base and its confidence interval), p_value_m and verdict_m; then `verdict` and `verdict_on`
    (the metric that decided it). Rows are ordered significant first, then by |delta| of the deciding metric.
    `measures` is the long form of all sections (section, item, rank, metric, base, cand, delta, percent_delta,
    effect, ci_low, ci_high, p_value, level, n_base, n_cand, verdict, decides) with `item` the key as text.
    `warmup` names, per run, the steps left out of the verdicts.
    """

    base_label: str
    cand_label: str
    sections: dict[str, pl.DataFrame]
    measures: pl.DataFrame
    settings: Settings
    step_basis: tuple[tuple[str, str], ...] = ()  # (label, what step time means on that side)
    notes: tuple[str, ...] = ()
    warmup: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (label, step numbers left out as warm-up)

    def warmup_text(self) -> str:
        return "; ".join(f"{label}: " + ", ".join(f"ProfilerStep#{n}" for n in steps)
                         for label, steps in self.warmup if steps)

    def headline(self) -> dict:
        """Median step time (all ranks: per step the slowest rank): base, cand, delta, percent_delta, effect, ci_low,
        ci_high, p_value, verdict (values in ms); without ProfilerSteps, the GPU timeline's total time."""
        return self.metric("step_time")

    def metric(self, name: str) -> dict:
        """One measure for all ranks, by name: step_time, gpu:CATEGORY (or a bare gpu_timeline category),
        op:NAME, kernel:NAME, category:NAME. Values in the measure's unit, `metric` says which."""
        section, item = parse_metric_name(name)
        rows = self.measures.filter((pl.col("section") == section) & (pl.col("item") == item)
                                    & pl.col("rank").is_null() & pl.col("decides"))
        if rows.height == 0:
            raise LookupError(f"{name}: no such measure in this diff")
        return rows.row(0, named=True)

    def regressed(self, percent: float, metric: str = "step_time") -> bool:
        """True when `metric` is called slower and is more than `percent` above the baseline."""
        row = self.metric(metric)
        return row["verdict"] == "slower" and (row["percent_delta"] is None or row["percent_delta"] > percent)

    def top_changes(self, limit: int = 15, sections: tuple[str, ...] = TOP_CHANGE_SECTIONS) -> pl.DataFrame:
        """The largest significant changes (ms) among `sections`, all ranks together."""
        return (self.measures
                .filter(pl.col("section").is_in(sections) & pl.col("decides") & pl.col("rank").is_null()
                        & pl.col("verdict").is_in(SIGNIFICANT) & pl.col("to_ms").is_not_null())
                .with_columns((pl.col(c) * pl.col("to_ms")).alias(f"{c}_ms")
                              for c in ("base", "cand", "delta", *EFFECT_COLUMNS))
                .sort(pl.col("delta_ms").abs(), "section", "item", descending=[True, False, False])
                .select("section", "item", "metric", "base_ms", "cand_ms", "delta_ms", "percent_delta",
                        *(f"{c}_ms" for c in EFFECT_COLUMNS), "p_value", "verdict")
                .head(limit))

    def one_side_only(self) -> pl.DataFrame:
        """Keys found in one run only (all ranks), with the time of their deciding measure in ms."""
        return (self.measures
                .filter(pl.col("decides") & pl.col("rank").is_null() & pl.col("verdict").is_in(["added", "removed"]))
                .select("section", "item",
                        found_in=pl.when(pl.col("verdict") == "added").then(pl.lit(self.cand_label))
                        .otherwise(pl.lit(self.base_label)),
                        metric="metric", time_ms=pl.coalesce("base", "cand") * pl.col("to_ms"))
                .sort(pl.col("time_ms").abs(), "section", "item", descending=[True, False, False], nulls_last=True))

    def workbook_frames(self, top: int = 30) -> dict[str, pl.DataFrame]:
        """The frames reports/diff.toml lays out, by the names its blocks use."""
        try:
            head = self.headline()
        except LookupError:
            head = dict.fromkeys(("base", "cand", "delta", "percent_delta", *EFFECT_COLUMNS, "p_value", "level",
                                  "n_base", "n_cand", "verdict"))
        summary = pl.DataFrame([{
            "baseline": self.base_label, "candidate": self.cand_label,
            "step_time_basis": "; ".join(f"{label}: {basis}" for label, basis in self.step_basis),
            "base_step_time_ms": head["base"], "cand_step_time_ms": head["cand"], "delta_step_time_ms": head["delta"],
            "percent_delta_step_time_ms": head["percent_delta"],
            **{f"{c}_step_time_ms": head[c] for c in (*EFFECT_COLUMNS, "p_value")},
            "steps_compared": None if head["n_base"] is None else f"{head['n_base']} vs {head['n_cand']}",
            "confidence_percent": None if head["level"] is None else 100 * head["level"],
            "verdict": head["verdict"], **vars(self.settings), "warmup_excluded": self.warmup_text() or "none",
            "notes": "\n".join(self.notes),
        }])
        timeline = self.sections["gpu_timeline"]
        return {"summary": summary, "top_changes": self.top_changes(top),
                "gpu_timeline_all": timeline.filter(pl.col("rank").is_null()).drop("rank"),
                "one_side_only": self.one_side_only(), **self.sections}


def parse_metric_name(name: str) -> tuple[str, str]:
    prefix, sep, rest = name.partition(":")
    if not sep:
        if name == "step_time":
            return "step_time", "step time"
        if name in TIMELINE_STEP_COLUMNS or name == "no_launcher_excluded":
            return "gpu_timeline", name
        raise LookupError(f"{name}: unknown metric (step_time, gpu:CATEGORY, op:NAME, kernel:NAME, category:NAME)")
    sections = {"gpu": "gpu_timeline", "op": "ops", "kernel": "kernels", "category": "categories"}
    if prefix not in sections:
        raise LookupError(f"{name}: unknown metric prefix {prefix!r} (gpu, op, kernel, category)")
    return sections[prefix], rest


# ---------------------------------------------------------------------------------------------------------------
# One side: analyses over the whole trace and per step


def summarize(tables: TraceTables, label: str) -> Side:
    """Run the analyses a diff needs over one side, and (with 2+ steps) the per-step ones the verdicts compare.

    An analysis that is missing from queries/ or fails leaves its sections empty and is named, with the reason, in
    `Side.failures` (the diff's notes) rather than stopping the diff.
    """
    failures: dict[str, str] = {}
    results = analyses.run_all(tables, list(TOTALS_ANALYSES), failures)
    with_rows = [name for name in PER_STEP_ANALYSES if name in results and results[name].height]
    per_step = per_step_results(tables, with_rows, failures)
    if per_step is None:
        return Side(label, results, failures=failures)
    return Side(label, results, *per_step, failures=failures)


def per_step_results(tables: TraceTables, names: list[str], failures: dict[str, str]
                     ) -> tuple[dict[str, pl.DataFrame], pl.DataFrame] | None:
    """The analyses `names` per step, each with a `step` column, and the (rank, step)s covered; None when no rank
    holds 2 steps. (summarize asks only for those with rows over the whole trace: no collectives, no per-step
    collectives.)

    Each (rank, step) becomes a pseudo-rank: every analysis keys on rank, so one run over views that relabel the
    rank computes it for every step at once (no copy of the tables is made). op_summary and op_categories per step
    are op_by_shape's rows summed by name and by category (the three are rollups of the same op calls).
    """
    with catalog.connect(tables) as con:
        mapping = pseudo_rank_views(con, tables)
        if mapping is None:
            return None
        done: dict[str, pl.DataFrame] = {}
        for name in names:
            analyses.run_into(con, name, done, failures)
        per_step = {name: restore_ranks(done[name], mapping) for name in names if name in done}
    by_shape = per_step.get("op_by_shape")
    if by_shape is not None:
        sums = [pl.col(m.name).sum() for m in OP_METRICS]
        # maintain_order: polars' default (partitioned) group_by adds float partial sums in a thread-timing order
        per_step["op_summary"] = (by_shape.group_by("rank", "step", "name", maintain_order=True)
                                  .agg(pl.col("category").first(), *sums))
        per_step["op_categories"] = by_shape.group_by("rank", "step", "category", maintain_order=True).agg(*sums)
    return per_step, mapping.select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64))


def pseudo_rank_views(con: duckdb.DuckDBPyConnection, tables: TraceTables) -> pl.DataFrame | None:
    """Replace the tables registered on `con` by views with one pseudo-rank per (rank, step); return the mapping
    (pseudo, rank, step), or None (views untouched) when no rank holds 2 steps or pseudo-ranks would overflow.

    Step membership is step_members() (queries/lib/steps.sql), as for every command's --step. Instants, flows and
    Execution Trace tables are empty in the views (the per-step analyses do not read them); edges keep only links
    within one step.
    """
    catalog.load_includes(con, ["lib/steps"])
    members = con.sql("select rank, id, step from step_members()").to_arrow_table()
    con.register("members", members)
    mapping = con.sql("""
        select rank, step, (dense_rank() over (partition by rank order by step) - 1)::bigint as step_index
        from (select distinct rank, step from members)""").pl()
    if mapping.height == 0 or mapping.group_by("rank").len()["len"].max() < 2:
        return None
    stride = int(mapping["step_index"].max()) + 1
    if (max(tables.rank_list) + 1) * stride >= 2**31:
        return None
    mapping = mapping.with_columns(
        pseudo=(pl.col("rank").cast(pl.Int64) * stride + pl.col("step_index")).cast(pl.Int32))
    con.register("pseudo_ranks", mapping)
    con.execute("""create temp table member_pseudo as
                   select m.rank, m.id, p.pseudo from members m join pseudo_ranks p using (rank, step)""")
    views = {
        "events": "select e.* replace (m.pseudo as rank) from whole_events e join member_pseudo m using (rank, id)",
        "edges": """select e.* replace (s.pseudo as rank) from whole_edges e
                    join member_pseudo s on s.rank = e.rank and s.id = e.src
                    join member_pseudo d on d.rank = e.rank and d.id = e.dst
                    where s.pseudo = d.pseudo and e.kind not like 'et_%'""",
        "diagnostics": """select d.* replace (m.pseudo as rank) from whole_diagnostics d
                          join member_pseudo m on m.rank = d.rank and m.id = d.position""",
        **{name: f"select t.* replace (p.pseudo as rank) from whole_{name} t join pseudo_ranks p using (rank)"
           for name in ("ranks", "threads", "processes")},
    }
    for name, table in tables.items():
        con.unregister(name)
        con.register(f"whole_{name}", table)
        con.execute(f"create temp view {name} as {views.get(name, f'select * from whole_{name} where false')}")
    return mapping.select("pseudo", "rank", "step")


def restore_ranks(frame: pl.DataFrame, mapping: pl.DataFrame) -> pl.DataFrame:
    """A per-pseudo-rank result with its real (rank, step) back in place of the pseudo-rank."""
    return (frame.rename({"rank": "pseudo"})
            .join(mapping, on="pseudo", how="left")
            .drop("pseudo")
            .select("rank", "step", pl.exclude("rank", "step")))


def step_counts_of(steps: pl.DataFrame) -> pl.DataFrame:
    """(rank, steps) per rank, plus rank null: the distinct steps of all ranks."""
    per_rank = steps.group_by("rank", maintain_order=True).agg(steps=pl.col("step").n_unique().cast(pl.Int64))
    overall = pl.DataFrame({"rank": [None], "steps": [steps["step"].n_unique()]},
                           schema={"rank": pl.Int32, "steps": pl.Int64})
    return pl.concat([per_rank.with_columns(pl.col("rank").cast(pl.Int32)), overall])


# ---------------------------------------------------------------------------------------------------------------
# Measures: each side's values in long form (key, rank, metric, value, samples: the per-step values)

MEASURE_SCHEMA = {"rank": pl.Int32, "metric": pl.String, "value": pl.Float64, "samples": pl.List(pl.Float64)}


def result(side: Side, name: str) -> pl.DataFrame | None:
    frame = side.results.get(name)
    return frame if frame is not None and frame.height else None


def warmup_steps_of(side: Side, count: int) -> tuple[int, ...]:
    """Step numbers left out of the verdicts: the first `count` steps of each rank (a step that is a warm-up on one
    rank is left out on all, so the all-ranks values per step add up the same steps)."""
    frames = [side.steps] + ([side.results["steps"].select(*STEP_SCHEMA)] if result(side, "steps") is not None else [])
    steps = pl.concat([f.cast(STEP_SCHEMA) for f in frames]).unique()
    first = steps.sort("rank", "step").group_by("rank", maintain_order=True).head(count)
    return tuple(sorted(set(first["step"].to_list()))) if count > 0 else ()


def steady(frame: pl.DataFrame, warmup: tuple[int, ...]) -> pl.DataFrame:
    return frame.filter(~pl.col("step").is_in(warmup))


def side_measures(con: duckdb.DuckDBPyConnection, side: Side, section: Section, warmup: tuple[int, ...]
                  ) -> pl.DataFrame:
    """One side's measures for one section: value over the capture, and the per-step values of the steady steps."""
    if section.name == "step_time":
        return step_time_measures(side, warmup)
    if section.name == "gpu_timeline":
        return timeline_measures(side, section, warmup)
    if section.name == "critical_path":
        return critical_path_measures(side, section, warmup)
    if section.name == "collectives":
        return collective_measures(con, side, section, warmup)
    source = SECTION_SOURCES[section.name]
    totals, per_step = result(side, source), side.per_step.get(source)
    if "name" in section.keys:
        totals, per_step = merged_step_ops(totals), merged_step_ops(per_step)
    return additive_measures(con, section, totals, per_step, steady(side.steps, warmup))


def merged_step_ops(frame: pl.DataFrame | None) -> pl.DataFrame | None:
    """Older traces record each `ProfilerStep#N` range as a cpu_op: one op `ProfilerStep#*` matches them across runs
    whose step numbers differ."""
    if frame is None:
        return None
    return frame.with_columns(pl.col("name").str.replace(r"^ProfilerStep#\d+$", "ProfilerStep#*"))


def empty_measures(section: Section) -> pl.DataFrame:
    return pl.DataFrame(schema={"key": section.key_type, **MEASURE_SCHEMA})


def keyed(frame: pl.DataFrame, section: Section) -> pl.DataFrame:
    return frame.with_columns(key=pl.struct(section.keys).cast(section.key_type)).drop(section.keys)


def additive_measures(con, section: Section, totals: pl.DataFrame | None, per_step: pl.DataFrame | None,
                      steps: pl.DataFrame) -> pl.DataFrame:
    """Sums of the section's additive metrics per key (per rank where the section is, and all ranks together), with
    their values in each of `steps` (queries/diff/measures.sql)."""
    metrics = [m.name for m in section.metrics if m.aggregation == "sum"]
    if totals is None:
        return empty_measures(section)

    def long(frame: pl.DataFrame, index: list[str]) -> pl.DataFrame:
        return (frame.select(*index, *section.keys, *metrics)
                .unpivot(index=[*index, *section.keys], on=metrics, variable_name="metric", value_name="value")
                .with_columns(pl.col("value").cast(pl.Float64), pl.col("rank").cast(pl.Int32)))

    values = long(totals, ["rank"])
    group = [*section.keys, "metric"]
    levels = [values.group_by(group, maintain_order=True).agg(pl.col("value").sum())
              .with_columns(rank=pl.lit(None, pl.Int32))]
    if section.per_rank:
        levels.append(values.group_by("rank", *group, maintain_order=True).agg(pl.col("value").sum()))
    totals_long = keyed(pl.concat(levels, how="diagonal"), section)
    if per_step is None or per_step.height == 0:
        # No per-step results (fewer than 2 steps, or the analysis gave nothing): no steps to fill with zeros.
        per_step_long = pl.DataFrame(schema={"key": totals_long["key"].dtype, "rank": pl.Int32, "step": pl.Int64,
                                             "metric": pl.String, "value": pl.Float64})
        steps = pl.DataFrame(schema=STEP_SCHEMA)
    else:
        per_step_long = keyed(long(per_step, ["rank", "step"]), section)
    con.register("totals", totals_long)
    con.register("step_values", per_step_long)
    con.register("steps", steps.cast(STEP_SCHEMA))
    return con.sql(catalog.load_query("diff/measures").sql).pl()


def collective_measures(con, side: Side, section: Section, warmup: tuple[int, ...]) -> pl.DataFrame:
    """Count and time of collectives per (collective, dtype, bytes, group size), and their mean bus bandwidth; per
    step, the mean bandwidth of the step's calls (a step without such a call has no value, not 0)."""
    calls = result(side, "collectives")
    if calls is None:
        return empty_measures(section)

    def per_key(frame: pl.DataFrame, index: list[str]) -> pl.DataFrame:
        return (frame.group_by(*index, *section.keys, maintain_order=True)
                .agg(count=pl.len(), time_us=pl.col("duration_us").sum()))

    per_step = side.per_step.get("collectives")
    sums = additive_measures(con, section, per_key(calls, ["rank"]),
                             per_key(per_step, ["rank", "step"]) if per_step is not None else None,
                             steady(side.steps, warmup))
    overall = [calls.group_by(section.keys, maintain_order=True).agg(value=pl.col("busbw_gbps").mean(),
                                                                     rank=pl.lit(None, pl.Int32)),
               calls.group_by("rank", *section.keys, maintain_order=True).agg(value=pl.col("busbw_gbps").mean())]
    bandwidth = pl.concat([b.select(pl.col("rank").cast(pl.Int32), *section.keys, "value") for b in overall])
    if per_step is not None:
        steps = steady(per_step, warmup)
        means = [steps.group_by("step", *section.keys, maintain_order=True)
                 .agg(pl.col("busbw_gbps").mean(), rank=pl.lit(None, pl.Int32)),
                 steps.group_by("rank", "step", *section.keys, maintain_order=True).agg(pl.col("busbw_gbps").mean())]
        samples = (pl.concat([m.select(pl.col("rank").cast(pl.Int32), "step", *section.keys, "busbw_gbps")
                              for m in means])
                   .sort("step").group_by("rank", *section.keys, maintain_order=True)
                   .agg(samples=pl.col("busbw_gbps").cast(pl.Float64)))
        bandwidth = bandwidth.join(samples, on=["rank", *section.keys], how="left", nulls_equal=True)
    else:
        bandwidth = bandwidth.with_columns(samples=pl.lit(None, pl.List(pl.Float64)))
    bandwidth = keyed(bandwidth, section).with_columns(metric=pl.lit("busbw_gbps"))
    return pl.concat([sums, bandwidth.select(sums.columns).cast(sums.schema)])


def timeline_measures(side: Side, section: Section, warmup: tuple[int, ...]) -> pl.DataFrame:
    """GPU time per category (gpu_timeline), with its per-step values from `steps`."""
    totals, steps = result(side, "gpu_timeline"), result(side, "steps")
    if totals is None:
        return empty_measures(section)
    per_step = None
    if steps is not None:
        per_step = (steps.select("rank", "step", *TIMELINE_STEP_COLUMNS.values())
                    .rename({v: k for k, v in TIMELINE_STEP_COLUMNS.items()})
                    .unpivot(index=["rank", "step"], variable_name="category", value_name="value"))
    return breakdown_measures(totals.select("rank", "category", value="time_ms"), per_step, warmup)


def critical_path_measures(side: Side, section: Section, warmup: tuple[int, ...]) -> pl.DataFrame:
    """Critical-path time per category summed over the steps, with its per-step values."""
    path = result(side, "critical_path_summary")
    if path is None:
        return empty_measures(section)
    per_step = path.select("rank", "step", "category", value="time_ms")
    return breakdown_measures(per_step.group_by("rank", "category", maintain_order=True).agg(pl.col("value").sum()),
                              per_step, warmup)


def breakdown_measures(totals: pl.DataFrame, per_step: pl.DataFrame | None, warmup: tuple[int, ...]) -> pl.DataFrame:
    """Times per (rank, category), and for all ranks, with their values in the steady steps. A category absent from
    a step counts as 0 there."""
    per_rank = totals.select(pl.col("rank").cast(pl.Int32), "category", pl.col("value").cast(pl.Float64))
    values = pl.concat([per_rank, per_rank.group_by("category", maintain_order=True).agg(pl.col("value").sum())
                       .select(pl.lit(None, pl.Int32).alias("rank"), "category", "value")])
    samples = pl.DataFrame(schema={"rank": pl.Int32, "category": pl.String, "samples": pl.List(pl.Float64)})
    if per_step is not None and per_step.height:
        filled = (per_step.with_columns(pl.col("rank").cast(pl.Int32), pl.col("value").cast(pl.Float64))
                  .pivot(on="category", index=["rank", "step"], values="value", aggregate_function="sum")
                  .with_columns(pl.exclude("rank", "step").fill_null(0.0))
                  .unpivot(index=["rank", "step"], variable_name="category", value_name="value"))
        filled = steady(filled, warmup)
        all_ranks = (filled.group_by("step", "category", maintain_order=True).agg(pl.col("value").sum())
                     .select(pl.lit(None, pl.Int32).alias("rank"), "step", "category", "value"))
        samples = (pl.concat([filled, all_ranks]).sort("step")
                   .group_by("rank", "category", maintain_order=True).agg(samples=pl.col("value")))
    return (values.join(samples, on=["rank", "category"], how="left", nulls_equal=True)
            .with_columns(key=pl.struct("category"), metric=pl.lit("time_ms"))
            .select("key", *MEASURE_SCHEMA))


def step_time_measures(side: Side, warmup: tuple[int, ...]) -> pl.DataFrame:
    """Median step time per rank and for all ranks (per step, the slowest rank), over every step, with the steady
    steps' durations as per-step values. Without steps, the GPU timeline's total time (whole trace, no per-step
    values)."""
    section = SECTIONS["step_time"]
    steps = result(side, "steps")
    if steps is not None:
        overall = (steps.group_by("step", maintain_order=True).agg(pl.col("duration_ms").max())
                   .with_columns(rank=pl.lit(None, pl.Int32)))
        frame = (pl.concat([steps.select(pl.col("rank").cast(pl.Int32), "step", "duration_ms"),
                            overall.select("rank", "step", "duration_ms")])
                 .sort("step").group_by("rank", maintain_order=True)
                 .agg(value=pl.col("duration_ms").median(),
                      samples=pl.col("duration_ms").filter(~pl.col("step").is_in(warmup)).cast(pl.Float64)))
    else:
        timeline = result(side, "gpu_timeline")
        if timeline is None:
            return empty_measures(section)
        total = timeline.filter(pl.col("category") == "total").select(pl.col("rank").cast(pl.Int32), value="time_ms")
        frame = pl.concat([total, pl.DataFrame({"rank": [None], "value": [total["value"].max()]},
                                               schema={"rank": pl.Int32, "value": pl.Float64})])
        frame = frame.with_columns(samples=pl.lit(None, pl.List(pl.Float64)))
    return frame.with_columns(key=pl.struct(measure=pl.lit("step time")), metric=pl.lit("step_time_ms")
                              ).select("key", *MEASURE_SCHEMA)


def step_basis(side: Side) -> str:
    return "median step" if result(side, "steps") is not None else "whole trace (no ProfilerStep)"


# ---------------------------------------------------------------------------------------------------------------
# The comparison


def compare(base: TraceTables | Side, cand: TraceTables | Side, alpha: float = DEFAULT_ALPHA,
            floor_percent: float = DEFAULT_FLOOR_PERCENT, warmup_steps: int = DEFAULT_WARMUP_STEPS,
            labels: tuple[str, str] = ("base", "cand")) -> DiffResult:
    """Compare a baseline and a candidate run (tables, or sides already summarised).

    A measure is slower/faster when the 1 − `alpha` confidence interval of its per-step shift excludes 0 and the
    shift exceeds `floor_percent` of its per-step value; the first `warmup_steps` steps of each run are left out of
    that comparison. See tracekit/verdicts.py for the rule.
    """
    base = base if isinstance(base, Side) else summarize(base, labels[0])
    cand = cand if isinstance(cand, Side) else summarize(cand, labels[1])
    settings = Settings(alpha, floor_percent, warmup_steps)
    warmup = {"base": warmup_steps_of(base, warmup_steps), "cand": warmup_steps_of(cand, warmup_steps)}
    # One thread for the comparison of the two summaries (small frames): float sums then add up in one order, so a
    # run gives the same bits every time.
    with connection.connect(threads=1) as con:
        con.register("coverage", coverage(base, cand))
        compared = {name: compare_section(con, section, {"base": base, "cand": cand}, warmup, settings)
                    for name, section in SECTIONS.items()}
    measures = pl.concat([long_form(section, compared[name]) for name, section in SECTIONS.items()])
    sections = {name: wide_form(section, compared[name], attributes(section, base, cand))
                for name, section in SECTIONS.items()}
    return DiffResult(base.label, cand.label, sections, measures, settings,
                      tuple((s.label, step_basis(s)) for s in (base, cand)), diff_notes(base, cand, measures),
                      ((base.label, warmup["base"]), (cand.label, warmup["cand"])))


def coverage(base: Side, cand: Side) -> pl.DataFrame:
    """Per rank (and null: all ranks), the factor that scales the candidate's totals to the baseline's step count
    (1 unless both sides hold steps and their counts differ)."""
    if result(base, "steps") is None or result(cand, "steps") is None:
        return pl.DataFrame(schema={"rank": pl.Int32, "scale": pl.Float64})
    counts = [step_counts_of(s.results["steps"]) for s in (base, cand)]
    return (counts[0].join(counts[1], on="rank", nulls_equal=True, suffix="_cand")
            .select("rank", scale=pl.col("steps") / pl.col("steps_cand")))


def compare_section(con, section: Section, sides: dict[str, Side], warmup: dict[str, tuple[int, ...]],
                    settings: Settings) -> pl.DataFrame:
    for name, side in sides.items():
        frame = side_measures(con, side, section, warmup[name])
        con.register(f"{name}_measures", frame.with_columns(pl.col("key").cast(section.key_type)))
    con.register("metric_specs", pl.DataFrame([vars(m) for m in section.metrics],
                                              schema={"name": pl.String, "direction": pl.Int32,
                                                      "aggregation": pl.String, "abs_floor": pl.Float64})
                 .rename({"name": "metric"}))
    matched = con.sql(catalog.load_query("diff/compare").sql).pl()
    return mark_deciders(section, judged(matched, settings))


def judged(matched: pl.DataFrame, settings: Settings) -> pl.DataFrame:
    """The matched measures with the per-step shift, its confidence interval, the rank test's p-value and the
    verdict (tracekit/verdicts.py); the floor is floor_percent of the larger per-step median, at least abs_floor."""
    # A step without a value (a collective of unknown size has no bandwidth) is no sample.
    matched = matched.with_columns(pl.col("base_samples", "cand_samples").list.drop_nulls())
    stats = verdicts.shift_tests(matched["base_samples"].to_list(), matched["cand_samples"].to_list(), settings.alpha)
    floor = pl.max_horizontal(settings.floor_percent / 100 * pl.max_horizontal(
        pl.col("base_samples").list.median().abs(), pl.col("cand_samples").list.median().abs()), pl.col("abs_floor"))
    return (pl.concat([matched, stats], how="horizontal")
            .with_columns(verdict=verdicts.verdict(pl.col("direction"), floor))
            .drop("base_samples", "cand_samples", "direction", "abs_floor"))


def mark_deciders(section: Section, compared: pl.DataFrame) -> pl.DataFrame:
    """Flag, per (key, rank), the metric that decides the row: among `section.deciders` with a significant verdict
    the one with the largest |delta| in ms (an added op is decided by its CPU time when it launches nothing), else
    the first of them."""
    priority = {name: i for i, name in enumerate(section.deciders)}
    to_ms = {m.name: m.to_ms or 1.0 for m in section.metrics}
    ranked = compared.with_columns(
        priority=pl.col("metric").replace_strict(priority, default=None, return_dtype=pl.Int32),
        significant=pl.col("verdict").is_in(SIGNIFICANT).fill_null(False)
    ).with_columns(change=pl.when("significant").then(
        (pl.col("delta") * pl.col("metric").replace_strict(to_ms, return_dtype=pl.Float64)).abs()))
    candidates = ranked.filter(pl.col("priority").is_not_null()).with_row_index("row")
    chosen = (candidates.sort(["significant", "change", "priority"], descending=[True, True, False], nulls_last=True)
              .group_by("key", "rank", maintain_order=True).first().select("row"))
    chosen_rows = candidates.join(chosen, on="row", how="semi").select("key", "rank", "metric", decides=pl.lit(True))
    return (ranked.drop("priority", "significant", "change")
            .join(chosen_rows, on=["key", "rank", "metric"], how="left", nulls_equal=True)
            .with_columns(pl.col("decides").fill_null(False)))


def long_form(section: Section, compared: pl.DataFrame) -> pl.DataFrame:
    to_ms = {m.name: m.to_ms for m in section.metrics}
    item = pl.concat_str([pl.col("key").struct.field(k) for k in section.keys], separator=" ", ignore_nulls=True)
    return compared.select(
        section=pl.lit(section.name), item=item, rank=pl.col("rank").cast(pl.Int32), metric="metric",
        base="base", cand="cand", delta="delta", percent_delta="percent_delta", effect="effect", ci_low="ci_low",
        ci_high="ci_high", p_value="p_value", level="level", n_base="n_base", n_cand="n_cand", verdict="verdict",
        decides="decides", to_ms=pl.col("metric").replace_strict(to_ms, default=None, return_dtype=pl.Float64))


VALUE_COLUMNS = ("base", "cand", "delta", "percent_delta", *EFFECT_COLUMNS, "p_value", "verdict")
JUDGED_COLUMNS = (*EFFECT_COLUMNS, "p_value", "verdict")  # absent for measures without a better direction (counts)


def wide_columns(section: Section) -> dict[str, pl.DataType]:
    """Every column of a section's wide frame, in order, with its type."""
    columns = {**section.key_types, "rank": pl.Int32, **{a: pl.String for a in section.attributes},
               "verdict": pl.String, "verdict_on": pl.String}
    for m in section.metrics:
        for v in VALUE_COLUMNS:
            if not (v in JUDGED_COLUMNS and m.direction == 0):
                columns[f"{v}_{m.name}"] = pl.String if v == "verdict" else pl.Float64
    if not section.per_rank:
        del columns["rank"]
    return columns


def attributes(section: Section, base: Side, cand: Side) -> pl.DataFrame | None:
    """The section's descriptive columns per key, from the candidate where it has the key, else the baseline."""
    source = SECTION_SOURCES.get(section.name)
    if not section.attributes or source is None:
        return None
    frames = [(merged_step_ops(f) if "name" in section.keys else f).select(*section.keys, *section.attributes)
              for f in (result(cand, source), result(base, source)) if f is not None]
    if not frames:
        return None
    return pl.concat(frames).unique(section.keys, keep="first", maintain_order=True).cast(section.key_types)


def wide_form(section: Section, compared: pl.DataFrame, attrs: pl.DataFrame | None) -> pl.DataFrame:
    """One row per (key, rank): base_m, cand_m, delta_m, percent_delta_m, effect_m, ci_low_m, ci_high_m, p_value_m,
    verdict_m per metric m, then the deciding verdict; significant rows first, then by |delta| (in ms) of the deciding
    metric."""
    columns = wide_columns(section)
    index = [*section.keys, "rank"]
    frame = compared.with_columns(pl.col("key").struct.unnest())
    if frame.height == 0:
        return pl.DataFrame(schema=columns)
    wide = frame.pivot(on="metric", index=index, values=list(VALUE_COLUMNS))
    to_ms = {m.name: m.to_ms or 1.0 for m in section.metrics}
    decided = frame.filter(pl.col("decides")).select(
        *index, verdict="verdict", verdict_on="metric",
        change=pl.col("delta").abs() * pl.col("metric").replace_strict(to_ms, return_dtype=pl.Float64))
    out = wide.join(decided, on=index, how="left", nulls_equal=True)
    if attrs is not None:
        out = out.join(attrs, on=list(section.keys), how="left", nulls_equal=True)
    return (out.with_columns(significant=pl.col("verdict").is_in(SIGNIFICANT).fill_null(False),
                             *(pl.lit(None, t).alias(c) for c, t in columns.items() if c not in out.columns))
            .sort(["significant", "change", *index], descending=[True, True] + [False] * len(index), nulls_last=True)
            .select(pl.col(c).cast(t) for c, t in columns.items()))


def diff_notes(base: Side, cand: Side, measures: pl.DataFrame) -> tuple[str, ...]:
    notes = []
    for name, reason in {**cand.failures, **base.failures}.items():
        notes.append(f"not compared: analysis {name} gave nothing ({reason})")
    if step_basis(base) != step_basis(cand):
        notes.append(f"step time is the {step_basis(base)} on {base.label} but the {step_basis(cand)} on {cand.label}")
    kernels = measures.filter((pl.col("section") == "kernels") & (pl.col("metric") == "total_us")
                              & pl.col("rank").is_null())
    total = kernels.select(pl.col("base").fill_null(0).sum() + pl.col("cand").fill_null(0).sum()).item()
    matched = kernels.filter(pl.col("base").is_not_null() & pl.col("cand").is_not_null()).select(
        pl.col("base").sum() + pl.col("cand").sum()).item()
    if total and (matched or 0) < 0.5 * total:
        notes.append(f"kernel names mostly differ between the runs ({100 * (matched or 0) / total:.0f}% of kernel time "
                     "on names found on both sides): compare ops and categories, not kernels")
    return tuple(notes)


# ---------------------------------------------------------------------------------------------------------------
# Workbook


def write_workbook(result: DiffResult, path: Path, force: bool = False) -> list[str]:
    """Write the comparison workbook laid out by reports/diff.toml to `path` (an existing file only with `force`);
    return the writer's notes (a column a section lacks, a sheet cut at Excel's row limit)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: is a directory (give the workbook's file name, e.g. diff.xlsx)")
    if path.exists() and not force:
        raise InputError(f"{path}: exists (use --force to replace it)")
    if not path.parent.is_dir():
        raise InputError(f"{path.parent}: no such directory")
    problems: list[str] = []
    sheets = report.sheets_for(report.workbook_spec("diff"), result.workbook_frames(), {}, problems)
    with replacing_file(path) as temp:
        problems += xlsx.write_workbook(temp, sheets, report.style())
    return problems


# ---------------------------------------------------------------------------------------------------------------
# Terminal view

METRIC_LABELS = {"direct_kernel_ms": "kernel", "total_us": "kernel", "self_cpu_ms": "self cpu", "time_us": "time",
                 "time_ms": "time", "busbw_gbps": "busbw"}
VERDICT_STYLES = {"slower": "red", "faster": "green", "added": "yellow", "removed": "cyan", "unchanged": "dim",
                  verdicts.NOT_ENOUGH: "magenta"}


def styled(verdict: str | None) -> str:
    return f"[{VERDICT_STYLES.get(verdict, '')}]{verdict}[/]" if verdict else ""


def signed(value: float | None, digits: int = 2, suffix: str = "") -> str:
    return "" if value is None else f"{value:+,.{digits}f}{suffix}"


def interval_text(row: dict, unit: str = "_ms") -> str:
    """The per-step shift and its confidence interval: "+1.234 [+0.500, +2.000]"."""
    effect, low, high = (row.get(f"{c}{unit}") for c in EFFECT_COLUMNS)
    if effect is None:
        return ""
    return f"{effect:+,.3f}" + ("" if low is None else f" [{low:+,.3f}, {high:+,.3f}]")


def shift_text(head: dict) -> str:
    """The headline's per-step comparison: shift, CI at its exact level, p-value and steps compared."""
    steps = f"{head['n_base'] or 0} vs {head['n_cand'] or 0} steps"
    if head["ci_low"] is None:
        return f"per step: no interval at this level ({steps})"
    return (f"per step {signed(head['effect'])} ms, {100 * head['level']:.1f}% CI [{signed(head['ci_low'])}, "
            f"{signed(head['ci_high'])}] (p={head['p_value']:.2g}, {steps})")


def print_summary(result: DiffResult, console, top: int = 15) -> None:
    """The headline (step time A → B), the GPU time breakdown and the largest changes, as rich text and a table."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    console.print(f"[bold]{result.base_label}[/] → [bold]{result.cand_label}[/]")
    try:
        head = result.headline()
    except LookupError:
        console.print("step time: not in both runs (no ProfilerStep and no GPU timeline on a side)")
    else:
        values = " → ".join("-" if v is None else f"{v:,.2f} ms" for v in (head["base"], head["cand"]))
        console.print(f"step time (all ranks): {values}  Δ {signed(head['delta'])} ms "
                      f"({signed(head['percent_delta'], 1, '%')})  {shift_text(head)}  {styled(head['verdict'])}")
    if result.warmup_text():
        console.print(f"warm-up steps left out of the verdicts: {result.warmup_text()} (--warmup-steps 0 keeps them)")
    timeline = result.sections["gpu_timeline"].filter(
        pl.col("rank").is_null() & pl.col("category").is_in(["busy", "idle", "computation", "communication", "memcpy",
                                                              "exposed_communication", "exposed_memcpy"])
        & ((pl.col("base_time_ms").fill_null(0) > 0) | (pl.col("cand_time_ms").fill_null(0) > 0)))
    if timeline.height:
        parts = [f"{r['category']} {r['base_time_ms'] or 0:,.1f} → {r['cand_time_ms'] or 0:,.1f} ms "
                 f"{styled(r['verdict'])}"
                 for r in timeline.iter_rows(named=True)]
        console.print("GPU time (all ranks): " + "; ".join(parts))
    sections = TOP_CHANGE_SECTIONS
    if any(n.startswith("kernel names mostly differ") for n in result.notes):
        sections = ("ops", "categories", "collectives")
    changes = result.top_changes(top, sections)
    if changes.height == 0:
        console.print(f"no significant change among {', '.join(sections)}")
    else:
        table = Table(title=f"top changes ({', '.join(sections)}; all ranks)", title_justify="left", box=box.SIMPLE)
        table.add_column("item", overflow="fold", ratio=1)
        for name in ("base → cand ms", "Δ ms (Δ %)", "per step Δ ms [CI]"):
            table.add_column(name, justify="right", no_wrap=True)
        table.add_column("verdict", no_wrap=True)
        for r in changes.iter_rows(named=True):
            item = r["item"] if len(r["item"]) <= 100 else r["item"][:97] + "..."
            values = " → ".join("-" if v is None else f"{v:,.3f}" for v in (r["base_ms"], r["cand_ms"]))
            percent = "" if r["percent_delta"] is None else f" ({r['percent_delta']:+.1f}%)"
            label = METRIC_LABELS.get(r["metric"], r["metric"])
            table.add_row(f"[dim]{r['section']}[/] {escape(item)} [dim]({label})[/]",
                          values, f"{r['delta_ms']:+,.3f}{percent}", interval_text(r), styled(r["verdict"]))
        console.print(table)
    for note in result.notes:
        console.print(f"note: {note}")
