"""The `tracekit` command: a thin layer over the Python API (`tracekit`, `tracekit.diff`, `tracekit.synth`).

`app` holds the command group and what every command shares (user errors: one line, exit code 2; warnings and exit
code 3; reading inputs with a progress bar); the commands are grouped by what they do: `traces` (ingest, report,
graph, synth), `compare` (diff), `query` (sql, run, queries, schema), `export` (export chakra, timeline), `replay`;
`shell` is the SQL prompt. Each module registers its commands on `main` when `main` first needs them
(app.COMMAND_MODULES).
"""

from tracekit.cli.app import INCOMPLETE_EXIT_CODE, main, run

__all__ = ["INCOMPLETE_EXIT_CODE", "main", "run"]
