"""tracekit: PyTorch profiler traces → Arrow tables, SQL analyses, Excel reports and diffs."""

from .database import TraceDatabase, from_tables, open_traces
from .edges import build_edges
from .errors import InputError
from .loader import load, read_dataset, write_dataset
from .tables import TraceTables

open = open_traces  # tracekit.open(paths): the notebook entry point (shadows the builtin only as tracekit.open)

__all__ = ["InputError", "TraceDatabase", "TraceTables", "build_edges", "from_tables", "load", "open_traces",
           "read_dataset", "write_dataset"]
__version__ = "0.1.0"
