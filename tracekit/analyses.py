"""Deprecated import path, kept for one release: use `tracekit.query.analyses` (running analyses) and
`tracekit.engine.catalog` (the query files and connections)."""

from tracekit.engine.catalog import available, connect, data_dir, load_query, preludes, queries_dir, sql
from tracekit.query.analyses import analysis_inputs, run, run_all, run_into

__all__ = ["analysis_inputs", "available", "connect", "data_dir", "load_query", "preludes", "queries_dir", "run",
           "run_all", "run_into", "sql"]
