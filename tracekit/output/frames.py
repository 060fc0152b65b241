"""Query results out of tracekit: an aligned table in the terminal, or CSV, JSON, NDJSON or Parquet to a file or
standard output."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import polars as pl
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tracekit.errors import InputError
from tracekit.output.files import write_output_file

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


def encode(frame: pl.DataFrame, fmt: str) -> bytes:
    """The frame in a file format, as bytes."""
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


MAX_CELL_CHARS = 48  # longer values (args JSON, long kernel names) are cut, with an ellipsis, in terminal tables


def print_frame(console: Console, frame: pl.DataFrame, max_rows: int, title: str | None = None) -> None:
    """A result as an aligned table: the first `max_rows` rows, and the columns that fit the console's width
    (values cut at MAX_CELL_CHARS), saying what was left out."""
    shown = frame.head(max_rows)
    cells = {name: [format_cell(v) for v in shown.get_column(name).to_list()] for name in frame.columns}
    widths = {name: min(MAX_CELL_CHARS, max([len(name), *map(len, cells[name])])) + 3 for name in frame.columns}
    columns, used = [], 1
    for name in frame.columns:
        if columns and used + widths[name] > console.width:
            break
        columns.append(name)
        used += widths[name]
    table = Table(title=title, show_lines=False, header_style="bold")
    for name in columns:
        table.add_column(name, justify="right" if frame.schema[name].is_numeric() else "left",
                         no_wrap=True, overflow="ellipsis", max_width=MAX_CELL_CHARS)
    for row in zip(*(cells[name] for name in columns)):
        table.add_row(*map(Text, row))  # Text: a name like "[red]" is not markup
    console.print(table)
    notes = []
    if frame.height > max_rows:
        notes.append(f"{max_rows} of {frame.height:,} rows shown (--max-rows N)")
    if len(columns) < frame.width:
        left = frame.columns[len(columns):]
        notes.append(f"{len(left)} more columns: {', '.join(left[:8])}{', ...' if len(left) > 8 else ''} (select them)")
    if notes:
        console.print(Text("; ".join(notes) + "; --format csv|json|parquet writes everything", style="dim"))


def format_cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):  # 4 decimals, or 4 significant digits below 1
        return f"{value:,.4f}" if abs(value) >= 1 else f"{value:.4g}"
    return str(value)
