"""The `tracekit` command: a thin layer over the Python API (`tracekit`, `tracekit.diff`, `tracekit.synth`).

`app` holds the command group and what every command shares (user errors: one line, exit code 2; warnings and exit
code 3; reading inputs with a progress bar); the commands are grouped by what they do: `traces` (ingest, report,
graph, synth), `compare` (diff), `query` (sql, run, queries, schema), `export` (export chakra, timeline), `replay`;
`shell` is the SQL prompt. Each module registers its commands on `main` when `main` first needs them
(app.COMMAND_MODULES).
"""

import os

# numpy's OpenBLAS starts a thread per core as it loads, each spinning a while, for matrix work tracekit never does:
# the import took 2.4 CPU s instead of 0.45 on 16 cores (bench/RESULTS.md, "Many cores"). A command is a process
# of its own: one BLAS thread. (Before anything imports numpy; a user's own setting stays.)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from tracekit.cli.app import INCOMPLETE_EXIT_CODE, main, run  # noqa: E402

__all__ = ["INCOMPLETE_EXIT_CODE", "main", "run"]
