"""A cross-rank query of one ingested dataset, run in tracekit (DuckDB) and in Spark, results compared exactly.

    pip install -e '.[spark]'            # pyspark; Spark also needs a JVM: apt-get install openjdk-17-jre-headless
    python bench/second_engine.py [DATASET | TRACES...] [--repeats 3] [--out RESULT.json]

With no argument it ingests the shared 8-rank DLRM set (../shared/traces/multirank/dlrm_8ranks_v100) with
`tracekit ingest` into a temporary folder; a folder holding `_tracekit.json` is used as it is; anything else is
ingested. Each engine reads the dataset's Parquet files itself (tracekit: `tracekit.open(DATASET)`, views over
read_parquet with hive partitioning; Spark: `spark.read.parquet(DATASET/TABLE)`, partition discovery giving `rank`).

Queries (bench/second_engine/):
  step_kernel_time   per rank and ProfilerStep: step time, kernels launched, kernel and communication time, slowest
                     rank; one SQL text that both engines run.
  collective_skew    tracekit's own analysis (`tracekit run collective_skew DATASET`) against its port to Spark SQL
                     over the base tables (collective_skew.spark.sql).
Results must agree row for row: the same columns, integers and strings equal, floats within 1e-9 relative.
Times are medians of --repeats runs of "open the tables + run the query + fetch the rows" in this process (Spark's
session start, its JVM included, is timed once, apart). Also printed: the Spark type of every column of every table
against tracekit.schema's Arrow type, and the rows of each result.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.measure import REPO, SHARED, in_process, median  # noqa: E402

QUERIES = REPO / "bench" / "second_engine"
DLRM = SHARED / "multirank" / "dlrm_8ranks_v100"
MARKER = "_tracekit.json"
RELATIVE_TOLERANCE = 1e-9

# the Arrow type tracekit.schema gives a column → the type Spark should read it as
SPARK_TYPE_OF_ARROW = {"int32": "int", "int64": "bigint", "string": "string", "bool": "boolean",
                       "double": "double", "list<item: int64>": "array<bigint>"}


def query_text(name: str) -> str:
    return (QUERIES / name).read_text()


def tracekit_queries() -> dict[str, str]:
    """Query name → what tracekit runs."""
    return {"step_kernel_time": query_text("step_kernel_time.sql"),
            "collective_skew": "select * from collective_skew order by process_group, seq"}


def spark_queries() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Query name → what Spark runs, and the tables it reads."""
    return {"step_kernel_time": (query_text("step_kernel_time.sql"), ("events", "edges")),
            "collective_skew": (query_text("collective_skew.spark.sql"), ("events", "edges", "ranks"))}


def ensure_dataset(inputs: list[str], scratch: Path) -> Path:
    """The dataset to query: INPUTS when it is one dataset folder, else INPUTS (default: the DLRM set) ingested."""
    if len(inputs) == 1 and (Path(inputs[0]) / MARKER).is_file():
        return Path(inputs[0])
    traces = inputs or [str(DLRM)]
    if not inputs and not DLRM.is_dir():
        raise SystemExit(f"{DLRM} not found: pass a dataset folder or trace files")
    out = scratch / "dataset"
    subprocess.run([sys.executable, "-m", "tracekit.cli", "ingest", *traces, "-o", str(out)], check=True, cwd=REPO)
    return out


def start_spark(cores: int = 2):
    """A local Spark session with quiet logs; UI and progress bars off (nothing to look at)."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(f"local[{cores}]").appName("tracekit-second-engine")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             # Spark 4.3.0 fails a recursive CTE over a partitioned table with dynamic partition pruning on:
             # "[INTERNAL_ERROR] Found the unresolved operator: 'Filter (... dynamicpruning ...)"
             .config("spark.sql.optimizer.dynamicPartitionPruning.enabled", "false")
             .config("spark.sql.shuffle.partitions", str(cores))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_tables(spark, dataset: Path, names: tuple[str, ...] = ()) -> list[str]:
    """Register table folders of DATASET (NAMES, default every one) as Spark temp views of their names; the names
    registered."""
    names = names or sorted(p.name for p in dataset.iterdir() if p.is_dir())
    for name in names:
        spark.read.parquet(str(dataset / name)).createOrReplaceTempView(name)
    return names


def run_spark(spark, dataset: Path, query: str, tables: tuple[str, ...]) -> tuple[list[str], list[tuple]]:
    spark_tables(spark, dataset, tables)
    frame = spark.sql(query)
    return frame.columns, [tuple(row) for row in frame.collect()]


def run_tracekit(dataset: Path, query: str) -> tuple[list[str], list[tuple]]:
    import tracekit

    with tracekit.open(dataset) as db:
        result = db.sql(query)
    return result.columns, list(result.iter_rows())


def values_match(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is None and b is None
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=RELATIVE_TOLERANCE, abs_tol=0.0)
    return a == b and type(a) is type(b)


def differences(left: tuple[list[str], list[tuple]], right: tuple[list[str], list[tuple]], limit: int = 10) -> list[str]:
    """What differs between two (columns, rows) results, in order: [] when they agree (rows in the queries' order)."""
    (left_columns, left_rows), (right_columns, right_rows) = left, right
    if left_columns != right_columns:
        return [f"columns differ: {left_columns} vs {right_columns}"]
    found = [] if len(left_rows) == len(right_rows) else [f"{len(left_rows)} rows vs {len(right_rows)}"]
    for number, (a, b) in enumerate(zip(left_rows, right_rows)):
        for column, x, y in zip(left_columns, a, b):
            if not values_match(x, y):
                found.append(f"row {number} {column}: {x!r} vs {y!r}")
    return found[:limit]


def schema_report(spark, dataset: Path) -> list[str]:
    """Every column whose Spark type or position is not what tracekit.schema says, one line each."""
    from tracekit import schema

    notes = []
    for name in spark_tables(spark, dataset):
        spark_fields = {f.name: f.dataType.simpleString() for f in spark.table(name).schema.fields}
        for column in schema.TABLES[name].columns:
            wanted = SPARK_TYPE_OF_ARROW.get(str(column.type), str(column.type))
            got = spark_fields.pop(column.name, "missing")
            if got != wanted:
                notes.append(f"{name}.{column.name}: Spark reads {got}, schema says {column.type} ({wanted})")
        notes += [f"{name}.{extra}: not in the schema ({kind})" for extra, kind in spark_fields.items()]
        order = spark.table(name).columns
        if order[-1] == "rank" and schema.TABLES[name].column_names[0] == "rank":
            notes.append(f"{name}: rank is the last column in Spark (partition columns come after the file's)")
    return notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="*", help="a dataset folder, or trace files/folders to ingest")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write the measurements here as JSON")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="second-engine-") as scratch:
        dataset = ensure_dataset(args.inputs, Path(scratch))
        rows_per_table = json.loads((dataset / MARKER).read_text())["tables"]
        print(f"dataset {dataset}: {rows_per_table}")
        started = time.perf_counter()
        spark = start_spark()
        spark_start = time.perf_counter() - started
        print(f"Spark {spark.version}, session start (JVM included) {spark_start:.1f} s")

        schema_notes = schema_report(spark, dataset)
        print("Spark's types against tracekit.schema:", "all as the schema says" if not schema_notes else "")
        for note in schema_notes:
            print("  " + note)

        measured, failed = {"spark_version": spark.version, "spark_start_s": spark_start,
                            "rows_per_table": rows_per_table, "schema_notes": schema_notes, "queries": {}}, False
        spark_text = spark_queries()
        for name, text in tracekit_queries().items():
            duck_s, duck = in_process(lambda: run_tracekit(dataset, text), args.repeats)
            spark_s, sparked = in_process(lambda: run_spark(spark, dataset, *spark_text[name]), args.repeats)
            found = differences(duck, sparked)
            failed |= bool(found)
            verdict = "MATCH" if not found else "DIFFER:\n    " + "\n    ".join(found)
            print(f"\n{name}: {len(duck[1])} rows, {verdict}")
            print(f"  tracekit (DuckDB): median {median(duck_s) * 1e3:.0f} ms "
                  f"(runs: {', '.join(f'{s * 1e3:.0f}' for s in duck_s)})")
            print(f"  Spark:             median {median(spark_s) * 1e3:.0f} ms "
                  f"(runs: {', '.join(f'{s * 1e3:.0f}' for s in spark_s)})")
            print("  " + " | ".join(duck[0]))
            for row in duck[1]:
                print("  " + " | ".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in row))
            measured["queries"][name] = {"rows": len(duck[1]), "match": not found, "differences": found,
                                         "tracekit_s": duck_s, "spark_s": spark_s}
        spark.stop()
    if args.out:
        args.out.write_text(json.dumps(measured, indent=1))
    if failed:
        raise SystemExit("the engines disagree")


if __name__ == "__main__":
    main()
