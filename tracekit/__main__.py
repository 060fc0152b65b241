"""`python -m tracekit`: the `tracekit` command, as `python -m tracekit.cli` and the installed script run it."""

from tracekit.cli import run

run()
