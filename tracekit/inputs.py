"""Where inputs are resolved and checked, for the API and the CLI alike: trace files and directories of them,
ingested datasets, and what makes an input unusable."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.read.dataset import DATASET_MARKER

TRACE_SUFFIXES = (".json", ".json.gz")
NOT_TRACES = ("ground_truth.json",)  # written beside its traces by `tracekit synth`; skipped in directory scans


def is_dataset(path: Path) -> bool:
    return path_kind(path / DATASET_MARKER) == "file"


def dataset_input(paths: list[str | Path]) -> Path | None:
    """The ingested dataset folder when PATHS is exactly one, else None: the one test of "is this a dataset"."""
    if len(paths) == 1 and path_kind(Path(paths[0])) == "dir" and is_dataset(Path(paths[0])):
        return Path(paths[0])
    return None


def path_kind(path: Path) -> str | None:
    """'dir', 'file', 'other' (FIFO, device, socket) or None (nothing there). A path the system refuses to look up
    (a name over the file system's limit, a loop of links) is a user error naming the path, not a traceback."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise InputError(f"{path}: {(exc.strerror or str(exc)).lower()}") from None
    except ValueError as exc:  # an embedded NUL byte
        raise InputError(f"{path!r}: not a usable path ({exc})") from None
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


def find_trace_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand directories into the trace files they hold (sorted); check that every path exists."""
    files: list[Path] = []
    for p in map(Path, paths):
        kind = path_kind(p)
        if kind == "dir":
            found = sorted(f for f in p.iterdir()
                           if f.is_file() and f.name.endswith(TRACE_SUFFIXES) and f.name not in NOT_TRACES)
            if not found:
                raise InputError(f"{p}: directory holds no trace files (*.json, *.json.gz)")
            files += found
        elif kind is not None:
            # a FIFO or a device would block or never end: refused before anything opens it
            if kind != "file":
                raise InputError(f"{p}: not a regular file (a trace is a file or a directory of files)")
            files.append(p)
        elif p.is_symlink():
            raise InputError(f"{p}: broken symbolic link (to {os.readlink(p)}, which does not exist)")
        else:
            raise InputError(f"{p}: no such file or directory")
    if not files:
        raise InputError("no trace files given")
    return files


def refuse_no_events(tables: TraceTables, files: list[str | Path]) -> None:
    """InputError when the files hold nothing to analyse: no event, instant or Execution Trace node.

    `load` refuses only inputs with no entry at all; the commands refuse these too (an empty report helps nobody),
    while a notebook can still look at the diagnostics of a file whose every entry was unusable.
    """
    if tables.events.num_rows or tables.instants.num_rows or tables.et_nodes.num_rows:
        return
    named = ", ".join(map(str, files[:3])) + (f" (and {len(files) - 3} more files)" if len(files) > 3 else "")
    dropped = sum(tables.diagnostics.column("dropped").to_pylist())
    why = f"none of its {dropped:,} entries is a usable event" if dropped else "traceEvents is empty"
    raise InputError(f"{named}: no trace events ({why})")
