"""The bench suite: run.py (every command, one table each), measure.py (fresh-process timing and peak RSS), studies."""
