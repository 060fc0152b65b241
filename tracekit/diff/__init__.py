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
section), matching.py (running the sides and matching), verdicts.py (the rule), comparison.py (DiffResult),
defaults.py (the settings by default), workbook.py (the diff workbook), terminal.py (the terminal summary).
"""

from tracekit.lazy import lazy_attributes

# imported on first use: `tracekit diff` reads its options' defaults (diff/defaults.py) before it starts reading the
# traces, and imports the rest while that reading goes on (tracekit/cli/compare.py)
_PUBLIC = {
    "verdicts": "tracekit.diff.verdicts",
    **dict.fromkeys(["compare", "per_step_results", "summarize", "summarize_inputs"], "tracekit.diff.matching"),
    **dict.fromkeys(["DEFAULT_ALPHA", "DEFAULT_FLOOR_PERCENT", "DEFAULT_HOST_FLOOR_PERCENT", "DEFAULT_WARMUP_STEPS"],
                    "tracekit.diff.defaults"),
    **dict.fromkeys(["CAPTURES", "SIGNIFICANT", "STEPS", "DiffResult", "Settings"], "tracekit.diff.comparison"),
    **dict.fromkeys(["SECTIONS", "TOP_CHANGE_SECTIONS", "Metric", "Section", "parse_metric_name",
                     "without_critical_path"], "tracekit.diff.sections"),
    "Side": "tracekit.diff.side",
    "print_summary": "tracekit.diff.terminal",
    "write_workbook": "tracekit.diff.workbook",
}

__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_attributes(__name__, _PUBLIC)
