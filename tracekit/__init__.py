"""tracekit: PyTorch profiler traces → Arrow tables, SQL analyses, Excel reports and diffs."""

from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.link.edges import build_edges
from tracekit.output.dataset import write_dataset
from tracekit.pipeline import load
from tracekit.query.database import TraceDatabase, from_tables, open_traces
from tracekit.read.dataset import read_dataset

open = open_traces  # tracekit.open(paths): the notebook entry point (shadows the builtin only as tracekit.open)

__all__ = ["InputError", "TraceDatabase", "TraceTables", "build_edges", "from_tables", "load", "open_traces",
           "read_dataset", "write_dataset"]
__version__ = "0.1.0"
