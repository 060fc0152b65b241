"""Deprecated import path, kept for one release: use `tracekit.output.workbooks`."""

from tracekit.output.workbooks import (
                                       WORKBOOKS,
                                       Analyses,
                                       check_out_dir,
                                       existing_workbooks,
                                       report_queries,
                                       run_analyses,
                                       workbook_spec,
                                       workbook_specs,
                                       write_reports,
)

__all__ = ["WORKBOOKS", "Analyses", "check_out_dir", "existing_workbooks", "report_queries", "run_analyses",
           "workbook_spec", "workbook_specs", "write_reports"]
