"""CSV and JSON results write numbers at the precision of the data: a time in ms made from int64 ns is the exact
decimal (6 places), not 12.508999999999999; other floats keep 12 significant digits; Parquet keeps the doubles."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from decimal import Decimal

import pyarrow.compute as pc
import pytest

import tracekit
from tests.conftest import REPO
from tracekit import synth

QUERY = ("select kind, sum(dur) / 1e6 as total_ms, avg(dur) / 1e3 as mean_us, sum(dur) / 1e9 as total_s, "
         "100.0 * sum(dur) / (select sum(dur) from events) as percent from events where dur is not null "
         "group by kind order by kind")


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    root = tmp_path_factory.mktemp("precision")
    synth.generate(root, ranks=1, steps=2, seed=11, noise=0.3)  # noise: durations that are not round numbers
    return root / "rank0.json"


def exact_sums(trace) -> dict[str, tuple[int, int]]:
    """(sum of dur in ns, count) per kind, from the Arrow table with integers only: the oracle."""
    events = tracekit.load(trace).events
    sums = {}
    for kind in set(events.column("kind").to_pylist()):
        dur = events.filter(pc.equal(events.column("kind"), kind)).column("dur").drop_null()
        if len(dur):
            sums[kind] = (pc.sum(dur).as_py(), len(dur))
    return sums


def run(trace, fmt: str) -> str:
    result = subprocess.run([sys.executable, "-m", "tracekit.cli", "sql", QUERY, str(trace), "--format", fmt],
                            capture_output=True, text=True, cwd=REPO, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_csv_and_json_hold_the_exact_decimals(trace):
    sums = exact_sums(trace)
    total = sum(s for s, _ in sums.values())
    rows_csv = list(csv.DictReader(io.StringIO(run(trace, "csv"))))
    rows_json = json.loads(run(trace, "json"))
    assert [r["kind"] for r in rows_csv] == sorted(sums)
    for text_row, json_row in zip(rows_csv, rows_json):
        ns, count = sums[text_row["kind"]]
        assert Decimal(text_row["total_ms"]) == Decimal(ns) / 10**6  # exact: ns in ms has 6 decimals
        assert Decimal(text_row["total_s"]) == Decimal(ns) / 10**9
        assert Decimal(text_row["mean_us"]) == round(Decimal(ns) / count / 1000, 3)
        percent = Decimal(100) * ns / total
        assert len(text_row["percent"].replace(".", "").lstrip("0")) <= 12
        assert abs(Decimal(text_row["percent"]) - percent) <= Decimal(10) ** (percent.adjusted() - 11)
        assert json_row["total_ms"] == float(text_row["total_ms"]) and json_row["percent"] == float(text_row["percent"])
    assert any(len(r["total_ms"].partition(".")[2]) > 3 for r in rows_csv), "the check saw fractional ms"
