"""tracekit: PyTorch profiler traces → Arrow tables, SQL analyses, Excel reports and diffs."""

from importlib import import_module

# The public API, imported on first use: `import tracekit.cli` (every command) runs this file first, and a command
# should pay only for the modules it uses (bench/RESULTS.md, 2026-11-25: imports are most of a small report).
_PUBLIC = {
    "InputError": "tracekit.errors",
    "TraceDatabase": "tracekit.query.database",
    "TraceTables": "tracekit.engine.tables",
    "build_edges": "tracekit.link.edges",
    "from_tables": "tracekit.query.database",
    "load": "tracekit.pipeline",
    "open_traces": "tracekit.query.database",
    "read_dataset": "tracekit.read.dataset",
    "write_dataset": "tracekit.output.dataset",
}

__all__ = sorted(_PUBLIC)
__version__ = "0.1.0"


def __getattr__(name: str):
    # tracekit.open(paths): the notebook entry point (shadows the builtin only as tracekit.open)
    attribute = "open_traces" if name == "open" else name
    if attribute not in _PUBLIC:
        raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
    value = getattr(import_module(_PUBLIC[attribute]), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC, "open"])
