"""Query results out of tracekit: an aligned table in the terminal, or CSV, JSON, NDJSON or Parquet to a file or
standard output."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tracekit.errors import InputError
from tracekit.output.files import write_output_file

if TYPE_CHECKING:  # the frames come from the caller: `tracekit queries` and --help need no polars (FORMATS)
    import polars as pl

FORMATS = ("table", "csv", "json", "ndjson", "parquet")
SUFFIX_FORMATS = {".csv": "csv", ".json": "json", ".ndjson": "ndjson", ".jsonl": "ndjson", ".parquet": "parquet",
                  ".pq": "parquet"}


def choose_format(fmt: str | None, out: Path | None) -> str:
    """The format asked for, else the one the output file's suffix names, else an aligned table."""
    if fmt:
        if fmt == "table" and out is not None:
            raise InputError(f"{out}: --format table prints to the terminal; give csv, json, ndjson or parquet")
        return fmt
    if out is None:
        return "table"
    try:
        return SUFFIX_FORMATS[out.suffix.lower()]
    except KeyError:
        raise InputError(f"{out}: cannot tell the format from the suffix; give --format "
                         f"{'|'.join(FORMATS[1:])}") from None


# Text formats write a float at the precision of the data it came from, not with the last bits of binary arithmetic
# (12.508999999999999 is 12.509 ms): times are int64 ns, so a column in ms keeps 6 decimals, in us 3, in s 9; other
# floats (ratios, percentages, rates) 12 significant digits, as the workbooks. Parquet keeps the exact doubles.
UNIT_DECIMALS = {"us": 3, "ms": 6, "s": 9}
SIGNIFICANT_DIGITS = 12


def at_data_precision(frame: pl.DataFrame) -> pl.DataFrame:
    """Float columns (and lists of floats) rounded as UNIT_DECIMALS / SIGNIFICANT_DIGITS say."""
    import polars as pl

    def rounded(name: str, value: pl.Expr) -> pl.Expr:
        unit = name.rsplit("_", 1)[-1].lower()
        return value.round(UNIT_DECIMALS[unit]) if unit in UNIT_DECIMALS else value.round_sig_figs(SIGNIFICANT_DIGITS)

    changes = []
    for name, dtype in frame.schema.items():
        if dtype.is_float():
            changes.append(rounded(name, pl.col(name)))
        elif isinstance(dtype, pl.List) and dtype.inner.is_float():
            changes.append(pl.col(name).list.eval(rounded(name, pl.element())))
    return frame.with_columns(changes) if changes else frame


def encode(frame: pl.DataFrame, fmt: str) -> bytes:
    """The frame in a file format, as bytes (text formats at the data's precision: `at_data_precision`)."""
    if fmt != "parquet":
        frame = at_data_precision(frame)
    if fmt == "csv":
        nested = [n for n, t in frame.schema.items() if t.is_nested()]
        if nested:
            raise InputError(f"CSV cannot hold the list/struct columns {', '.join(nested)}; "
                             "use --format json or parquet")
        return frame.write_csv().encode()
    buffer = io.BytesIO()
    if fmt == "json":
        frame.write_json(buffer)
    elif fmt == "ndjson":
        frame.write_ndjson(buffer)
    elif fmt == "parquet":
        frame.write_parquet(buffer)
    else:
        raise ValueError(fmt)
    return buffer.getvalue()


def write_frame(frame: pl.DataFrame, fmt: str, out: Path | None, inputs: list[Path] = ()) -> None:
    """Write the frame to `out` (replaced only once fully written, never over an input) or to standard output."""
    data = encode(frame, fmt)
    if out is None:
        if fmt == "parquet" and sys.stdout.isatty():
            raise InputError("Parquet is binary: give -o FILE, or redirect standard output")
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    write_output_file(out, lambda temporary: temporary.write_bytes(data), inputs)


# Terminal tables fit the console's width: numbers keep theirs; a text column keeps at least 2/5 of the line (or
# MIN_TEXT_WIDTH, or its own width if smaller), so long names stay readable and the trailing columns that do not fit
# are left out, saying so; what room is left widens the text columns up to their full width. `wide` prints every
# value whole, however wide the table.
MIN_TEXT_WIDTH = 16
BORDER = 3  # a column's padding and rule in rich's default box


def print_frame(console: Console, frame: pl.DataFrame, max_rows: int, title: str | None = None,
                wide: bool = False) -> None:
    """A result as an aligned table: the first `max_rows` rows, and the columns that fit the console's width (text
    shortened in the middle, distinct values kept distinct: `shorten`), saying what was left out."""
    shown = frame.head(max_rows)
    cells = {name: [format_cell(v) for v in shown.get_column(name).to_list()] for name in frame.columns}
    natural = {name: max([len(name), *map(len, cells[name])]) for name in frame.columns}
    numeric = {name for name in frame.columns if frame.schema[name].is_numeric()}
    widths = dict(natural) if wide else fit_widths(natural, numeric, console.width - 1)
    columns = [name for name in frame.columns if name in widths]
    shortened = False
    table = Table(title=title, show_lines=False, header_style="bold")
    for name in columns:
        column = shorten(cells[name], widths[name])
        shortened |= column != cells[name]
        cells[name] = column
        bounds = {} if wide else {"min_width": widths[name], "max_width": widths[name]}
        table.add_column(shorten([name], widths[name])[0], justify="right" if name in numeric else "left",
                         no_wrap=True, overflow="crop", **bounds)
    for row in zip(*(cells[name] for name in columns)):
        table.add_row(*map(Text, row))  # Text: a name like "[red]" is not markup
    if wide:
        print_whole(console, table)
    else:
        console.print(table)
    notes = []
    if frame.height > max_rows:
        notes.append(f"{max_rows} of {frame.height:,} rows shown (--max-rows N)")
    if len(columns) < frame.width:
        left = frame.columns[len(columns):]
        notes.append(f"{len(left)} more columns: {', '.join(left[:8])}{', ...' if len(left) > 8 else ''} (select them)")
    if shortened:
        notes.append("text shortened to the terminal's width (--wide prints it whole)")
    if notes:
        console.print(Text("; ".join(notes) + "; --format csv|json|parquet writes everything", style="dim"))


def print_whole(console: Console, renderable) -> None:
    """Print as wide as the renderable needs, past the console's width (rich caps a print at the console's width)."""
    needed = console.measure(renderable, options=console.options.update(max_width=1_000_000)).maximum
    kept = console.width
    console.width = max(kept, needed)
    try:
        console.print(renderable, crop=False)
    finally:
        console.width = kept


def fit_widths(natural: dict[str, int], numeric: set[str], available: int) -> dict[str, int]:
    """Each column's width within `available` characters: the leading columns that fit at their floor width, then
    text columns widened to a common cap (the largest that fits)."""
    if not natural:
        return {}
    floor = {n: w if n in numeric else min(w, max(MIN_TEXT_WIDTH, available * 2 // 5)) for n, w in natural.items()}
    kept: list[str] = []
    for name in natural:
        if kept and sum(floor[k] + BORDER for k in [*kept, name]) > available:
            break
        kept.append(name)
    budget = available - BORDER * len(kept)

    def widths_at(cap: int) -> dict[str, int]:
        return {n: natural[n] if n in numeric else max(floor[n], min(natural[n], cap)) for n in kept}

    low, high = 0, max(natural[n] for n in kept)
    while low < high:  # the largest cap that fits
        middle = (low + high + 1) // 2
        if sum(widths_at(middle).values()) <= budget:
            low = middle
        else:
            high = middle - 1
    return widths_at(low)


ELLIPSIS = "…"


def shorten(values: list[str], width: int) -> list[str]:
    """Values at most `width` characters: a longer one keeps its start and end around an ellipsis; where that makes
    distinct values look the same (kernel names that differ in a template argument), each shows the part where it
    differs from its nearest neighbour instead; the few that still collide end in a counter."""
    out = [v if len(v) <= width else middle_cut(v, width) for v in values]
    groups: dict[str, set[str]] = {}
    for value, shown in zip(values, out):
        groups.setdefault(shown, set()).add(value)
    clashing = {shown: sorted(originals) for shown, originals in groups.items() if len(originals) > 1}
    if not clashing:
        return out
    around = {}
    for originals in clashing.values():
        for i, value in enumerate(originals):
            neighbours = originals[max(0, i - 1):i] + originals[i + 1:i + 2]
            around[value] = window_cut(value, width, max(common_prefix(value, n) for n in neighbours))
    out = [around.get(v, shown) for v, shown in zip(values, out)]
    seen: dict[str, list[str]] = {}
    for value, shown in zip(values, out):
        if value not in seen.setdefault(shown, []):
            seen[shown].append(value)
    for i, (value, shown) in enumerate(zip(values, out)):
        if len(seen[shown]) > 1:
            tag = f"{ELLIPSIS}#{seen[shown].index(value) + 1}"
            out[i] = shown[:max(0, width - len(tag))] + tag
    return out


def middle_cut(value: str, width: int) -> str:
    if width <= 2:
        return value[:width]
    head = width // 2
    return value[:head] + ELLIPSIS + value[len(value) - (width - 1 - head):]


def window_cut(value: str, width: int, differs_at: int) -> str:
    """The start of `value`, then the part from just before position `differs_at` on, within `width`."""
    head = max(1, min(width // 4, 12))
    room = width - head - 1
    start = max(head, differs_at - room // 3)
    if start + room >= len(value):  # reaches the end
        start = max(head, len(value) - room)
        return value[:head] + ELLIPSIS + value[start:] if start > head else value[:width]
    return value[:head] + ELLIPSIS + value[start:start + room - 1] + ELLIPSIS


def common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def format_cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):  # 4 decimals, or 4 significant digits below 1
        return f"{value:,.4f}" if abs(value) >= 1 else f"{value:.4g}"
    return str(value)
