"""tracekit: PyTorch profiler traces → Arrow tables, SQL analyses, Excel reports and diffs.

The stable API is what `__all__` names (README, "Python API"):

    import tracekit
    tables = tracekit.load("traces/")             # TraceTables; InputError for unusable input
    db = tracekit.open("traces/")                 # TraceDatabase: db.sql(...), db.query("op_summary", rank=0)
    tracekit.write_reports(tables, "report/")     # the Excel workbooks of `tracekit report`
    result = tracekit.diff.compare(tracekit.load("base/"), tracekit.load("cand/"))
    tracekit.synth.generate("example/", ranks=2, steps=4)

Inputs follow the rules of the commands (`tracekit.inputs`): a bad path or an input with no events raises
InputError with the message the command prints, and a cut trace file issues a CutTraceWarning.
"""

from tracekit import diff, synth
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.inputs import CutTraceWarning, resolve_inputs
from tracekit.link.edges import build_edges
from tracekit.output.dataset import write_dataset
from tracekit.output.graph import write_graph
from tracekit.output.workbooks import run_analyses, write_reports
from tracekit.pipeline import load
from tracekit.query.database import TraceDatabase, from_tables, open_traces
from tracekit.read.dataset import read_dataset

# tracekit.open(paths): the notebook entry point. Not in __all__: `from tracekit import *` would shadow the builtin.
open = open_traces

__all__ = ["CutTraceWarning", "InputError", "TraceDatabase", "TraceTables", "build_edges", "diff", "from_tables",
           "load", "open_traces", "read_dataset", "resolve_inputs", "run_analyses", "synth", "write_dataset",
           "write_graph", "write_reports"]
__version__ = "0.1.0"
