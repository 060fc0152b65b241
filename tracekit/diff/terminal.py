"""The diff's terminal summary: the headline (step time A → B), the GPU time breakdown and the largest changes.
Column names come from the sections' descriptions (tracekit/diff/sections.py)."""

from __future__ import annotations

import polars as pl

from tracekit.diff import verdicts
from tracekit.diff.comparison import CAPTURES, EFFECT_COLUMNS, TEST_NAMES, DiffResult
from tracekit.diff.measures import TIMELINE_STEP_COLUMNS
from tracekit.diff.sections import Section, top_change_sections
from tracekit.output.frames import print_whole, shorten

VERDICT_STYLES = {"slower": "red", "faster": "green", "added": "yellow", "removed": "cyan", verdicts.NO_CHANGE: "dim",
                  verdicts.INCONCLUSIVE: "magenta", verdicts.NOT_ENOUGH: "magenta"}


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


def shift_text(head: dict, result: DiffResult) -> str:
    """The headline's comparison: shift per step (one capture a side) or per capture, its CI at the level asked
    for, the p-value and what was compared."""
    per_capture = result.settings.method == CAPTURES
    unit = "captures" if per_capture else "steps"
    compared = f"{head['n_base'] or 0} vs {head['n_cand'] or 0} {unit}"
    if head["ci_low"] is None:
        return f"no interval at this level ({compared})"
    return (f"{'per-capture median' if per_capture else 'per step'} {signed(head['effect'])} ms, "
            f"{result.settings.level_text} [{signed(head['ci_low'])}, {signed(head['ci_high'])}] "
            f"(p={head['p_value']:.2g}, {compared}, {TEST_NAMES[result.settings.method]})")


def metric_label(section: Section | None, metric: str) -> str:
    """A metric's short name in the top changes (its section's label for it, else its name)."""
    labels = {m.name: m.label for m in section.metrics} if section is not None else {}
    return labels.get(metric) or metric


def gpu_time_text(result: DiffResult, timeline: Section) -> str:
    """The GPU timeline's categories (all ranks) that either run has, base → cand with their verdicts; the columns
    are those of the timeline section (its key and its one metric)."""
    key, metric = timeline.keys[0], timeline.metrics[0].name
    base, cand = f"base_{metric}", f"cand_{metric}"
    shown = [c for c in TIMELINE_STEP_COLUMNS if c != "total"]  # total: the whole span, not a kind of GPU time
    rows = result.sections[timeline.name].filter(
        pl.col("rank").is_null() & pl.col(key).is_in(shown)
        & ((pl.col(base).fill_null(0) > 0) | (pl.col(cand).fill_null(0) > 0)))
    return "; ".join(f"{r[key]} {r[base] or 0:,.1f} → {r[cand] or 0:,.1f} ms {styled(r['verdict'])}"
                     for r in rows.iter_rows(named=True))


def print_summary(result: DiffResult, console, top: int = 15, wide: bool = False) -> None:
    """The headline (step time A → B), the GPU time breakdown and the largest changes, as rich text and a table.
    `wide`: item names whole; else shortened in the middle (distinct names stay distinct) to fit the console."""
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
                      f"({signed(head['percent_delta'], 1, '%')})  {shift_text(head, result)}  "
                      f"{styled(head['verdict'])}")
        if result.variance_note:
            console.print(f"  {result.variance_note}")
    for line in result.mismatches:
        console.print(f"[bold yellow]runs differ:[/] {escape(line)}")
    if result.warmup_text():
        console.print(f"steps left out of the verdicts (not steady, or --warmup-steps): {result.warmup_text()}")
    gpu_time = gpu_time_text(result, result.described_by["gpu_timeline"])
    if gpu_time:
        console.print("GPU time (all ranks): " + gpu_time)
    sections = top_change_sections(result.described_by, any(n.startswith("kernel names mostly differ") for n in result.notes))
    changes = result.top_changes(top, sections)
    if changes.height == 0:
        console.print(f"no significant change among {', '.join(sections)}")
    else:
        table = Table(title=f"top changes ({', '.join(sections)}; all ranks)", title_justify="left", box=box.SIMPLE)
        # fold: where even a shortened name leaves too little room, it goes on over lines rather than crop numbers
        table.add_column("item", no_wrap=wide, overflow="fold")
        shift = "per capture" if result.settings.method == CAPTURES else "per step"
        headers = ("base → cand ms", "Δ ms (Δ %)", f"{shift} Δ ms [{100 * (1 - result.settings.alpha):g}% CI]",
                   "verdict")
        for name in headers[:-1]:
            table.add_column(name, justify="right", no_wrap=True)
        table.add_column(headers[-1], no_wrap=True)
        rows = [changed_row(r, result) for r in changes.iter_rows(named=True)]
        whole = changes["item"].to_list()
        names = whole if wide else shorten(whole, item_width(rows, headers, console.width))
        for (section, label, *cells, verdict), name in zip(rows, names):
            table.add_row(f"[dim]{section}[/] {escape(name)} [dim]({label})[/]", *cells, styled(verdict))
        if wide:
            print_whole(console, table)
        else:
            console.print(table)
            if names != whole:
                console.print("[dim]names shortened to the terminal's width (--wide prints them whole)[/]")
    for note in result.notes:
        console.print(f"note: {note}")


def changed_row(row: dict, result: DiffResult) -> list[str]:
    """A top change's section, its metric's label, the table's cells after the item and its verdict."""
    values = " → ".join("-" if v is None else f"{v:,.3f}" for v in (row["base_ms"], row["cand_ms"]))
    percent = "" if row["percent_delta"] is None else f" ({row['percent_delta']:+.1f}%)"
    label = metric_label(result.described_by.get(row["section"]), row["metric"])
    return [row["section"], label, values, f"{row['delta_ms']:+,.3f}{percent}", interval_text(row),
            row["verdict"] or ""]


MIN_ITEM_WIDTH = 12  # below this, names say too little to be worth the table


def item_width(rows: list[list[str]], headers: tuple[str, ...], available: int) -> int:
    """The width an item name may take so that the table (its section and label around the name, the other
    columns at their full width) fits `available` characters."""
    others = sum(max(len(h), *(len(r[2 + i]) for r in rows)) for i, h in enumerate(headers))
    around = max(len(r[0]) + len(r[1]) + 4 for r in rows)  # "section name (label)"
    padding = 3 * (len(headers) + 1) + 1  # box.SIMPLE: a space either side of each column, a blank rule between
    return max(MIN_ITEM_WIDTH, available - others - around - padding)
