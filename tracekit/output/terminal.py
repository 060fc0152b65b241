"""What `tracekit report` prints once it is done: a short summary of the results (its progress while it works is
`tracekit.cli.app.progress_bar`)."""

from __future__ import annotations

import functools
from pathlib import Path

import polars as pl
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tracekit.output.frames import print_whole, shorten
from tracekit.output.workbooks import Analyses, device_word

BREAKDOWN = {"computation": "computation", "exposed_communication": "exposed communication",
             "exposed_memcpy": "exposed memcpy", "idle": "idle", "total": "{device} window"}
RANK_ROWS_SHOWN = 8
QUERIES = ("diagnostics_reasons",)  # run for this summary only
TOP = 5


def print_summary(console: Console, done: Analyses, paths: list[Path], problems: list[str],
                  wide: bool = False) -> None:
    """`wide`: names whole; else shortened in the middle (distinct names stay distinct) to fit the console."""
    results = done.results
    name_width = None if wide else console.width
    show = functools.partial(print_whole, console) if wide else console.print
    ranks = list(done.ranks)
    if paths:
        console.print(f"[bold]wrote[/] {paths[0].parent}/: " + ", ".join(p.name for p in paths[:6])
                      + (f", … ({len(paths)} workbooks)" if len(paths) > 6 else ""))
    timeline = results.get("gpu_timeline")
    device = device_word(results)
    if timeline is not None and timeline.filter(pl.col("time_ms") > 0).height:
        console.print(breakdown_table(timeline, ranks, device))
    else:
        console.print(f"No {device} work in the traces (or no {device} op with a launch call).")
    single = len(ranks) == 1
    ops = results.get("op_summary" if single else "op_compare")
    kernels = results.get("kernel_summary" if single else "kernel_compare")
    if single and kernels is not None:
        kernels = kernels.with_columns(total_ms=pl.col("total_us") / 1e3)
    time_column = "direct_kernel_ms" if single else "total_ms"
    denominator = share_denominator(ops, kernels) if single else ""
    if ops is not None and ops.filter(pl.col(time_column) > 0).height:
        show(top_table(f"Top ops by kernel time{denominator}", ops, "name", "direct_kernel_ms", "percent_kernel",
                       name_width)
             if single else spread_table("Top ops by kernel time (ms), all ranks", ops, "name", name_width))
    if kernels is not None and kernels.height:
        show(top_table(f"Top kernels{denominator}", kernels, "kernel_name", "total_ms", "percent_kernel_time",
                       name_width)
             if single else spread_table("Top kernels (ms), all ranks", kernels, "kernel_name", name_width))
    if "diagnostics_reasons" in results and results["diagnostics_reasons"].height:
        show(diagnostics_table(results["diagnostics_reasons"], len(ranks), name_width))
    for problem in problems:
        console.print(f"[yellow]note:[/] {problem}", highlight=False)


def share_denominator(ops: pl.DataFrame | None, kernels: pl.DataFrame | None) -> str:
    """What the % column of the top tables is a share of: all GPU op time, and how much of it no rule owns."""
    if kernels is None or not kernels.height:
        return ""
    total_ms = kernels["total_ms"].sum()
    unowned_ms = ops.filter(pl.col("category") == "unowned")["direct_kernel_ms"].sum() if ops is not None else 0
    unowned = f"; {100 * unowned_ms / total_ms:.1f}% owned by no op" if total_ms and unowned_ms else ""
    return f" (% of all GPU op time, {total_ms:,.3f} ms{unowned})"


def breakdown_table(timeline: pl.DataFrame, ranks: list[int], device: str = "GPU") -> Table:
    shown = ranks[:RANK_ROWS_SHOWN]
    table = Table(title=f"{device.capitalize() if device != 'GPU' else device} time, ms (% of the {device} window)",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("rank", justify="right", no_wrap=True)
    for label in BREAKDOWN.values():
        table.add_column(label.format(device=device), justify="right")
    cells = {(r["category"], r["rank"]): r for r in timeline.iter_rows(named=True)}
    for rank in shown:
        row = [str(rank)]
        for category in BREAKDOWN:
            cell = cells.get((category, rank))
            row.append("–" if not cell or cell["time_ms"] is None
                       else f"{cell['time_ms']:,.2f} ({cell['percent'] or 0:.0f}%)")
        table.add_row(*row)
    if len(ranks) > len(shown):
        table.add_row(f"… {len(ranks) - len(shown)} more ranks (ranks.xlsx)", *[""] * len(BREAKDOWN))
    return table


MIN_NAME_WIDTH = 12  # below this, rich squeezes the other columns too


def summary_table(title: str, columns: list[tuple[str, str]], rows: list[list[str]], name_at: int,
                  available: int | None) -> Table:
    """A table of `columns` (header, justify) whose column `name_at` is shortened in the middle (distinct names
    kept distinct, `frames.shorten`) so that the table fits `available` characters (None: names whole)."""
    if available is not None and rows:
        others = sum(max(len(header), *(len(row[i]) for row in rows))
                     for i, (header, _) in enumerate(columns) if i != name_at)
        width = max(MIN_NAME_WIDTH, available - others - 3 * (len(columns) - 1) - 2)  # box edges, gaps
        shown = shorten([row[name_at] for row in rows], width)
        rows = [[*row[:name_at], name, *row[name_at + 1:]] for row, name in zip(rows, shown)]
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for header, justify in columns:
        table.add_column(header, justify=justify, no_wrap=True, overflow="crop")
    for row in rows:
        table.add_row(*map(Text, row))  # Text: a name like "[red]" is not markup
    return table


def top_table(title: str, frame: pl.DataFrame, name: str, time_ms: str, percent: str,
              available: int | None) -> Table:
    top = frame.sort([time_ms, name], descending=[True, False], nulls_last=True).head(TOP)
    rows = [[row[name] or "", row.get("category") or "", f"{row[time_ms] or 0:,.3f}", f"{row[percent] or 0:.1f}"]
            for row in top.iter_rows(named=True)]
    return summary_table(title, [("name", "left"), ("category", "left"), ("ms", "right"), ("%", "right")], rows,
                         0, available)


def spread_table(title: str, frame: pl.DataFrame, name: str, available: int | None) -> Table:
    rows = [[row[name] or "", f"{row['total_ms']:,.3f}", f"{row['min_ms']:,.3f} – {row['max_ms']:,.3f}",
             "" if row["outlier_rank"] is None else str(row["outlier_rank"])]
            for row in frame.head(TOP).iter_rows(named=True)]
    return summary_table(title, [("name", "left"), ("total", "right"), ("rank min – max", "right"),
                                 ("outlier", "right")], rows, 0, available)


def diagnostics_table(reasons: pl.DataFrame, rank_count: int, available: int | None) -> Table:
    columns = [("stage", "left"), ("reason", "left"), ("entries", "right")]
    columns += [("ranks", "right")] if rank_count > 1 else []
    rows = []
    for row in reasons.iter_rows(named=True):
        cells = [row["stage"] or "", row["reason"] or "", f"{row['entries']:,}"]
        if rank_count > 1:
            cells.append(str(row["ranks"]) if row["ranks"] else "–")
        rows.append([*cells, row["example"] or ""])
    return summary_table("Diagnostics: not linked or not understood (Diagnostics sheet has the entries)",
                         [*columns, ("example", "left")], rows, len(columns), available)
