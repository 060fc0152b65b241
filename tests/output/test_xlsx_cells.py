"""Text cells as the workbook writer shows them, read back from the file: one line where the format says so, cut
to Excel's 32,767 characters, lists as JSON, nulls empty, and each distinct text once in the shared string table
with every reference counted (tracekit/output/xlsx.py writes rows in bulk, not through write_string)."""

from __future__ import annotations

import json
import re
import zipfile

import openpyxl
import polars as pl

from tracekit.output import workbooks
from tracekit.output.xlsx import Block, Column, Sheet, write_workbook

LONG = "x" * 40_000


def shown(value, one_line: bool):
    """What a cell must hold, computed here from Excel's limits and the style's description."""
    if value is None:
        return None
    text = json.dumps(value) if isinstance(value, list) else str(value)
    if one_line:
        text = re.sub(r"\r?\n[ \t]*", "", text)
    return text if len(text) <= 32_767 else text[:32_766] + "…"


def test_text_cells_read_back_as_shown(tmp_path):
    frame = pl.DataFrame({
        "name": ["a\n   b", LONG, None, "shared", "=1+1"],
        "args": ['{\n  "x": 1\n}', "shared", "a\n   b", None, LONG + "\n y"],
        "dims": [[1, 2], None, [3], [], [1, 2]],
        "count": [1, 2, 3, 4, 5],
    })
    columns = (Column("name", "Name", "text"), Column("args", "Args", "json"), Column("dims", "Dims", "text"),
               Column("count", "Count", "count"))
    block = Block("cells", columns=columns)
    path = tmp_path / "cells.xlsx"
    assert write_workbook(path, [Sheet("Cells", ((block, frame),))], workbooks.style()) == []

    book = openpyxl.load_workbook(path, read_only=True)
    rows = list(book["Cells"].iter_rows(values_only=True))
    book.close()
    header = next(i for i, row in enumerate(rows) if row[:4] == ("Name", "Args", "Dims", "Count"))
    got = [row[:4] for row in rows[header + 1:header + 1 + frame.height]]
    expected = [(shown(n, False), shown(a, True), shown(d, False), c) for n, a, d, c in frame.iter_rows()]
    assert got == expected

    texts = [t for column, one_line in (("name", False), ("args", True), ("dims", False))
             for t in (shown(v, one_line) for v in frame[column].to_list()) if t is not None]
    headers = ["Name", "Args", "Dims", "Count"]
    with zipfile.ZipFile(path) as package:
        table = package.read("xl/sharedStrings.xml").decode()
    count, unique = (int(re.search(rf'{key}="(\d+)"', table).group(1)) for key in ("count", "uniqueCount"))
    assert unique == len(set(texts) | set(headers))
    assert count == len(texts) + len(headers)
