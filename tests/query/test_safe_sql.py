"""`tracekit sql --safe` / `tracekit.open(..., safe=True)`: SQL written by others reads the tables and analyses and
nothing else. Each way out (reading a file, writing one, attaching a database, installing or loading an extension,
changing a setting) is refused with one line and exit code 2, on traces and on a dataset; the same statements work
without --safe (so the refusal is the lock's doing, not a broken statement)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tracekit
from tests.conftest import REPO
from tracekit import synth
from tracekit.errors import InputError


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("safe")
    synth.generate(root / "traces", ranks=2, steps=2, seed=3)
    tracekit.write_dataset(tracekit.load(root / "traces"), root / "dataset")
    secret = root / "secret.txt"
    secret.write_text("the secret\n")
    return {"root": root, "traces": root / "traces", "dataset": root / "dataset", "secret": secret}


def escapes(root, secret) -> dict[str, str]:
    return {
        "read_text": f"select content from read_text('{secret}')",
        "read_text_etc": "select content from read_text('/etc/passwd')",
        "read_csv": f"select * from read_csv('{secret}')",
        "copy_to": f"copy (select 1 as a) to '{root / 'written.csv'}'",
        "attach": f"attach '{root / 'other.duckdb'}' as other",
        "install": "install httpfs",
        "load": "load httpfs",  # json, parquet are built in: loading those reads no file
        "set": "set threads = 1",
        "reset": "reset memory_limit",
        "glob": f"select * from glob('{root}/*')",
    }


def tracekit_sql(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracekit.cli", "sql", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=300, check=False)


@pytest.mark.parametrize("source", ["traces", "dataset"])
def test_every_way_out_is_refused_with_one_line(inputs, source):
    root = inputs["root"]
    for name, query in escapes(root, inputs["secret"]).items():
        result = tracekit_sql("--safe", query, str(inputs[source]))
        assert result.returncode == 2, (name, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tracekit: error: SQL: refused: safe mode"), (name, lines)
        assert "Traceback" not in result.stderr and "the secret" not in result.stdout + result.stderr
    assert not (root / "written.csv").exists() and not (root / "other.duckdb").exists()


def test_the_same_statements_work_without_safe(inputs, tmp_path):
    """The oracle that the refusals above are the lock's: unlocked, DuckDB reads and writes the files."""
    out = tmp_path / "written.csv"
    result = tracekit_sql(f"select content from read_text('{inputs['secret']}')", str(inputs["traces"]),
                          "--format", "csv")
    assert result.returncode == 0 and "the secret" in result.stdout, result.stderr
    result = tracekit_sql(f"copy (select 1 as a) to '{out}'", str(inputs["traces"]), "--format", "csv")
    assert result.returncode == 0 and out.read_text().split() == ["a", "1"], result.stderr


@pytest.mark.parametrize("source", ["traces", "dataset"])
def test_safe_sql_answers_questions(inputs, source):
    """Tables, analyses (views defined after the lock) and macros still work, with the same answers."""
    query = ("select (select count(*) from events) as events, (select count(*) from op_summary) as ops, "
             "(select count(*) from gpu_ops()) as gpu_ops")
    with tracekit.open(inputs[source], safe=True) as safe, tracekit.open(inputs[source]) as plain:
        assert safe.sql(query).rows() == plain.sql(query).rows()
        assert safe.sql(query).row(0)[0] > 0
        assert safe.query("op_summary", step=1).equals(plain.query("op_summary", step=1))
        scoped = safe.scoped(step=1)  # a new connection: locked too
        with pytest.raises(InputError, match="refused: safe mode"):
            scoped.sql(f"select * from read_text('{inputs['secret']}')")
        with pytest.raises(InputError, match="refused: safe mode"):
            safe.sql("set memory_limit = '100GB'")


def test_safe_python_objects_are_not_tables(inputs):
    """DuckDB's Python client scans a variable of the caller by name; a safe connection does not."""
    import polars as pl

    hidden_frame = pl.DataFrame({"secret": ["the secret"]})  # noqa: F841 (what the query tries to reach)
    with tracekit.open(inputs["traces"], safe=True) as db, pytest.raises(InputError, match="hidden_frame"):
        db.sql("select * from hidden_frame")
