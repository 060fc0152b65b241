"""`tracekit diff` fits its table to the terminal like the other commands (`frames.shorten`: names shortened in the
middle, distinct names kept distinct), `--wide` prints them whole, and neither changes the JSON or the workbook."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tracekit import synth

NARROW = 120


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A synthetic pair whose slowed kernels have long names alike but for a part in the middle."""
    root = tmp_path_factory.mktemp("diff_width")
    synth.generate(root / "base", ranks=1, steps=6, noise=0.05, noise_seed=1)
    synth.generate(root / "slow", ranks=1, steps=6, noise=0.05, noise_seed=2, slow_kernels={"elementwise": 1.5})
    return root


def diff(runs, columns: int, *extra: str) -> str:
    """The command's standard output in a terminal `columns` wide (a subprocess: the consoles read COLUMNS once)."""
    result = subprocess.run([sys.executable, "-m", "tracekit.cli", "diff", str(runs / "base"), str(runs / "slow"),
                             "--top", "25", *extra], capture_output=True, text=True, cwd=REPO, timeout=300,
                            env={**os.environ, "COLUMNS": str(columns)}, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def document(runs) -> str:
    """The JSON in a terminal NARROW wide."""
    return diff(runs, NARROW, "--format", "json")


@pytest.fixture(scope="module")
def narrow(runs) -> tuple[str, bytes]:
    """The table in a terminal NARROW wide, and the workbook the same run writes."""
    text = diff(runs, NARROW, "-o", str(runs / "narrow.xlsx"))
    return text, (runs / "narrow.xlsx").read_bytes()


def top_items(document: str) -> list[str]:
    """The top changes' items whole, from the JSON (which the table's width never touches)."""
    return [c["item"] for c in json.loads(document)["changes"]]


def table_items(text: str) -> list[str]:
    """The item cells of the top-changes table: `section name (label)` less the section and label."""
    rows = [line.strip() for line in text.splitlines() if line.startswith(("  ops ", "  kernels ", "  collectives "))]
    return [row.split(" ", 1)[1].split("   ")[0].rsplit(" (", 1)[0] for row in rows]


def test_long_names_alike_but_in_the_middle_stay_distinct_in_a_narrow_terminal(narrow, document):
    whole = top_items(document)
    elementwise = [n for n in whole if n.startswith("void at::native::vectorized_elementwise_kernel<4, ")]
    assert len(set(elementwise)) >= 2 and min(map(len, elementwise)) > NARROW, "the pair has no such names"
    text = narrow[0]
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("top changes"))
    table = lines[start:lines.index("names shortened to the terminal's width (--wide prints them whole)")]
    assert len(table) > 5
    assert all(len(line) <= NARROW for line in table)
    shown = table_items(text)
    assert len(shown) == len(whole) and len(set(shown)) == len(set(whole))
    assert all(s == n if len(n) <= len(s) else "…" in s for s, n in zip(shown, whole))


def test_wide_prints_names_whole(runs, document):
    text = diff(runs, NARROW, "--wide")
    assert table_items(text) == top_items(document)
    assert "--wide" not in text


def test_width_changes_neither_the_json_nor_the_workbook(runs, document, narrow, tmp_path):
    # JSON and workbook from one run (with -o, JSON's "wrote" goes to standard error): against the NARROW ones
    wide = diff(runs, 300, "--format", "json", "--wide", "-o", str(tmp_path / "wide.xlsx"))
    assert wide == document
    assert (tmp_path / "wide.xlsx").read_bytes() == narrow[1]
