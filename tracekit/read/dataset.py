"""An ingested dataset (Parquet partitioned by rank, with a `_tracekit.json` marker) → `TraceTables`, checked.

A dataset may be a local folder or a URL (tracekit.storage): one on object storage is read in place."""

from __future__ import annotations

import json
import re

import pyarrow as pa

from tracekit import schema, storage
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.storage import Location


def check_dataset(path: Location) -> dict:
    """The dataset's _tracekit.json, checked: InputError when it is not ours or was written with another schema
    version than this tracekit's."""
    marker = storage.join(path, storage.DATASET_MARKER)
    try:
        manifest = json.loads(storage.read_text(marker))
    except OSError as exc:
        raise InputError(f"{marker}: cannot read ({exc.strerror or exc})") from None
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        raise InputError(f"{marker}: not valid JSON (a tracekit dataset marker is)") from None
    if not isinstance(manifest, dict) or manifest.get("format") != "tracekit" \
            or not isinstance(manifest.get("tables"), dict):
        raise InputError(f"{marker}: not a tracekit dataset marker (format, schema_version, tables)")
    version = manifest.get("schema_version", "unknown")
    if version not in schema.READABLE_VERSIONS:
        advice = ("upgrade tracekit to read it" if isinstance(version, int) and version > schema.SCHEMA_VERSION
                  else "ingest the traces again with this tracekit (`tracekit ingest TRACES -o DIR --force`)")
        raise InputError(f"{path}: dataset written with tracekit schema version {version}, this tracekit reads "
                         f"version {schema.SCHEMA_VERSION}: {advice}")
    return manifest


def dataset_table_files(path: Location, name: str) -> list[Location]:
    """The Parquet files of table NAME in a dataset (none when the table had no rows)."""
    table_dir = storage.join(path, name)
    if storage.is_url(table_dir):
        return [f for f in (storage.find_files(table_dir) if storage.is_dir(table_dir) else [])
                if PARTITION_FILE.fullmatch(storage.relative(f, table_dir))]
    return sorted(table_dir.glob("rank=*/*.parquet"))


PARTITION_FILE = re.compile(r"rank=[^/]*/[^/]*\.parquet")


def read_dataset(path: Location) -> TraceTables:
    """The tables of a dataset `write_dataset` wrote; InputError when a file is unreadable or a table does not hold
    the rows the marker says it does."""
    path = storage.location(path)
    expected = check_dataset(path)["tables"]
    loaded = {name: read_table(storage.join(path, name), name) for name in TraceTables.names()
              if storage.is_dir(storage.join(path, name))}
    check_dataset_rows(path, {name: table.num_rows for name, table in loaded.items()}, expected)
    return TraceTables(**loaded)


def read_rank(path: Location, rank: int | None) -> TraceTables:
    """One rank's tables of a dataset: its `rank=R` partitions only (rank None: the notes about no rank), as
    `read_dataset` gives that rank's rows. For per-rank work elsewhere (a cluster worker); the driver checks the
    rows of all ranks against the marker."""
    path = storage.location(path)
    folder = f"rank={NULL_PARTITION if rank is None else rank}"
    tables = {}
    for name in TraceTables.names():
        partition = storage.join(path, name, folder)
        if storage.is_dir(partition):
            table = read_table(partition, name, partitioned=False)
            tables[name] = schema.conform(name, table.append_column("rank", pa.array([rank] * table.num_rows,
                                                                                      pa.int32())))
    return TraceTables(**tables)


NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"  # what hive-style readers take for a null partition value


def check_dataset_rows(path: Location, rows: dict[str, int], expected: dict) -> None:
    """InputError when a table does not hold the rows the marker says it does, or the dataset has no events."""
    for name in TraceTables.names():
        if rows.get(name, 0) != expected.get(name, 0):
            raise InputError(f"{storage.join(path, name)}: holds {rows.get(name, 0):,} rows but "
                             f"{storage.DATASET_MARKER} says {expected.get(name, 0)!r} (the dataset is incomplete or "
                             "was altered)")
    if not (rows.get("events") or rows.get("instants") or rows.get("et_nodes")):
        raise InputError(f"{path}: the dataset holds no trace events")


def read_table(table_dir: Location, name: str, partitioned: bool = True) -> pa.Table:
    # imported here: pyarrow.dataset takes ~0.2 s to import, and reading trace files never needs it
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    try:
        if storage.is_url(table_dir):
            filesystem, where = storage.arrow_filesystem(table_dir)
            table = ds.dataset(where, filesystem=filesystem, format="parquet",
                               partitioning="hive" if partitioned else None).to_table()
        else:
            table = ds.dataset(table_dir, format="parquet", partitioning="hive" if partitioned else None).to_table()
        return schema.conform(name, table) if partitioned else table
    except (pa.ArrowException, OSError) as exc:
        for file in storage.find_files(table_dir):
            try:
                with storage.open_binary(file) as fh:
                    pq.read_metadata(fh)
            except (pa.ArrowException, OSError) as bad:
                raise InputError(f"{file}: not a readable Parquet file ({first_line(bad)})") from None
        raise InputError(f"{table_dir}: cannot read table {name} ({first_line(exc)})") from None


def first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
