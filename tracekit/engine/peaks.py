"""Devices' peak rates as data: `device_peaks`, a reference table every connection has beside the trace tables.

The rows ship in `queries/data/device_peaks.csv` (one per device and datatype: dense matrix and vector TFLOP/s, HBM
TB/s, per-direction link GB/s, and the source of each number); `--peak FILE` (a CSV with the same columns) replaces
them for one run. A rank's device is matched in SQL (`queries/lib/peaks.sql`): `name_pattern` is a regular expression
over `ranks.device_name`, `num_sms`, when given, must equal `deviceProperties`' `numSms`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv

from tracekit.errors import InputError

TABLE = "device_peaks"
COLUMNS: dict[str, pa.DataType] = {
    "device": pa.string(),
    "name_pattern": pa.string(),
    "num_sms": pa.int64(),
    "dtype": pa.string(),
    "matrix_tflops": pa.float64(),
    "vector_tflops": pa.float64(),
    "hbm_tb_per_s": pa.float64(),
    "link_gb_per_s": pa.float64(),
    "source": pa.string(),
}
REQUIRED = ("device", "name_pattern", "dtype", "hbm_tb_per_s")
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")


def read_peaks(path: str | Path) -> pa.Table:
    """The peaks table in the CSV file PATH, checked: InputError (one line naming the file) when it cannot be used."""
    path = Path(path)
    try:
        table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
            column_types={name: kind for name, kind in COLUMNS.items()}, strings_can_be_null=False))
    except FileNotFoundError:
        raise InputError(f"{path}: --peak file not found") from None
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        reason = " ".join(str(exc).split())
        raise InputError(f"{path}: not a readable peaks CSV ({reason[:200]})") from None
    missing = [name for name in COLUMNS if name not in table.column_names]
    if missing:
        raise InputError(f"{path}: peaks CSV lacks column(s) {', '.join(missing)} "
                         f"(columns: {', '.join(COLUMNS)})")
    table = table.select(list(COLUMNS)).cast(pa.schema(list(COLUMNS.items())))
    for name in REQUIRED:
        if table.column(name).null_count:
            raise InputError(f"{path}: peaks CSV has an empty {name} (every row needs {', '.join(REQUIRED)})")
    unknown = sorted(set(table.column("dtype").to_pylist()) - set(DTYPES))
    if unknown:
        raise InputError(f"{path}: peaks CSV dtype {unknown[0]!r} is not one of {', '.join(DTYPES)}")
    return table


@cache
def default_peaks() -> pa.Table:
    """The shipped table (queries/data/device_peaks.csv)."""
    from tracekit.engine.catalog import data_dir  # catalog imports this module: imported here, not at the top

    return read_peaks(data_dir("queries") / "data" / "device_peaks.csv")
