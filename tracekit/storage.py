"""Where inputs and datasets live: a local path, or a URL of any file system fsspec knows (`s3://`, `gs://`,
`memory://`, `file://`, ...), so that processes on other machines can read and write them without a shared disk.

The one module that knows URLs. A location is a `Path` (local) or a `str` URL (`scheme://...`): a URL is never
made a Path, which would collapse its `//` (a `str` that is no URL is taken for a local path). Local paths keep the standard library's calls (and their speed);
fsspec is imported only when a URL is seen. Errors are OSErrors (FileNotFoundError, ...), worded by the callers.
S3 needs `pip install s3fs`, Google Cloud Storage `pip install gcsfs` (fsspec says so when one is missing).
"""

from __future__ import annotations

import re
import shutil
import stat
from pathlib import Path
from typing import IO, Union

Location = Union[Path, str]  # a local path, or a URL

URL_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
GZIP_MAGIC = b"\x1f\x8b"  # a gzip file's first bytes
# the file that makes a folder an ingested dataset (written last): here, so that telling one (`inputs.is_dataset`,
# before any command reads a byte) loads no reader and no pyarrow
DATASET_MARKER = "_tracekit.json"


def is_url(loc: object) -> bool:
    return isinstance(loc, str) and URL_PATTERN.match(loc) is not None


def location(text: str | Path) -> Location:
    """What a user gave: a URL stays the text it is, anything else is a path."""
    return text if is_url(text) else Path(text)


def join(loc: Location, *parts: str) -> Location:
    if not is_url(loc):
        loc = Path(loc)
        return loc.joinpath(*parts)
    return "/".join((loc.rstrip("/"), *parts))


def name(loc: Location) -> str:
    """The last part (a file's name)."""
    return loc.name if isinstance(loc, Path) else loc.rstrip("/").rpartition("/")[2]


def relative(loc: Location, base: Location) -> str:
    """LOC's path below BASE, with `/` between parts."""
    if not is_url(loc):
        loc = Path(loc)
        return loc.relative_to(base).as_posix()
    return loc[len(str(base).rstrip("/")) + 1:]


def filesystem(url: str):
    """(the fsspec file system of URL, its path there)."""
    from fsspec.core import url_to_fs
    return url_to_fs(url)


def kind(loc: Location) -> str | None:
    """'dir', 'file', 'other' (FIFO, device, socket) or None (nothing there). An object store's "directory" is a
    prefix that objects lie under."""
    if not is_url(loc):
        loc = Path(loc)
        try:
            mode = loc.stat().st_mode
        except (FileNotFoundError, NotADirectoryError):
            return None
        return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"
    fs, path = filesystem(loc)
    try:
        info = fs.info(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return {"directory": "dir", "file": "file"}.get(info.get("type"), "other")


def is_dir(loc: Location) -> bool:
    """`kind(loc) == "dir"`, False where it cannot be looked up (as Path.is_dir)."""
    try:
        return kind(loc) == "dir"
    except (OSError, ValueError):
        return False


def list_files(dir_loc: Location) -> list[Location]:
    """The files directly in a directory (or under a prefix, one level), as locations under DIR_LOC, sorted."""
    if not is_url(dir_loc):
        dir_loc = Path(dir_loc)
        return sorted(f for f in dir_loc.iterdir() if f.is_file())
    fs, path = filesystem(dir_loc)
    return sorted(join(dir_loc, name(e["name"])) for e in fs.ls(path, detail=True) if e.get("type") == "file")


def find_files(dir_loc: Location) -> list[Location]:
    """Every file below a directory (or prefix), at any depth, sorted."""
    if not is_url(dir_loc):
        dir_loc = Path(dir_loc)
        return sorted(f for f in dir_loc.rglob("*") if f.is_file())
    fs, path = filesystem(dir_loc)
    root = path.rstrip("/")
    return sorted(join(dir_loc, found[len(root) + 1:]) for found in fs.find(path))


def open_binary(loc: Location, mode: str = "rb") -> IO[bytes]:
    """The file opened for reading ("rb") or writing ("wb"); its directory must exist to write locally."""
    if not is_url(loc):
        loc = Path(loc)
        return loc.open(mode)
    fs, path = filesystem(loc)
    return fs.open(path, mode)


def size(loc: Location) -> int:
    if not is_url(loc):
        loc = Path(loc)
        return loc.stat().st_size
    fs, path = filesystem(loc)
    return fs.size(path)


def read_text(loc: Location) -> str:
    if not is_url(loc):
        loc = Path(loc)
        return loc.read_text()
    fs, path = filesystem(loc)
    return fs.cat_file(path).decode()


def write_text(loc: Location, text: str) -> None:
    if not is_url(loc):
        loc = Path(loc)
        loc.write_text(text)
        return
    fs, path = filesystem(loc)
    fs.pipe_file(path, text.encode())


def make_dirs(loc: Location) -> None:
    """A directory and its parents made (object stores have none to make: a no-op there)."""
    if not is_url(loc):
        loc = Path(loc)
        loc.mkdir(parents=True, exist_ok=True)
        return
    fs, path = filesystem(loc)
    fs.makedirs(path, exist_ok=True)


def remove(loc: Location) -> None:
    """One file removed, if there."""
    if not is_url(loc):
        loc = Path(loc)
        loc.unlink(missing_ok=True)
        return
    fs, path = filesystem(loc)
    if fs.exists(path):
        fs.rm_file(path)


def remove_tree(loc: Location) -> None:
    """A directory (or prefix) and everything below it removed, if there."""
    if not is_url(loc):
        loc = Path(loc)
        shutil.rmtree(loc, ignore_errors=True)
        return
    fs, path = filesystem(loc)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def arrow_filesystem(url: str):
    """(a pyarrow file system for URL, its path there): fsspec's, so credentials and schemes are the same as for
    everything else read from URL."""
    from pyarrow.fs import FSSpecHandler, PyFileSystem
    fs, path = filesystem(url)
    return PyFileSystem(FSSpecHandler(fs)), path
