"""One definition of a step: `run --step`, `db.scoped(step=)`, the `step_events` macro of `sql`, `graph --step`,
the diff's per-step noise and the report's Steps sheet all select the events of step N that tests/step_oracle.py
finds from the tables in polars."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import polars as pl
import pytest
from click.testing import CliRunner, Result

import tracekit
from tests.conftest import shared_trace
from tests.support import step_oracle
from tracekit import diff
from tracekit.cli import main
from tracekit.engine import catalog
from tracekit.query import analyses, step_scope

CASES = [
    # legacy traces: ProfilerStep#N as a cpu_op
    ("diff_pairs/resnet50_v100_workers0_vs_workers4/workers0.pt.trace.json.gz", 7),
    # the first step holds GPU work queued before the window (no launch call); CUDA graphs
    ("nvidia/a100_trainer_rank0of16_cudagraph.json.gz", 550),
    ("nvidia/a100_trainer_rank0of16_cudagraph.json.gz", 552),
    # GPU-side ProfilerStep annotations; the GPU ~2 steps behind the CPU; work queued before the window
    ("amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz", 15),
]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0].rsplit('/', 1)[-1]}-step{c[1]}")
def case(request):
    trace, step = request.param
    path = shared_trace(trace)
    tables = tracekit.load(path)
    events, edges = tables.polars("events"), tables.polars("edges")
    members = step_oracle.step_members(events, edges)
    expected = members.filter(pl.col("step") == step).select("rank", "id")
    assert expected.height > 0
    chosen = events.with_columns(pl.col("rank").cast(pl.Int64)).join(expected, on=["rank", "id"])
    return path, step, tables, members, expected, chosen


def keys(frame: pl.DataFrame) -> set[tuple[int, int]]:
    return set(zip(frame["rank"].cast(pl.Int64).to_list(), frame["id"].to_list()))


def run_cli(*args: str) -> Result:
    """The command in this process (what is checked is the command's output, not the process)."""
    return CliRunner().invoke(main, list(args))


def counts(frame: pl.DataFrame, name: str, count: str | None = None) -> dict[str, int]:
    agg = pl.len() if count is None else pl.col(count).sum()
    return dict(frame.group_by(name).agg(agg.cast(pl.Int64).alias("n")).iter_rows())


def test_sql_macro_and_scoped_database_select_the_step(case):
    path, step, tables, _, expected, _ = case
    with tracekit.from_tables(tables) as db:
        assert keys(db.sql(f"select rank, id from step_events({step})")) == keys(expected)
        with db.scoped(step=step) as part:
            assert keys(part.table("events")) == keys(expected)


def only_cpu_ops(ops: pl.DataFrame, tables) -> pl.DataFrame:
    """The rows of cpu_ops (the op sheets also hold the GPU time no cpu_op owns, whose count is not of cpu_ops)."""
    names = tables.polars("events").filter(pl.col("kind") == "cpu_op")["name"].unique()
    return ops.filter(pl.col("name").is_in(names.implode()) & (pl.col("category") != "unowned"))


def test_run_step_counts_the_step_events(case, tmp_path):
    path, step, tables, _, _, chosen = case
    for analysis, name, kinds, count in (("op_summary", "name", ["cpu_op"], "count"),
                                         ("kernel_summary", "kernel_name", step_oracle.GPU_KINDS, "count")):
        out = tmp_path / f"{analysis}.json"
        result = run_cli("run", analysis, str(path), "--step", str(step), "--format", "json", "-o", str(out))
        assert result.exit_code == 0, result.output
        got = only_cpu_ops(pl.DataFrame(json.loads(out.read_text())), tables) if analysis == "op_summary" else \
            pl.DataFrame(json.loads(out.read_text()))
        assert counts(got, name, count) == counts(chosen.filter(pl.col("kind").is_in(kinds)), "name"), analysis


def test_graph_step_holds_the_step_events(case, tmp_path):
    path, step, _, _, expected, _ = case
    out = tmp_path / "step.graphml"
    result = run_cli("graph", str(path), "--step", str(step), "-o", str(out))
    assert result.exit_code == 0, result.output
    ns = {"g": "http://graphml.graphdrawing.org/xmlns"}
    nodes = {n.get("id") for n in ET.parse(out).getroot().findall(".//g:node", ns)}
    assert nodes == {f"r{r}e{i}" for r, i in keys(expected)}


def test_diff_per_step_noise_uses_the_step_events(case):
    _, step, tables, _, _, chosen = case
    failures: dict[str, str] = {}
    per_step, _ = diff.per_step_results(tables, ["kernel_summary", "op_by_shape"], failures)
    assert not failures
    kernels = per_step["kernel_summary"].filter(pl.col("step") == step)
    ops = only_cpu_ops(per_step["op_by_shape"].filter(pl.col("step") == step), tables)
    assert counts(kernels, "kernel_name", "count") == counts(
        chosen.filter(pl.col("kind").is_in(step_oracle.GPU_KINDS)), "name")
    assert counts(ops, "name", "count") == counts(chosen.filter(pl.col("kind") == "cpu_op"), "name")


def test_report_steps_sheet_has_the_step_windows(case):
    _, step, tables, _, _, _ = case
    want = step_oracle.step_windows(tables.polars("events"), tables.polars("edges")).filter(pl.col("step") == step)
    got = analyses.run(tables, "steps").filter(pl.col("step") == step)  # the report's Steps sheet
    assert sorted(got.select("rank", "start_ns", "end_ns", "gpu_start_ns", "gpu_end_ns").rows()) == sorted(
        want.select("rank", "start", "end", "gpu_start", "gpu_end").rows())


def test_every_event_is_in_one_step_at_most(case):
    _, _, tables, members, _, _ = case
    with tracekit.from_tables(tables) as db:
        got = db.sql("select rank, id, step from step_members()")
    assert got.height == got.unique(["rank", "id"]).height
    assert set(got.select(pl.col("rank").cast(pl.Int64), "id", "step").rows()) == set(members.rows())


def test_step_members_of_a_rank_with_steps_beside_one_without():
    """step_members() reads only the events of ranks that have steps (its as-of joins sorted every event of a
    serving rank for nothing): with a training rank and a serving rank (no ProfilerStep) as ranks of one input,
    the training rank's members are the oracle's and the serving rank has none."""
    training = shared_trace("nvidia/h100_qwen1.5-0.5b.json.gz")
    serving = shared_trace("amd/mi300x_vllm_decode_graph_capture.json.gz")
    tables = tracekit.load([training, serving], as_ranks=True)
    events, edges = tables.polars("events"), tables.polars("edges")
    expected = step_oracle.step_members(events, edges)
    assert expected["rank"].n_unique() == 1 and expected.height > 0  # one rank has steps, the other none
    got = tables.sql("select rank, id, step from step_members()")
    assert set(zip(got["rank"].cast(pl.Int64), got["id"], got["step"])) == set(
        zip(expected["rank"].cast(pl.Int64), expected["id"], expected["step"]))


@pytest.mark.parametrize("traces", [["nvidia/h100_qwen1.5-0.5b.json.gz", "nvidia/a100_triton_cuLaunchKernel.json.gz"],
                                    [CASES[0][0]]], ids=["two ranks of one step", "one rank of several"])
def test_every_step_is_scoped_only_where_a_rank_holds_min_steps(traces):
    """with_every_step declines (None) unless some rank holds `min_steps` steps, and then scopes every step of
    every rank (the oracle's windows). Two ranks of one step each with different step numbers (H100 Qwen's
    ProfilerStep#6, the A100 Triton trace's #1) hold two step numbers in all but no rank of two."""
    tables = tracekit.load([shared_trace(t) for t in traces], as_ranks=True)
    windows = step_oracle.step_windows(tables.polars("events"), tables.polars("edges"))
    most = windows.group_by("rank").len()["len"].max()
    assert (most, windows["step"].n_unique()) == ((1, 2) if len(traces) == 2 else (windows.height, windows.height))
    with catalog.connect(tables, materialize=True) as con:
        scoped = step_scope.with_every_step(con, tables, rows=False, min_steps=most)
        assert step_scope.with_every_step(con, tables, rows=False, min_steps=most + 1) is None
    assert sorted(scoped[1].select(pl.col("rank").cast(pl.Int64), "step").rows()) == sorted(
        windows.select(pl.col("rank").cast(pl.Int64), "step").rows())
