"""The split a cluster relies on: an analysis not marked `scope: across ranks` gives, for each rank, rows that depend
on that rank's tables only, in rank order; so its result over a set of files is its results over each file, joined
(`analyses.combine_ranks`). The oracle is the analysis run once over every file together."""

from __future__ import annotations

import warnings

import polars as pl
import pytest

import tracekit
from tests.conftest import shared_trace
from tracekit.engine import catalog
from tracekit.query import analyses


def check_split(files, bad_files=()):
    """BAD_FILES give no rank: read with the others they are left out with a note about no rank, which no rank's
    rows may depend on (a cluster reads them apart)."""
    names = catalog.available()
    whole_failures: dict[str, str] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracekit.LeftOutFileWarning)
        whole = analyses.run_all(tracekit.load([*files, *bad_files]), names, whole_failures)
    parts = [analyses.run_all(tracekit.load([f]), names, {}) for f in files]
    combined = analyses.combine_ranks(parts)
    per_rank = [n for n in names if not catalog.across_ranks(n)]
    assert len(per_rank) > 20 and not whole_failures
    for name in per_rank:
        assert "rank" in whole[name].columns, f"{name}: per-rank analysis without a rank column"
        assert combined[name].equals(whole[name]), f"{name}: per-file results joined differ from one run over all"
    return whole


def test_every_per_rank_analysis_splits_by_file_on_a_synthetic_job(tmp_path):
    tracekit.synth.generate(tmp_path, 3, 3, 0)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "rank9.json").write_text('{"traceEvents": 7}')
    whole = check_split(sorted(tmp_path.glob("rank*.json")), [tmp_path / "bad" / "rank9.json"])
    assert whole["diagnostics_reasons"].filter(reason="file_unreadable")["entries"].to_list() == [1]
    assert whole["collectives"].height > 0  # the job has collectives: their split is exercised


def test_every_per_rank_analysis_splits_by_file_on_the_dlrm_ranks():
    files = sorted(shared_trace("multirank/dlrm_8ranks_v100").glob("worker*.json*"))
    assert len(files) == 8
    check_split(files)


@pytest.mark.parametrize("name", [n for n in catalog.available() if catalog.across_ranks(n)])
def test_a_cross_rank_analysis_reads_per_rank_results_only(name):
    """What runs where the ranks meet reads only small per-rank results: per-rank analyses, `ranks` and the notes."""
    for step in [s for s in catalog.analysis_order(name) if catalog.across_ranks(s)]:
        for table in catalog.load_query(step).inputs:
            if table in tracekit.TraceTables.names():
                assert table in ("ranks", "diagnostics"), f"{step} reads the {table} table"
            else:
                assert table in catalog.analysis_order(name), table


def test_a_query_marked_per_rank_that_combines_ranks_is_caught(tmp_path, monkeypatch):
    """The split test can fail: step_compare (one row per step over all ranks) passed off as per rank is caught."""
    tracekit.synth.generate(tmp_path, 2, 3, 0)
    files = sorted(tmp_path.glob("rank*.json"))
    whole = analyses.run_all(tracekit.load(files), ["step_compare"], {})
    parts = analyses.combine_ranks([analyses.run_all(tracekit.load([f]), ["step_compare"], {}) for f in files])
    assert not parts["step_compare"].equals(whole["step_compare"])
    assert pl.Series(whole["step_compare"]["ranks"]).max() == 2
