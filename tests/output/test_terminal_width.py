"""Terminal tables fit the terminal's width, and shortening keeps distinct names distinct (two kernels that differ
in a template argument never print the same); `--wide` prints names whole."""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import sys

import polars as pl
import pytest

from tests.conftest import REPO, shared_trace
from tracekit.output.frames import shorten

KERNEL = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<at::native::{op}<{t}>>"
          "(at::TensorIteratorBase&)::{{lambda(int)#1}}>(int, at::native::gpu_kernel_impl<{tail}>)")


def family() -> list[str]:
    """Long names alike but for a part in the middle, at the start or at the end."""
    names = [KERNEL.format(op=op, t=t, tail=tail) for op, t, tail in itertools.product(
        ("AddFunctor", "MulFunctor", "CUDAFunctor_add"), ("float", "c10::BFloat16", "c10::Half"), ("a", "b"))]
    rng = random.Random(7)
    names += ["x" * n + rng.choice("ab") * 3 + "y" * (200 - n) for n in range(0, 200, 7)]
    return sorted(set(names))


@pytest.mark.parametrize("width", [8, 12, 20, 30, 48, 80, 120])
def test_shortened_names_fit_and_stay_distinct(width):
    names = family()
    shown = shorten(names, width)
    assert all(len(s) <= width for s in shown)
    assert len(set(shown)) == len(names), "two different names print the same"
    for name, s in zip(names, shown):
        assert s == name if len(name) <= width else "…" in s


def test_short_names_are_left_alone_and_a_cut_keeps_both_ends():
    assert shorten(["aten::mm", "aten::addmm"], 20) == ["aten::mm", "aten::addmm"]
    [cut] = shorten(["a" * 30 + "MIDDLE" + "z" * 30], 21)
    assert cut.startswith("a" * 10) and cut.endswith("z" * 10) and len(cut) == 21


def run_sql(query: str, trace, columns: int, *extra: str) -> str:
    env = {**os.environ, "COLUMNS": str(columns)}
    result = subprocess.run([sys.executable, "-m", "tracekit.cli", "sql", query, str(trace), "-n", "1000", *extra],
                            capture_output=True, text=True, env=env, cwd=REPO, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def table_cells(text: str, column: int) -> list[str]:
    rows = [line for line in text.splitlines() if line.startswith("│")]
    return [row.split("│")[column].strip() for row in rows]


QWEN = "nvidia/h100_qwen1.5-0.5b.json.gz"


@pytest.fixture(scope="module")
def kernel_names() -> list[str]:
    """The trace's kernel names, whole and in order: CSV, which no terminal width shortens (read once)."""
    query = "select name from events where kind = 'kernel' group by name order by name"
    return pl.read_csv(run_sql(query, shared_trace(QWEN), 80, "--format", "csv").encode())["name"].to_list()


@pytest.mark.parametrize("columns", [60, 100, 180])
def test_sql_table_fits_the_terminal_and_keeps_kernels_apart(columns, kernel_names):
    trace = shared_trace(QWEN)
    query = "select name, count(*) as calls from events where kind = 'kernel' group by name order by name"
    names = kernel_names
    assert max(map(len, names)) > columns, "the trace has names longer than the terminal"
    text = run_sql(query, trace, columns)
    assert all(len(line) <= columns for line in text.splitlines() if line.startswith(tuple("┏┃┡│└")))
    shown = table_cells(text, 1)
    assert len(shown) == len(names) and len(set(shown)) == len(set(names))
    assert "--wide prints it whole" in text


def test_wide_prints_names_whole(kernel_names):
    query = "select name from events where kind = 'kernel' group by name order by name"
    assert table_cells(run_sql(query, shared_trace(QWEN), 80, "--wide"), 1) == kernel_names
