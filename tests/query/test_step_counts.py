"""One definition of a step and of the steady steps, whoever counts them: the Overview (rank_info), the step
statistics (step_stats), the Steps sheet (`steps.steady`) and the diff's verdicts agree on every shared trace."""

import polars as pl
import pytest

from tests.conftest import all_kineto_traces, trace_id
from tracekit import diff
from tracekit.diff.sections import SECTIONS
from tracekit.query import analyses


@pytest.mark.parametrize("path", all_kineto_traces(), ids=trace_id)
def test_overview_step_statistics_steps_sheet_and_diff_count_the_same_steps(path, loaded_trace):
    tables = loaded_trace(path)
    # on one connection, as the report runs them (the step macros computed once, not once per query)
    got = analyses.run_all(tables, ["rank_info", "step_stats", "steps"])
    overview = got["rank_info"].select("rank", "steps", "step_median_ms").sort("rank")
    stats = got["step_stats"].filter(pl.col("metric") == "duration_ms").select("rank", "steps", "median",
                                                                               "steps_left_out")
    steps = got["steps"].select("rank", "step", "duration_ms", "steady")
    # recomputed from the Steps sheet's rows: its steady steps and their median, per rank
    from_sheet = (steps.group_by("rank")
                  .agg(steps=pl.col("steady").sum().cast(pl.Int64),
                       median=pl.col("duration_ms").filter(pl.col("steady")).median(),
                       left_out=(~pl.col("steady")).sum().cast(pl.Int64))
                  .sort("rank"))
    counted = overview.filter(pl.col("steps").is_not_null())
    assert counted["rank"].to_list() == from_sheet["rank"].to_list()
    assert counted["steps"].to_list() == from_sheet["steps"].to_list() == stats.sort("rank")["steps"].to_list()
    assert stats.sort("rank")["steps_left_out"].to_list() == from_sheet["left_out"].to_list()
    assert counted["step_median_ms"].to_list() == pytest.approx(from_sheet["median"].to_list(), rel=1e-12)
    if steps.height == 0 or tables.ranks.num_rows != 1:
        return
    # the diff leaves out exactly the steps the sheet marks not steady, and its headline is the Overview's median
    # the step-time section alone: the headline and the steps left out are its, and the other sections cost ~3×
    step_time = {"step_time": SECTIONS["step_time"]}
    side = diff.summarize(tables, "side", sections=step_time)
    result = diff.compare(side, side, sections=step_time)
    assert sorted(result.warmup[0][1]) == sorted(steps.filter(~pl.col("steady"))["step"].to_list())
    head = result.headline()
    assert head["n_base"] == from_sheet["steps"][0]
    assert head["base"] == pytest.approx(from_sheet["median"][0], rel=1e-9)
