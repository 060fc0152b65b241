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

from tracekit.lazy import lazy_attributes

# The public API, imported on first use: `import tracekit.cli` (every command) runs this file first, and a command
# should pay only for the modules it uses (bench/RESULTS.md, 2026-11-25: imports are most of a small report).
# name → the module that defines it (a module name alone: the name is that sub-package).
_PUBLIC = {
    "CutTraceWarning": "tracekit.inputs",
    "LeftOutFileWarning": "tracekit.inputs",
    "InputError": "tracekit.errors",
    "TraceDatabase": "tracekit.query.database",
    "TraceTables": "tracekit.engine.tables",
    "build_edges": "tracekit.link.edges",
    "diff": "tracekit.diff",
    "from_tables": "tracekit.query.database",
    "load": "tracekit.pipeline",
    "open_traces": "tracekit.query.database",
    "read_dataset": "tracekit.read.dataset",
    "resolve_inputs": "tracekit.inputs",
    "run_analyses": "tracekit.output.workbooks",
    "synth": "tracekit.synth",
    "write_dataset": "tracekit.output.dataset",
    "write_graph": "tracekit.output.graph",
    "write_reports": "tracekit.output.workbooks",
}

__all__ = sorted(_PUBLIC)
__version__ = "0.1.0"
# tracekit.open(paths): the notebook entry point. Not in __all__: `from tracekit import *` would shadow the builtin.
__getattr__, __dir__ = lazy_attributes(__name__, _PUBLIC, {"open": "open_traces"})
