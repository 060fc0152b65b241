"""Where inputs are resolved and checked, for the API and the CLI alike.

`resolve_inputs` says what the paths a user gave name: one ingested dataset, or trace files (directories expanded).
`check_tables` applies the rules every reader of traces gets, from `tracekit.load`, `tracekit.open` or a command:
an input with no events is refused (InputError), and each cut (truncated) trace file is reported as a
`CutTraceWarning` (its complete entries were read; the `truncated` rows of `diagnostics` say where it was cut).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit import storage
from tracekit.errors import InputError
from tracekit.storage import Location

if TYPE_CHECKING:  # resolving inputs needs no Arrow: `tracekit --help` and the commands' checks import this module
    import pyarrow as pa

    from tracekit.engine.tables import TraceTables

TRACE_SUFFIXES = (".json", ".json.gz")
UNREADABLE = "file_unreadable"  # diagnostics reason of a trace file left out because it could not be read
NOT_TRACES = ("ground_truth.json",)  # written beside its traces by `tracekit synth`; skipped in directory scans


class CutTraceWarning(UserWarning):
    """A trace file ends mid-way (cut while written or copied): its complete entries were read, the rest is lost.

    The message is `FILE: what was recovered`; the same text is the `detail` of the file's `truncated` row in the
    `diagnostics` table. Silence it with `warnings.simplefilter("ignore", tracekit.CutTraceWarning)`, or turn it into
    an error with "error".
    """


class LeftOutFileWarning(UserWarning):
    """A trace file among several could not be read (not JSON, not a trace, unreadable): it was left out and the
    others were read. The message is `FILE: why`; the file's `file_unreadable` row in `diagnostics` says the same.
    When no file can be read, InputError is raised instead."""


INPUT_WARNINGS = (CutTraceWarning, LeftOutFileWarning)  # what the reader says about its input files


@dataclass(frozen=True)
class Inputs:
    """The paths (or URLs) a user gave, resolved: one ingested dataset, or the trace files they name."""

    given: tuple[str | Path, ...]  # as given (messages name these)
    dataset: Location | None = None  # the ingested dataset folder, when the input is exactly one
    files: tuple[Location, ...] = ()  # the trace files (directories expanded, sorted); empty for a dataset
    graph_captures: tuple[Location, ...] = ()  # capture traces of the CUDA/HIP graphs the inputs replay

    @property
    def label(self) -> str:
        return ", ".join(map(str, self.given))


def resolve_inputs(paths: str | Path | Iterable[str | Path] | Inputs,
                   graph_captures: str | Path | Iterable[str | Path] = ()) -> Inputs:
    """What PATHS name: exactly one ingested dataset folder, or trace files and directories of them (checked to
    exist and be regular files; InputError naming the path otherwise). Each may be a local path or a URL
    (`s3://bucket/traces/`, any file system fsspec knows: tracekit.storage). Inputs already resolved are returned
    as they are, GRAPH_CAPTURES added when given.

    GRAPH_CAPTURES: trace files (or directories of them) of capturing the CUDA/HIP graphs the inputs replay
    (`--graph-capture FILE`): each replayed kernel is owned by the op it was captured under
    (tracekit.link.graph_capture). Checked like the inputs."""
    captures = (graph_captures,) if isinstance(graph_captures, (str, Path)) else tuple(graph_captures)
    found = tuple(find_trace_files(captures)) if captures else ()
    if isinstance(paths, Inputs):
        return replace(paths, graph_captures=found) if found else paths
    given = (paths,) if isinstance(paths, (str, Path)) else tuple(paths)
    if len(given) == 1 and is_dataset(storage.location(given[0])):
        return Inputs(given, dataset=storage.location(given[0]), graph_captures=found)
    return Inputs(given, files=tuple(find_trace_files(given)), graph_captures=found)


def resolve_captures(path: str | Path) -> list[Inputs] | None:
    """The captures of one configuration a directory holds, one `Inputs` per subdirectory (in name order); None when
    PATH is not such a directory.

    A directory of captures holds no trace file itself, and each of its subdirectories is one capture: trace files
    (the ranks of one run) or an ingested dataset. A directory that holds trace files is the ranks of one run, as
    everywhere else; a subdirectory of a directory of captures that holds neither is refused (InputError)."""
    loc = storage.location(path)
    if path_kind(loc) != "dir" or is_dataset(loc) or any(is_trace_file(f) for f in list_dir(loc)):
        return None
    below = [storage.relative(f, loc) for f in storage.find_files(loc)]
    subdirs = sorted({rel.replace("\\", "/").split("/")[0] for rel in below if "/" in rel.replace("\\", "/")})
    if not subdirs:
        return None
    captures = []
    for sub in (storage.join(loc, d) for d in subdirs):
        if not is_dataset(sub) and not any(is_trace_file(f) for f in list_dir(sub)):
            raise InputError(f"{sub}: holds no trace files (*.json, *.json.gz) nor a dataset; in a directory of "
                             "captures every subdirectory is one capture")
        captures.append(resolve_inputs(sub))
    return captures


def is_trace_file(path: Location) -> bool:
    return storage.name(path).endswith(TRACE_SUFFIXES) and storage.name(path) not in NOT_TRACES


def is_dataset(path: Location) -> bool:
    """The one test of "is this an ingested dataset": a folder holding the `_tracekit.json` marker."""
    path = storage.location(path)
    if storage.is_url(path) and path_kind(path) != "dir":  # one look-up, and a bad URL is named as given
        return False
    return path_kind(storage.join(path, storage.DATASET_MARKER)) == "file"


def path_kind(path: Location) -> str | None:
    """'dir', 'file', 'other' (FIFO, device, socket) or None (nothing there). A path the system refuses to look up
    (a name over the file system's limit, a loop of links), or a URL whose store cannot be reached, is a user
    error naming it, not a traceback."""
    try:
        return storage.kind(path)
    except OSError as exc:
        raise InputError(f"{path}: {(exc.strerror or str(exc)).lower()}") from None
    except ValueError as exc:  # an embedded NUL byte; a URL of an unknown scheme
        if storage.is_url(path):
            raise InputError(f"{path}: not a usable URL ({exc})") from None
        raise InputError(f"{path!r}: not a usable path ({exc})") from None
    except ImportError as exc:  # fsspec's message names the package that reads the URL's scheme (s3fs, gcsfs)
        raise InputError(f"{path}: {exc}") from None


def find_trace_files(paths: Iterable[str | Path]) -> list[Location]:
    """Expand directories into the trace files they hold (sorted); check that every path exists."""
    files: list[Location] = []
    for p in map(storage.location, paths):
        kind = path_kind(p)
        if kind == "dir":
            if is_dataset(p):
                raise InputError(f"{p}: an ingested dataset is read on its own (give it as the only input)")
            found = trace_files_in(p)
            if not found:
                raise InputError(f"{p}: directory holds no trace files (*.json, *.json.gz)")
            files += found
        elif kind is not None:
            # a FIFO or a device would block or never end: refused before anything opens it
            if kind != "file":
                raise InputError(f"{p}: not a regular file (a trace is a file or a directory of files)")
            files.append(p)
        elif isinstance(p, Path) and p.is_symlink():
            raise InputError(f"{p}: broken symbolic link (to {os.readlink(p)}, which does not exist)")
        else:
            raise InputError(f"{p}: no such file or directory")
    if not files:
        raise InputError("no trace files given")
    return files


def trace_files_in(folder: Location) -> list[Location]:
    """The trace files a directory holds (sorted): what a directory given as input stands for."""
    return [f for f in list_dir(folder) if is_trace_file(f)]


def list_dir(path: Location) -> list[Location]:
    """The files in a directory (sorted); InputError when it cannot be listed."""
    try:
        return storage.list_files(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot list ({(exc.strerror or str(exc)).lower()})") from None


def check_tables(tables: TraceTables, inputs: Inputs, require_events: bool = True) -> TraceTables:
    """The tables read from INPUTS, checked: refused when they hold no events (unless not `require_events`), and a
    CutTraceWarning for each cut trace file among them."""
    if require_events:
        refuse_no_events({name: t.num_rows for name, t in tables.items()}, tables.diagnostics, list(inputs.given))
    warn_about_files(tables.diagnostics)
    return tables


def refuse_no_events(rows: dict[str, int], diagnostics: pa.Table, files: list[str | Path]) -> None:
    """InputError when the files (whose tables have ROWS per table and DIAGNOSTICS) hold nothing to analyse: no
    event, instant or Execution Trace node (an empty report or query result helps nobody; the message says whether
    entries were there but unusable)."""
    if rows.get("events") or rows.get("instants") or rows.get("et_nodes"):
        return
    named = ", ".join(map(str, files[:3])) + (f" (and {len(files) - 3} more files)" if len(files) > 3 else "")
    dropped = sum(diagnostics.column("dropped").to_pylist())
    why = f"none of its {dropped:,} entries is a usable event" if dropped else "traceEvents is empty"
    raise InputError(f"{named}: no trace events ({why})")


@dataclass(frozen=True)
class FileRun:
    """What a trace file says about the run it belongs to: the fields that must agree between ranks of one run."""

    path: str
    world_size: int | None
    devices: frozenset[str]
    pytorch_version: str | None
    span: tuple[int, int] | None  # first event start, last event end (epoch ns)


def refuse_unrelated(files: list[FileRun]) -> None:
    """InputError (one line naming the files and why) when trace files read together as the ranks of one run cannot
    be: their world sizes, devices or PyTorch versions differ, or their time spans do not overlap (ranks of one run
    are profiled at the same time). A property a file does not record is not held against it. `--as-ranks` (the
    caller not calling this) reads them as one run anyway."""
    if len(files) < 2:
        return
    reasons = []
    for what, value in (("world size", lambda f: f.world_size), ("PyTorch version", lambda f: f.pytorch_version),
                        ("device", lambda f: ", ".join(sorted(f.devices)) or None)):
        known = {f.path: value(f) for f in files if value(f) is not None}
        if len(set(known.values())) > 1:
            reasons.append(f"{what} " + ", ".join(f"{v} in {storage.name(storage.location(p))}"
                                                  for p, v in list(known.items())[:4]))
    spans = sorted((f.span, f.path) for f in files if f.span is not None)
    reach, last = (spans[0][0][1], spans[0][1]) if spans else (None, None)
    for (start, end), path in spans[1:]:
        if start > reach:
            reasons.append(f"their time spans do not overlap ({storage.name(storage.location(last))} ends before "
                           f"{storage.name(storage.location(path))} starts)")
            break
        if end > reach:
            reach, last = end, path
    if reasons:
        named = ", ".join(f.path for f in files[:4]) + (f" (and {len(files) - 4} more)" if len(files) > 4 else "")
        raise InputError(f"{named}: not ranks of one run: {'; '.join(reasons)} (diff them, or pass --as-ranks to "
                         "read them as one run anyway)")


def files_noted(diagnostics: pa.Table, reason: str) -> list[tuple[str, str]]:
    """(file, detail) for each file with a REASON row in a diagnostics table: `truncated` (a cut file: what was
    recovered), `file_unreadable` (a file left out: why)."""
    import pyarrow.compute as pc

    rows = diagnostics.filter(pc.equal(diagnostics.column("reason"), reason))
    return list(dict.fromkeys(zip(rows.column("source_file").to_pylist(), rows.column("detail").to_pylist())))


def warn_about_files(diagnostics: pa.Table) -> None:
    """A CutTraceWarning for each cut trace file and a LeftOutFileWarning for each file left out, as DIAGNOSTICS
    name them, shown at the caller's line that called tracekit (not a line inside it)."""
    for reason, category in (("truncated", CutTraceWarning), (UNREADABLE, LeftOutFileWarning)):
        for source, detail in files_noted(diagnostics, reason):
            message = f"{detail}; left out (the other files were read)" if category is LeftOutFileWarning \
                else f"{source}: {detail}"
            warnings.warn(message, category, stacklevel=outside_tracekit())


def outside_tracekit() -> int:
    """The `stacklevel` of the first frame outside this package, for a warning issued by the caller of this."""
    frame, level = sys._getframe(2), 2
    while frame.f_back is not None and frame.f_code.co_filename.startswith(PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


PACKAGE_DIR = str(Path(__file__).parent) + os.sep
