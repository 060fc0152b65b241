"""tracekit: PyTorch profiler traces → Arrow tables, SQL analyses, Excel reports and diffs."""

from .edges import build_edges
from .errors import InputError
from .loader import load, read_dataset, write_dataset
from .tables import TraceTables

__all__ = ["InputError", "build_edges", "TraceTables", "load", "read_dataset", "write_dataset"]
__version__ = "0.1.0"
