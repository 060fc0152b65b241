"""Compare two runs (baseline → candidate): what got slower or faster, judged step by step.

Each side is summarised by the contract analyses (`summarize`): totals over the trace, plus — where the side holds
several `ProfilerStep`s — the same analyses rerun once per step. `compare` turns both sides into long "measures"
(key, rank, metric, value over the capture, and the list of per-step values of the steady-state steps: the first
`warmup_steps` steps of each run are left out, and named) and lets DuckDB full-outer-join them
(queries/diff/compare.sql). The verdict rule is tracekit/diff/verdicts.py: the candidate's steps are compared with the
baseline's by a Mann–Whitney rank test and a Hodges–Lehmann shift with its confidence interval; a measure is slower or
faster when the interval excludes 0 and the shift exceeds a practical floor (floor_percent of the per-step value;
with one capture a side, host_floor_percent for host CPU times, which move between processes of one unchanged job).
Without enough steps for an interval at the chosen level the verdict is "not enough steps to say". Keys present on
one side only are added/removed. Ops are judged on their direct kernel time and their self CPU time (not total CPU
time, which would repeat a child's change in every ancestor and count time blocked in a synchronising child as the
op's own).

The package: sections.py (what is compared, as data), side.py (one run), measures.py (a side's measures per
section), compare.py (running the sides and matching), verdicts.py (the rule), comparison.py (DiffResult),
workbook.py (the diff workbook), terminal.py (the terminal summary).
"""

from __future__ import annotations

from tracekit.diff import verdicts
from tracekit.diff.compare import compare, per_step_results, summarize, summarize_inputs
from tracekit.diff.comparison import (
    CAPTURES,
    DEFAULT_ALPHA,
    DEFAULT_FLOOR_PERCENT,
    DEFAULT_HOST_FLOOR_PERCENT,
    DEFAULT_WARMUP_STEPS,
    SIGNIFICANT,
    STEPS,
    DiffResult,
    Settings,
)
from tracekit.diff.sections import SECTIONS, TOP_CHANGE_SECTIONS, Metric, Section, parse_metric_name
from tracekit.diff.side import Side
from tracekit.diff.terminal import print_summary
from tracekit.diff.workbook import write_workbook

__all__ = [
    "CAPTURES", "STEPS", "DEFAULT_ALPHA", "DEFAULT_FLOOR_PERCENT", "DEFAULT_HOST_FLOOR_PERCENT",
    "DEFAULT_WARMUP_STEPS", "SECTIONS", "SIGNIFICANT",
    "TOP_CHANGE_SECTIONS",
    "DiffResult", "Metric", "Section", "Settings", "Side", "compare", "parse_metric_name", "per_step_results",
    "print_summary", "summarize", "summarize_inputs", "verdicts", "write_workbook",
]
