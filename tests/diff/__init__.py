"""Tests of the diff: sections, verdicts, captures, the workbook and the terminal."""
