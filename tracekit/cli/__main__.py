"""`python -m tracekit.cli`."""

from tracekit.cli import main

main()
