"""Outputs written under a temporary name beside the target and renamed into place only once complete.

A command that fails half-way leaves no partial file, and an existing output it was about to replace untouched.
The temporary names are hidden (`.NAME.XXXX.partial`) and in the target's own directory, so the final rename
stays on one file system (atomic).
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tracekit.errors import InputError


def through_link(path: Path) -> Path:
    """A symbolic link's target: the output replaces what the link points to, as writing through it would."""
    return path.resolve() if path.is_symlink() else path


def partial_name(path: Path) -> Path:
    """A fresh hidden name beside `path` (nothing is created)."""
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.partial")


@contextmanager
def replacing_files(paths: Iterable[Path]) -> Iterator[list[Path]]:
    """Temporary paths to write `paths` to; each is renamed onto its target when the block ends without error, and
    all are removed when it fails (existing targets are then left as they were)."""
    targets = [through_link(Path(p)) for p in paths]
    temporary = [partial_name(p) for p in targets]
    try:
        yield temporary
        for temp, target in zip(temporary, targets):
            os.replace(temp, target)
    except OSError as exc:
        # name the output, not its temporary name
        named = next((t for t, temp in zip(targets, temporary) if str(temp) == str(exc.filename)), None)
        raise InputError(f"{named or exc.filename or targets[0]}: cannot write ({exc.strerror})") from None
    finally:
        for temp in temporary:
            remove(temp)


@contextmanager
def replacing_file(path: Path) -> Iterator[Path]:
    """`replacing_files` for one file."""
    with replacing_files([path]) as (temp,):
        yield temp


@contextmanager
def replacing_dir(path: Path) -> Iterator[Path]:
    """A new empty directory beside `path` to fill; when the block succeeds it takes `path`'s place (an existing
    `path` is removed only then); when it fails it is removed and `path` is left as it was."""
    path = through_link(Path(path))
    temp = partial_name(path)
    try:
        temp.mkdir()
        yield temp
        if path.is_dir():
            old = partial_name(path)
            os.replace(path, old)
            try:
                os.replace(temp, path)
            except OSError:
                os.replace(old, path)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(temp, path)
    except OSError as exc:
        raise InputError(f"{path}: cannot write ({exc.strerror})") from None
    finally:
        remove(temp)


@contextmanager
def created_dir(path: Path) -> Iterator[Path]:
    """`path` made (with missing parents) for the block; what this made is removed again when the block fails."""
    path = Path(path)
    top = None  # the outermost directory this makes
    for missing in (path, *path.parents):
        if missing.exists():
            break
        top = missing
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{path}: cannot create directory ({exc.strerror})") from None
    try:
        yield path
    except BaseException:
        if top is not None:
            shutil.rmtree(top, ignore_errors=True)
        raise


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextmanager
def staging_dir(parent: Path) -> Iterator[Path]:
    """A new hidden directory in `parent` (which exists) for outputs written by other processes before they are
    moved into place; removed with whatever is left in it when the block ends."""
    path = partial_name(Path(parent) / "staging")
    try:
        path.mkdir()
    except OSError as exc:
        raise InputError(f"{parent}: cannot write ({exc.strerror})") from None
    try:
        yield path
    finally:
        remove(path)
