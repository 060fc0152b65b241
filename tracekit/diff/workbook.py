"""The diff workbook: the frames of a DiffResult laid out by reports/diff.toml, written atomically."""

from __future__ import annotations

from pathlib import Path

from tracekit.diff.comparison import DiffResult
from tracekit.errors import InputError
from tracekit.output import workbooks as report
from tracekit.output import xlsx
from tracekit.output.atomic import replacing_file


def write_workbook(result: DiffResult, path: Path, force: bool = False) -> list[str]:
    """Write the comparison workbook laid out by reports/diff.toml to `path` (an existing file only with `force`);
    return the writer's notes (a column a section lacks, a sheet cut at Excel's row limit)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: is a directory (give the workbook's file name, e.g. diff.xlsx)")
    if path.exists() and not force:
        raise InputError(f"{path}: exists (use --force to replace it)")
    if not path.parent.is_dir():
        raise InputError(f"{path.parent}: no such directory")
    problems: list[str] = []
    sheets = report.sheets_for(report.workbook_spec("diff"), result.workbook_frames(), {}, problems)
    with replacing_file(path) as temp:
        problems += xlsx.write_workbook(temp, sheets, report.style())
    return problems

