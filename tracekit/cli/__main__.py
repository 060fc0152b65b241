"""`python -m tracekit.cli`."""

from tracekit.cli import run

run()
