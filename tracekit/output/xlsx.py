"""A generic Excel writer: sheets of blocks (query results) laid out by a definition, written with xlsxwriter.

Nothing here knows what the analyses mean: the definitions in reports/*.toml say which columns, headers, formats,
widths, data bars and charts each block gets (tracekit/output/workbooks.py reads them into the dataclasses below).

Every string is written with `write_string` (and the workbook refuses to turn strings into formulas, numbers or
links), so a kernel name such as `=cmd|' /C calc'!A0` stays text. The workbook's created date is fixed so the
same input gives the same bytes.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import xlsxwriter
from xlsxwriter.utility import xl_col_to_name, xl_rowcol_to_cell
from xlsxwriter.worksheet import Worksheet

MAX_ROWS = 1_048_576
MAX_CELL_CHARS = 32_767
SHEET_NAME_BAD = re.compile(r"[\[\]:*?/\\]")
FIXED_CREATED = dt.datetime(2000, 1, 1)
CHART_ROW_PX = 20
ONE_LINE = r"\r?\n[ \t]*"  # a line break and the indentation after it (pretty-printed JSON text)
DEFAULT_COL_PX = 64

@dataclass(frozen=True)
class NumberFormat:
    excel: str | None = None
    python: str | None = None  # same shape as `excel`, to size the column
    scale: float | None = None
    text: bool = False  # write as text (exact int64 timestamps)
    one_line: bool = False  # text without its line breaks and the indentation after them (pretty-printed JSON)


@dataclass(frozen=True)
class NameRule:
    format: str
    unit: str | None = None
    suffix: str | None = None
    prefix: str | None = None
    name: str | None = None

    def matches(self, column: str) -> bool:
        return ((self.suffix is not None and column.endswith(self.suffix))
                or (self.prefix is not None and column.startswith(self.prefix))
                or (self.name is not None and column == self.name))

    def strip(self, column: str) -> str:
        if self.suffix and column.endswith(self.suffix) and column != self.suffix:
            return column[: -len(self.suffix)]
        return column


@dataclass(frozen=True)
class Style:
    formats: dict[str, NumberFormat]
    by_name: tuple[NameRule, ...]
    cells: dict[str, dict]
    widths: dict[str, int]
    data_bar: dict
    chart: dict
    significant_digits: int  # of fractional numbers: float sums differ in the last bits with summation order

    def rule(self, column: str) -> NameRule | None:
        return next((r for r in self.by_name if r.matches(column)), None)

    def default_format(self, column: str, dtype: pl.DataType) -> str:
        rule = self.rule(column)
        if rule:
            return rule.format
        if dtype.is_integer():
            return "count"
        if dtype.is_numeric():
            return "number"
        return "text"

    def default_header(self, column: str) -> str:
        rule = self.rule(column)
        words = (rule.strip(column) if rule else column).replace("_", " ").strip()
        words = words[:1].upper() + words[1:]
        return f"{words} ({rule.unit})" if rule and rule.unit and rule.unit != words else words


@dataclass(frozen=True)
class Column:
    col: str
    header: str | None = None
    format: str | None = None
    width: int | None = None
    bar: bool = False
    label: str | None = None  # for a column spread from a list (MoreColumns): the element's label (its rank)


@dataclass(frozen=True)
class Chart:
    type: str
    categories: str
    values: tuple[str, ...]
    title: str = ""
    x_title: str = ""
    y_title: str = ""
    stacked: bool = False
    skip: tuple[str, ...] = ()  # category values moved to the end of the block and left out of the chart
    # scatter: `categories` is the x column; with series_by, each run of rows with one value of that column is a
    # series of its own (named by the value), drawn as a line when the value is in `lines`, else as markers
    series_by: str | None = None
    lines: tuple[str, ...] = ()
    log_axes: bool = False


@dataclass(frozen=True)
class MoreColumns:
    """A list column spread over one column per element, after the listed columns (a value per rank)."""
    values: str  # list column: the values, one per label
    labels: str  # list column: what each value is (the rank); the same on every row
    header: str  # "{name}" is the label
    format: str
    mark: str | None = None  # column holding a label whose cell is highlighted (the outlier rank)


@dataclass(frozen=True)
class Block:
    query: str
    title: str = ""
    columns: tuple[Column, ...] | None = None  # None: every column
    order_by: tuple[str, ...] = ()
    where: dict[str, tuple] = field(default_factory=dict)
    limit: int | None = None
    transpose: bool = False
    chart: Chart | None = None
    more_columns: MoreColumns | None = None


@dataclass(frozen=True)
class Sheet:
    """A concrete sheet: its name and the rows of each of its blocks."""
    name: str
    parts: tuple[tuple[Block, pl.DataFrame], ...]


def shape_rows(block: Block, frame: pl.DataFrame) -> pl.DataFrame:
    """The block's rows: filtered, sorted with every column breaking ties (deterministic), limited."""
    for col, values in block.where.items():
        if col in frame.columns:
            position = {v: i for i, v in enumerate(values)}
            frame = (frame.filter(pl.col(col).is_in(list(values)))
                     .with_columns(pl.col(col).replace_strict(position, default=None, return_dtype=pl.Int64)
                                   .alias("__where_order")))
    keys = [k.lstrip("-") for k in block.order_by if k.lstrip("-") in frame.columns]
    descending = [k.startswith("-") for k in block.order_by if k.lstrip("-") in frame.columns]
    if "__where_order" in frame.columns:
        keys, descending = ["__where_order", *keys], [False, *descending]
    if block.chart and block.chart.skip and block.chart.categories in frame.columns:
        frame = frame.with_columns(pl.col(block.chart.categories).is_in(list(block.chart.skip)).alias("__skip_last"))
        keys, descending = ["__skip_last", *keys], [False, *descending]
    if keys:
        sortable = [c for c, t in frame.schema.items() if c not in keys and not isinstance(t, (pl.List, pl.Struct))]
        frame = frame.sort(keys + sortable, descending=descending + [False] * len(sortable),
                           nulls_last=True, maintain_order=True)
    frame = frame.drop([c for c in ("__where_order", "__skip_last") if c in frame.columns])
    return frame.head(block.limit) if block.limit is not None else frame


def spread_list(more: MoreColumns, frame: pl.DataFrame) -> tuple[pl.DataFrame, list[tuple[str, str]]]:
    """The frame with list column `more.values` spread over one column per label; [(column, label)]."""
    if more.values not in frame.columns or more.labels not in frame.columns or frame.is_empty():
        return frame, []
    labels = [str(label) for label in frame.get_column(more.labels)[0]]
    names = [f"{more.values}[{label}]" for label in labels]
    spread = frame.with_columns(pl.col(more.values).list.get(i, null_on_oob=True).alias(name)
                                for i, name in enumerate(names))
    return spread, list(zip(names, labels))


def resolve_columns(block: Block, frame: pl.DataFrame, style: Style, where: str, problems: list[str],
                    spread: list[tuple[str, str]]) -> list[Column]:
    """The block's columns (then those `spread` from a list) with header and format filled; listed columns the
    result lacks are reported."""
    if block.columns is None:
        listed = [Column(c) for c in frame.columns if c != "rank"]  # a workbook's rows share a rank, or compare ranks
    else:
        listed = []
        for column in block.columns:
            if column.col in frame.columns:
                listed.append(column)
            else:
                problems.append(f"{where}: query {block.query} has no column {column.col!r} (column left out)")
    if block.more_columns:
        more = block.more_columns
        listed += [Column(name, header=more.header.format(name=label), format=more.format, label=label)
                   for name, label in spread]
    schema = frame.schema
    return [Column(c.col, c.header or style.default_header(c.col),
                   c.format or style.default_format(c.col, schema[c.col]), c.width, c.bar, c.label)
            for c in listed]


def sheet_name(wanted: str, taken: set[str]) -> str:
    """A valid, unique Excel sheet name (≤31 characters, none of []:*?/\\)."""
    base = SHEET_NAME_BAD.sub("-", wanted).strip("'")[:31] or "Sheet"
    name, n = base, 2
    while name.lower() in taken:
        suffix = f" ({n})"
        name, n = base[: 31 - len(suffix)] + suffix, n + 1
    taken.add(name.lower())
    return name


class BulkWorksheet(Worksheet):
    """A worksheet that takes table rows as ready-made <row> XML, built column-wise by Polars.

    xlsxwriter spends ~5 µs of Python per cell; a sheet of 100k rows × 15 columns would take seconds. Data rows are
    instead rendered with vectorised string expressions and spliced into <sheetData> in row order with the cells
    xlsxwriter holds itself (titles, headers, small blocks), which it writes as usual.
    """

    def __init__(self):
        super().__init__()
        self.bulk_rows: list[tuple[int, int, str]] = []  # (first row, last row, XML of those rows)
        self.chart_right_col = 0  # first column right of every chart (for the print area)

    def add_rows_xml(self, first: int, last: int, xml: str, last_col: int) -> None:
        self.bulk_rows.append((first, last, xml))
        self._check_dimensions(first, 0)
        self._check_dimensions(last, last_col)

    def _write_rows(self) -> None:
        if not self.bulk_rows:
            return super()._write_rows()
        low, high = self.dim_rowmin, self.dim_rowmax
        start = low
        for first, last, xml in sorted(self.bulk_rows):
            if start < first:
                self.dim_rowmin, self.dim_rowmax = start, first - 1
                super()._write_rows()
            self.fh.write(xml)
            start = last + 1
        if start <= high:
            self.dim_rowmin, self.dim_rowmax = start, high
            super()._write_rows()
        self.dim_rowmin, self.dim_rowmax = low, high


class WorkbookWriter:
    """Writes Sheets into one workbook and keeps its shared cell formats (see `write_workbook`)."""

    def __init__(self, path: Path, style: Style):
        self.style = style
        self.book = xlsxwriter.Workbook(str(path), {
            "strings_to_formulas": False, "strings_to_numbers": False, "strings_to_urls": False,
            "nan_inf_to_errors": True, "in_memory": True,  # no temp file per part: faster, and nothing left behind
        })
        self.book.set_properties({"created": FIXED_CREATED, "author": "tracekit", "comments": "written by tracekit"})
        self.cell_formats: dict[tuple[str, str], xlsxwriter.format.Format] = {}
        self.problems: list[str] = []

    def cell_format(self, number_format: str, role: str = "value"):
        key = (number_format, role)
        if key not in self.cell_formats:
            props = dict(self.style.cells.get(role, {})) if role != "value" else {}
            excel = self.style.formats[number_format].excel
            if excel:
                props["num_format"] = excel
            self.cell_formats[key] = self.book.add_format(props)
        return self.cell_formats[key]

    def write_sheet(self, sheet: Sheet, taken: set[str]) -> None:
        ws = self.book.add_worksheet(sheet_name(sheet.name, taken), worksheet_class=BulkWorksheet)
        ws.set_landscape()
        ws.fit_to_pages(1, 0)  # printed (or exported to PDF) one page wide
        widths: dict[int, float] = {}
        header_lines = 1
        row = 0
        single = len(sheet.parts) == 1
        for index, (block, frame) in enumerate(sheet.parts):
            where = f"sheet {sheet.name!r}"
            frame, spread = spread_list(block.more_columns, frame) if block.more_columns else (frame, [])
            columns = resolve_columns(block, frame, self.style, where, self.problems, spread)
            if not single and block.title:
                ws.write_string(row, 0, block.title, self.cell_format("text", "title"))
                row += 1
            if block.transpose:
                row = self.write_transposed(ws, row, columns, frame, widths)
            else:
                last = index == len(sheet.parts) - 1
                row, lines = self.write_table(ws, row, block, columns, frame, widths, where,
                                              filtered=last, frozen=single)
                header_lines = max(header_lines, lines) if single else header_lines
            row += 1
        for col, width in widths.items():
            ws.set_column(col, col, width)
        if widths:  # print (and PDF export) the table columns only, not long text running on to the right
            ws.print_area(0, 0, max(row - 1, 0), max(max(widths), ws.chart_right_col))
        if single:
            ws.set_row(0, 15 * header_lines)

    def write_transposed(self, ws, row: int, columns: list[Column], frame: pl.DataFrame, widths: dict) -> int:
        record = frame.row(0, named=True) if frame.height else {}
        label = self.cell_format("text", "label")
        for column in columns:
            ws.write_string(row, 0, column.header, label)
            value = record.get(column.col)
            shown = self.write_value(ws, row, 1, value, column.format)
            fit(widths, 0, len(column.header), self.style)
            if not isinstance(value, str):  # text may run on into the empty cells to its right
                fit(widths, 1, shown, self.style)
            row += 1
        return row

    def write_value(self, ws, row: int, col: int, value, number_format: str) -> int:
        """One cell (of a transposed block); returns its width in characters."""
        spec = self.style.formats[number_format]
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return 0
        if isinstance(value, (list, dict)):
            value = json.dumps(value)
        if isinstance(value, str) or spec.text:
            text = clip(re.sub(ONE_LINE, "", str(value)) if spec.one_line else str(value))
            ws.write_string(row, col, text)
            return len(text)
        if isinstance(value, bool):
            ws.write_boolean(row, col, value, self.cell_format("boolean"))
            return 5
        if spec.scale or not isinstance(value, int):
            number = float(f"{float(value) * (spec.scale or 1):.{self.style.significant_digits}g}")
        else:
            number = value
        ws.write_number(row, col, number, self.cell_format(number_format))
        return number_width(spec, number)

    def write_table(self, ws, top: int, block: Block, columns: list[Column], frame: pl.DataFrame, widths: dict,
                    where: str, filtered: bool, frozen: bool) -> tuple[int, int]:
        """Header row and data rows from `top`; returns (next free row, header lines)."""
        header = self.cell_format("text", "header")
        rows = frame.height
        room = MAX_ROWS - top - 1
        if rows > room:
            self.problems.append(f"{where}: {rows:,} rows, only the first {room:,} fit in a sheet")
            frame, rows = frame.head(room), room
        lines = 1
        for c, column in enumerate(columns):
            ws.write_string(top, c, column.header, header)
        first, last = top + 1, top + rows
        shown, measured = self.shown_and_measured(frame, columns)
        if rows:
            ws.add_rows_xml(first, last, self.rows_xml(ws, first, columns, shown, measured, block.more_columns),
                            len(columns) - 1)
        schema = frame.schema  # a new object at each call (~0.06 ms)
        for c, (column, width) in enumerate(zip(columns, self.content_widths(columns, schema, measured))):
            longest_word = max((len(w) for w in column.header.split()), default=0)
            fit(widths, c, column.width or max(width, longest_word), self.style)
            lines = max(lines, math.ceil(len(column.header) / max(1, min(widths[c], self.style.widths["max"]))))
            if column.bar and rows and schema[column.col].is_numeric():
                ws.conditional_format(first, c, last, c, {"type": "data_bar", **self.style.data_bar})
        if columns:
            if filtered:
                ws.autofilter(top, 0, max(top, last), len(columns) - 1)
            if frozen:
                ws.freeze_panes(top + 1, 1 if len(columns) > 6 else 0)
        if not frozen:
            ws.set_row(top, 15 * lines)
        end = last + 1
        if block.chart and rows:
            end = max(end, self.insert_chart(ws, top, block.chart, columns, frame, ws.get_name()))
        return end, lines

    def shown_and_measured(self, frame: pl.DataFrame, columns: list[Column]) -> tuple[pl.DataFrame, dict]:
        """FRAME with the text each shared-string column shows (`__sst{c}`: as text, JSON for lists and structs, on
        one line where its format says, clipped to a cell), and in one query what the cells need of every column:
        the extremes its width is measured from (`max{c}`, `min{c}`: numbers as shown; `len{c}`: the longest text)
        and of a shared-string column its distinct texts in order (`unique{c}`) and how many values it has
        (`count{c}`). One query for all of it: with a query per purpose, Polars' fixed cost per query was most of
        the writing of a report's small blocks (OWLv2's workbook: 342 queries, 0.33 s; now 215, 0.28 s:
        bench/RESULTS.md)."""
        schema = frame.schema
        texts, measures = [], {}
        for c, column in enumerate(columns):
            dtype, spec = schema[column.col], self.style.formats[column.format]
            if self.is_text(column, dtype):
                if isinstance(dtype, (pl.List, pl.Array, pl.Struct)):
                    text = pl.lit(pl.Series([None if v is None else json.dumps(v.to_list() if hasattr(v, "to_list")
                                                                                else v)
                                             for v in frame.get_column(column.col)], dtype=pl.String))
                else:
                    text = pl.col(column.col).cast(pl.String)
                texts.append((text.str.replace_all(ONE_LINE, "") if spec.one_line else text).alias(f"__sst{c}"))
                measures |= self.distinct_texts(c)
                measures[f"len{c}"] = pl.col(f"__sst{c}").str.len_chars().max()  # its width, and whether to clip
            elif dtype != pl.Boolean and dtype.is_numeric() and not spec.text:
                values = pl.col(column.col).cast(pl.Float64)
                values = values.filter(values.is_finite()) * (spec.scale or 1)
                measures[f"max{c}"], measures[f"min{c}"] = values.max(), values.min()
            elif dtype != pl.Boolean:
                text = pl.col(column.col).cast(pl.String)  # an integer written as text
                measures[f"len{c}"] = text.str.len_chars().max()
        shown = frame.with_columns(texts) if texts else frame
        measured = shown.select(**measures).row(0, named=True) if measures else {}
        long = [c for c in range(len(columns)) if f"count{c}" in measured
                and isinstance(measured[f"len{c}"], int) and measured[f"len{c}"] > MAX_CELL_CHARS]
        if long:  # rare: the distinct texts again, clipped
            shown = shown.with_columns(pl.col(f"__sst{c}").map_elements(clip, return_dtype=pl.String) for c in long)
            measured |= shown.select(**{k: v for c in long for k, v in self.distinct_texts(c).items()}
                                     ).row(0, named=True)
        return shown, measured

    @staticmethod
    def distinct_texts(c: int) -> dict[str, pl.Expr]:
        return {f"unique{c}": pl.col(f"__sst{c}").drop_nulls().unique(maintain_order=True).implode(),
                f"count{c}": pl.col(f"__sst{c}").count()}

    def rows_xml(self, ws: BulkWorksheet, first: int, columns: list[Column], shown: pl.DataFrame, measured: dict,
                 more: MoreColumns | None) -> str:
        """<row> elements for the rows of SHOWN (`shown_and_measured`) from row `first`: one string expression per
        column, in one query.

        Text goes to the shared string table (xlsxwriter escapes it there as it does for write_string), so a cell
        holds only the string's index: text is never a formula, whatever it starts with.
        """
        row_numbers = pl.int_range(first + 1, first + 1 + shown.height).cast(pl.String)
        marked_label = None
        if more and more.mark and more.mark in shown.columns:
            marked_label = pl.col(more.mark).cast(pl.Int64, strict=False).cast(pl.String)
        schema = shown.schema
        cells = [self.cell_xml(c, column, schema[column.col], row_numbers,
                               marked_label == column.label if marked_label is not None and column.label else None,
                               self.shared_string_indices(ws, c, measured))
                 for c, column in enumerate(columns)]
        return shown.select(pl.concat_str([pl.lit('<row r="'), row_numbers, pl.lit('">'), *cells, pl.lit("</row>")])
                            .str.join("")).item()

    def is_text(self, column: Column, dtype: pl.DataType) -> bool:
        """Text that goes through the shared string table (integers written as text do not: see cell_xml)."""
        return not (dtype == pl.Boolean or dtype.is_numeric())

    @staticmethod
    def shared_string_indices(ws: BulkWorksheet, c: int, measured: dict) -> pl.Expr | None:
        """Each text of shared-string column C as its index in the workbook's shared string table, as text (null
        stays null); None for a column of other values. The distinct texts (`shown_and_measured`) enter the table
        in order, as write_string would put them, and every reference counts."""
        if f"unique{c}" not in measured:
            return None
        table, uniques = ws.str_table, measured[f"unique{c}"]
        indices = [str(table._get_shared_string_index(u)) for u in uniques]
        table.count += measured[f"count{c}"] - len(indices)
        return pl.col(f"__sst{c}").replace_strict(pl.Series(uniques, dtype=pl.String),
                                                  pl.Series(indices, dtype=pl.String), default=None)

    def cell_xml(self, c: int, column: Column, dtype: pl.DataType, row_numbers: pl.Expr, marked: pl.Expr | None,
                 string_index: pl.Expr | None):
        """The <c> element of each row for one column ("" where the value is null)."""
        ref = pl.concat_str([pl.lit(f'<c r="{xl_col_to_name(c)}'), row_numbers])
        if string_index is not None:
            body = pl.concat_str([ref, pl.lit('" t="s"><v>'), string_index, pl.lit("</v></c>")])
            return body.fill_null("")
        value = pl.col(column.col)
        spec = self.style.formats[column.format]
        if spec.text:
            # An integer as text (exact epoch nanoseconds): inline, as its digits need no escaping, and nearly
            # every value is unique, so the shared string table would only grow.
            digits = (value if dtype.is_integer() else value.cast(pl.Float64)).cast(pl.String)
            body = pl.concat_str([ref, pl.lit('" t="inlineStr"><is><t>'), digits, pl.lit("</t></is></c>")])
            return body.fill_null("")
        if dtype == pl.Boolean:
            style_id = self.cell_format("boolean")._get_xf_index()
            body = pl.concat_str([ref, pl.lit(f'" s="{style_id}" t="b"><v>'), value.cast(pl.Int8).cast(pl.String),
                                  pl.lit("</v></c>")])
            return body.fill_null("")
        if dtype.is_integer() and not spec.scale:
            number, present = value, value.is_not_null()  # exact digits (int64 beyond 2^53 should use a text format)
        else:
            number = (value.cast(pl.Float64) * (spec.scale or 1)).round_sig_figs(self.style.significant_digits)
            present = number.is_finite()
        style = pl.lit(f'" s="{self.cell_format(column.format)._get_xf_index()}"><v>')
        if marked is not None:
            marked_style = f'" s="{self.cell_format(column.format, "marked")._get_xf_index()}"><v>'
            style = pl.when(marked).then(pl.lit(marked_style)).otherwise(style)
        body = pl.concat_str([ref, style, number.cast(pl.String), pl.lit("</v></c>")])
        return pl.when(present).then(body).otherwise(pl.lit(""))

    def content_widths(self, columns: list[Column], schema: pl.Schema, measured: dict) -> list[int]:
        """The widest value of each column as shown, in characters, from the extremes `shown_and_measured` found."""
        widths = []
        for c, column in enumerate(columns):
            dtype, spec = schema[column.col], self.style.formats[column.format]
            if dtype == pl.Boolean:
                widths.append(3)
            elif isinstance(dtype, (pl.List, pl.Array, pl.Struct)):
                widths.append(self.style.widths["max"])
            elif f"len{c}" in measured:
                widths.append(min(measured[f"len{c}"] or 0, MAX_CELL_CHARS))
            elif measured[f"max{c}"] is None:
                widths.append(0)
            else:
                widths.append(max(number_width(spec, measured[f"max{c}"]), number_width(spec, measured[f"min{c}"])))
        return widths

    @staticmethod
    def add_series_runs(chart, spec: Chart, frame: pl.DataFrame, index: dict, sheet: str, first: int) -> None:
        """One series per run of equal `series_by` values (rows first..): x from `categories`, y from the first of
        `values`."""
        x, y = index[spec.categories], index[next(v for v in spec.values if v in index)]
        runs = (frame.with_row_index("__row").group_by(pl.col(spec.series_by).rle_id().alias("__run"))
                .agg(pl.col(spec.series_by).first(), pl.col("__row").min().alias("start"),
                     pl.col("__row").max().alias("end")).sort("start"))
        for label, start, end in runs.select(spec.series_by, "start", "end").iter_rows():
            series = {"name": str(label), "categories": [sheet, first + start, x, first + end, x],
                      "values": [sheet, first + start, y, first + end, y]}
            if label in spec.lines:
                series |= {"line": {"width": 2}, "marker": {"type": "none"}}
            else:
                series |= {"marker": {"type": "circle", "size": 5}, "line": {"none": True}}
            chart.add_series(series)

    def insert_chart(self, ws, top: int, spec: Chart, columns: list[Column], frame: pl.DataFrame, name: str) -> int:
        """A native chart to the right of the table; returns the first row below it."""
        index = {c.col: i for i, c in enumerate(columns)}
        if spec.categories not in index or not any(v in index for v in spec.values):
            self.problems.append(f"sheet {name!r}: chart {spec.title!r} needs columns {spec.categories}, {spec.values}")
            return top
        charted = frame.height
        if spec.skip:
            charted -= frame.get_column(spec.categories).cast(pl.String).is_in(list(spec.skip)).sum()
        if charted <= 0:
            return top
        options = {"type": spec.type}
        if spec.stacked and spec.type in ("column", "bar"):
            options["subtype"] = "stacked"
        chart = self.book.add_chart(options)
        first, last = top + 1, top + charted
        sheet = name.replace("'", "''")
        if spec.series_by is not None and spec.series_by in frame.columns:
            self.add_series_runs(chart, spec, frame.head(charted), index, sheet, first)
        for value in (() if spec.series_by is not None else spec.values):
            if value not in index:
                continue
            series = {
                "name": [sheet, top, index[value]],
                "categories": [sheet, first, index[spec.categories], last, index[spec.categories]],
                "values": [sheet, first, index[value], last, index[value]],
            }
            if spec.type == "pie":
                series["data_labels"] = {"percentage": True, "category": True, "leader_lines": True}
            chart.add_series(series)
        chart.set_title({"name": spec.title} if spec.title else {"none": True})
        if spec.type != "pie":
            log = {"log_base": 10, "crossing": "min"} if spec.log_axes else {}
            chart.set_x_axis({**({"name": spec.x_title} if spec.x_title else {}), **log})
            chart.set_y_axis({**({"name": spec.y_title} if spec.y_title else {}), **log})
            if spec.type == "bar":
                chart.set_y_axis({"reverse": True})  # first row on top, as in the table
            if len(spec.values) == 1 and spec.series_by is None:
                chart.set_legend({"none": True})
        width, height = self.style.chart["width"], self.style.chart["height"]
        chart.set_size({"width": width, "height": height})
        ws.insert_chart(xl_rowcol_to_cell(top, len(columns) + 1), chart)
        ws.chart_right_col = max(ws.chart_right_col, len(columns) + 1 + math.ceil(width / DEFAULT_COL_PX))
        return top + math.ceil(height / CHART_ROW_PX) + 1

    def close(self) -> None:
        self.book.close()


def write_workbook(path: Path, sheets: list[Sheet], style: Style) -> list[str]:
    """Write `sheets` to `path`; returns problems met (missing columns, truncated sheets), one line each."""
    writer = WorkbookWriter(path, style)
    taken: set[str] = set()
    for sheet in sheets:
        writer.write_sheet(sheet, taken)
    writer.close()
    return writer.problems


def fit(widths: dict[int, float], col: int, chars: float, style: Style) -> None:
    wanted = min(style.widths["max"], max(style.widths["min"], chars + style.widths["padding"]))
    widths[col] = max(widths.get(col, 0), wanted)


def number_width(spec: NumberFormat, value: float) -> int:
    if spec.python:
        try:
            return len(spec.python.format(value))
        except (ValueError, TypeError):
            pass
    return len(repr(value))


def clip(text: str) -> str:
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + "…"
