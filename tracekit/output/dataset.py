"""`TraceTables` → a Parquet dataset partitioned by rank (what `tracekit ingest` writes)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracekit import schema
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.inputs import is_dataset
from tracekit.output.atomic import created_dir, replacing_dir
from tracekit.read.dataset import DATASET_MARKER


def write_dataset(tables: TraceTables, out_dir: Path, force: bool = False) -> list[Path]:
    """Write every table as Parquet under out_dir/TABLE/rank=N/part-0.parquet (hive style). Returns the files written.

    The dataset is written into a new directory beside out_dir, which replaces out_dir (an existing dataset only with
    `force`) once complete: a failure leaves nothing behind and an existing dataset as it was. The same tables give
    the same bytes.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        if not force:
            raise InputError(f"{out_dir}: directory is not empty (use --force to replace a dataset there)")
        if not is_dataset(out_dir):
            raise InputError(f"{out_dir}: not empty and not a tracekit dataset; refusing to overwrite it")
    written: list[Path] = []
    with created_dir(out_dir.parent), replacing_dir(out_dir) as building:
        for name, table in tables.items():
            if table.num_rows:
                written += write_partitions(name, in_key_order(name, table), building / name)
        manifest = {"format": "tracekit", "schema_version": schema.SCHEMA_VERSION,
                    "schema_fingerprint": schema.fingerprint(),
                    "tables": {name: t.num_rows for name, t in tables.items()},
                    "ranks": tables.rank_list}
        (building / DATASET_MARKER).write_text(json.dumps(manifest, indent=1))
    return [out_dir / p.relative_to(building) for p in written]


def in_key_order(name: str, table: pa.Table) -> pa.Table:
    """Rows sorted by the table's key, then by its other columns: the same rows give the same file whatever order
    they came in (edges and diagnostics come from multi-threaded DuckDB queries in no fixed order)."""
    key = schema.TABLES[name].key
    ties = [f.name for f in table.schema if f.name not in key and not pa.types.is_nested(f.type)]
    order = pc.sort_indices(table, sort_keys=[(c, "ascending") for c in (*key, *ties)])
    return table.take(order)


NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"  # what hive-style readers take for a null partition value


def write_partitions(name: str, table: pa.Table, table_dir: Path) -> list[Path]:
    """One Parquet file per rank (rows in the table's order, `rank` in the directory name only), its footer naming
    the table and the schema version for readers that never see the marker.

    pyarrow.dataset.write_dataset is not used: its background writer threads can abort the interpreter at exit
    (apache/arrow#36980) and it may write rows in any order.
    """
    table = table.replace_schema_metadata({b"tracekit.table": name.encode(),
                                           b"tracekit.schema_version": str(schema.SCHEMA_VERSION).encode()})
    rank = table.column("rank")
    ranks = sorted(r for r in pc.unique(rank).to_pylist() if r is not None)
    masks = [(str(r), pc.equal(rank, r)) for r in ranks]
    if rank.null_count:
        masks.append((NULL_PARTITION, pc.is_null(rank)))
    written = []
    for value, mask in masks:
        part_dir = table_dir / f"rank={value}"
        part_dir.mkdir(parents=True)
        path = part_dir / "part-0.parquet"
        pq.write_table(table.filter(mask).drop_columns(["rank"]), path)
        written.append(path)
    return written
