"""Ad-hoc SQL (`tracekit.open`, `tracekit sql`) against answers computed independently from the raw JSON
(tests/raw_trace.py reads it with the json module), on real traces and on an ingested dataset opened in place."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter, defaultdict

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import tracekit
from tests.conftest import REPO, shared_trace
from tests.support import raw_trace
from tracekit import schema
from tracekit.engine import catalog
from tracekit.errors import InputError

DLRM = "multirank/dlrm_8ranks_v100"
BERT = "nvidia/h100_bert-small.json.gz"


def run_cli(*args, stdin: str | None = None):
    return subprocess.run([sys.executable, "-m", "tracekit.cli", *args], capture_output=True, text=True, cwd=REPO,
                          input=stdin)


@pytest.fixture(scope="module")
def dlrm_raw():
    folder = shared_trace(DLRM)
    return {raw.rank: raw for raw in map(raw_trace.read, sorted(folder.glob("worker*.json.gz")))}


@pytest.fixture(scope="module")
def dlrm_dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("sql") / "dlrm"
    tracekit.write_dataset(tracekit.load(shared_trace(DLRM)), out)
    return out


@pytest.fixture(scope="module")
def bert():
    path = shared_trace(BERT)
    with tracekit.open(path) as db:
        yield db, raw_trace.read(path)


def category_counts(raws) -> Counter:
    return Counter((rank, e.cat) for rank, raw in raws.items() for e in raw.events)


@pytest.mark.parametrize("opened_from", ["traces", "dataset"])
def test_counts_and_kernel_time_match_the_raw_json(opened_from, dlrm_raw, dlrm_dataset):
    source = shared_trace(DLRM) if opened_from == "traces" else dlrm_dataset
    with tracekit.open(source) as db:
        counts = db.sql("select rank, cat, count(*) n from events group by all")
        kernel_ns = db.sql("select rank, sum(dur) ns, count(*) n from events where kind = 'kernel' group by rank")
    assert Counter({(r, c): n for r, c, n in counts.iter_rows()}) == category_counts(dlrm_raw)
    expected = {rank: (sum(e.dur for e in raw.events if e.cat == "kernel"), sum(e.cat == "kernel" for e in raw.events))
                for rank, raw in dlrm_raw.items()}
    assert {r: (ns, n) for r, ns, n in kernel_ns.iter_rows()} == expected
    assert len(expected) == 8 and all(n > 0 for _, n in expected.values())


def raw_subtree_kernels(raw: raw_trace.RawTrace, op: raw_trace.Event) -> set[int]:
    """Kernels launched by runtime calls inside the op's span on its thread (time containment), by correlation."""
    inside = [e for e in raw.events if e.pid == op.pid and e.tid == op.tid and e.position != op.position
              and op.ts <= e.ts and e.end <= op.end]
    correlations = {e.args.get("correlation") for e in inside if e.cat in raw_trace.LAUNCH_CATS}
    return {e.position for e in raw.events if e.cat in raw_trace.GPU_CATS and e.args.get("correlation") in correlations}


def test_descendants_are_the_kernels_inside_an_op(bert):
    db, raw = bert
    ops = [e for e in raw.events if e.cat == "cpu_op" and e.name in ("aten::linear", "aten::addmm", "aten::layer_norm")]
    checked = 0
    for op in ops[:40]:
        got = db.sql(f"select id from descendants(0, {op.position}) where kind in ('kernel', 'memcpy', 'memset')")
        want = raw_subtree_kernels(raw, op)
        assert set(got["id"]) == want, op.name
        checked += bool(want)
    assert checked >= 10  # the check saw real kernels, not only empty sets


def test_ancestors_climb_from_a_kernel_to_the_ops_around_its_launch(bert):
    db, raw = bert
    launches = {e.args.get("correlation"): e for e in raw.events if e.cat in raw_trace.LAUNCH_CATS}
    kernel = next(e for e in raw.events if e.cat == "kernel" and e.args.get("correlation") in launches)
    call = launches[kernel.args["correlation"]]
    enclosing = {e.position for e in raw.events if e.pid == call.pid and e.tid == call.tid
                 and e.position != call.position and e.ts <= call.ts and call.end <= e.end}
    got = db.sql(f"select id, distance, via from ancestors(0, {kernel.position})")
    assert got.row(0) == (call.position, 1, "launch")
    assert set(got["id"][1:]) == enclosing and all(v == "nest" for v in got["via"][1:])


def test_overlapping_finds_events_on_other_tracks(bert):
    db, raw = bert
    kernel = max((e for e in raw.events if e.cat == "kernel"), key=lambda e: e.dur)
    want = {e.position for e in raw.events if (e.pid, e.tid) != (kernel.pid, kernel.tid)
            and e.ts < kernel.end and (e.end > kernel.ts or e.ts >= kernel.ts)}
    got = db.sql(f"select id, overlap_ns from overlapping(0, {kernel.position})")
    assert set(got["id"]) == want and len(want) > 0
    assert all(0 <= ns <= kernel.dur for ns in got["overlap_ns"])


def test_analyses_are_views_and_queries_can_be_scoped(dlrm_dataset, dlrm_raw):
    with tracekit.open(dlrm_dataset) as db:
        for name in catalog.viewable():  # every analysis's view binds (nothing runs until rows are asked for)
            assert db.relation(f"select * from {name}").columns, name
        assert not db.analysis_problems
        joined = db.sql("select s.rank, s.count from op_summary s join ranks r using (rank) "
                        "where s.name = 'aten::mm'")
        whole = db.query("kernel_summary")
        rank3 = db.query("kernel_summary", rank=3)
    raw_mm = {rank: sum(e.name == "aten::mm" and e.cat == "cpu_op" for e in raw.events)
              for rank, raw in dlrm_raw.items()}
    assert dict(joined.iter_rows()) == {r: n for r, n in raw_mm.items() if n}
    assert set(rank3["rank"]) == {3}
    # the same rows either way, to the last bit (no aggregate depends on the order threads finish in)
    assert_frame_equal(rank3.sort(pl.all()), whole.filter(pl.col("rank") == 3).sort(pl.all()))


def test_a_step_scope_keeps_the_work_of_that_step():
    path = shared_trace("nvidia/a100_trainer_rank0of16_cudagraph.json.gz")
    raw = raw_trace.read(path)
    with tracekit.open(path) as db:
        steps = db.sql("select step, start_ns, end_ns from step_windows() order by step")
        step, start, end = steps.row(1)
        scoped = db.scoped(step=step)
        got = scoped.sql("select count(*) from events where kind = 'cpu_op'").item()
        timeline = scoped.query("steps")
        with pytest.raises(InputError, match=r"step 999: no ProfilerStep#999 on any rank \(steps there: "):
            db.scoped(step=999)
    want = sum(e.cat == "cpu_op" and start <= e.ts < end for e in raw.events)
    assert got == want > 0
    assert timeline["step"].to_list() == [step]


def test_tables_as_polars_and_arrow(bert):
    db, raw = bert
    events = db.table("events")
    assert events.height == db.arrow("events").num_rows == len(raw.events)
    assert db.arrow("ranks").schema.names == schema.TABLES["ranks"].column_names
    with pytest.raises(InputError, match="no such table"):
        db.table("kernels")


def test_sql_errors_are_input_errors_naming_the_query(bert):
    db, _ = bert
    with pytest.raises(InputError) as info:
        db.sql("select no_such_column from events")
    message = str(info.value)
    assert "no_such_column" in message and "(query: select no_such_column from events)" in message
    assert "\n" not in message


def test_an_older_schema_version_is_refused_clearly(tmp_path, dlrm_dataset):
    old = tmp_path / "old"
    old.mkdir()
    marker = json.loads((dlrm_dataset / "_tracekit.json").read_text())
    unreadable = min(schema.READABLE_VERSIONS) - 1
    (old / "_tracekit.json").write_text(json.dumps({**marker, "schema_version": unreadable}))
    with pytest.raises(InputError, match=f"schema version {unreadable}.*ingest the traces again"):
        tracekit.open(old)
    result = run_cli("sql", "select count(*) from events", str(old))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "schema version" in result.stderr


def test_a_version_1_dataset_is_read_with_no_graph_kernels(tmp_path, dlrm_dataset):
    """Version 2 only added graph_kernels: a dataset written before it (no such folder, version 1) still reads."""
    import shutil
    old = tmp_path / "v1"
    shutil.copytree(dlrm_dataset, old)
    shutil.rmtree(old / "graph_kernels", ignore_errors=True)
    marker = json.loads((old / "_tracekit.json").read_text())
    marker["tables"].pop("graph_kernels", None)
    (old / "_tracekit.json").write_text(json.dumps({**marker, "schema_version": 1}))
    tables = tracekit.load(old)
    assert tables.events.num_rows == tracekit.load(dlrm_dataset).events.num_rows and tables.graph_kernels.num_rows == 0
    with tracekit.open(old) as db:
        assert db.sql("select count(*) as n from graph_kernels")["n"][0] == 0


def test_the_schema_version_moves_with_the_schema():
    """Changing a table's columns must add a schema version (readers elsewhere rely on the dataset's layout)."""
    assert schema.FINGERPRINTS[schema.SCHEMA_VERSION] == schema.fingerprint()


def test_dataset_files_carry_the_version_for_other_engines(dlrm_dataset):
    import pyarrow.parquet as pq

    marker = json.loads((dlrm_dataset / "_tracekit.json").read_text())
    assert marker["schema_version"] == schema.SCHEMA_VERSION and marker["ranks"] == list(range(8))
    footer = pq.read_metadata(next((dlrm_dataset / "events").glob("rank=0/*.parquet"))).metadata
    assert footer[b"tracekit.schema_version"] == str(schema.SCHEMA_VERSION).encode()
    assert footer[b"tracekit.table"] == b"events"


def test_cli_formats_and_errors(tmp_path, dlrm_dataset, dlrm_raw):
    query = "select rank, count(*) as n from events where kind = 'kernel' group by rank order by rank"
    want = [(rank, sum(e.cat == "kernel" for e in raw.events)) for rank, raw in sorted(dlrm_raw.items())]
    csv = run_cli("sql", query, str(dlrm_dataset), "--format", "csv")
    assert csv.returncode == 0, csv.stderr
    assert [tuple(map(int, line.split(","))) for line in csv.stdout.splitlines()[1:]] == want
    as_json = run_cli("sql", query, str(dlrm_dataset), "--format", "json")
    assert [(row["rank"], row["n"]) for row in json.loads(as_json.stdout)] == want
    out = tmp_path / "kernels.parquet"
    written = run_cli("sql", query, str(dlrm_dataset), "-o", str(out))
    assert written.returncode == 0 and pl.read_parquet(out).rows() == want
    table = run_cli("sql", query, str(dlrm_dataset))
    assert table.returncode == 0 and "rank" in table.stdout and str(want[3][1]) in table.stdout

    bad = run_cli("sql", "select no_such_column from events", str(dlrm_dataset))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.count("\n") == 1 and "no_such_column" in bad.stderr and "(query: select" in bad.stderr
    unknown_format = run_cli("sql", query, str(dlrm_dataset), "-o", str(tmp_path / "x.xyz"))
    assert unknown_format.returncode == 2 and "x.xyz" in unknown_format.stderr
    missing_input = run_cli("sql", query, str(tmp_path / "nope"))
    assert missing_input.returncode == 2 and "nope" in missing_input.stderr


def test_cli_prompt_reads_one_query_per_line(dlrm_dataset, dlrm_raw):
    script = "select count(*) as kernels from events where kind = 'kernel' and rank = 2\n.tables\n"
    result = run_cli("sql", str(dlrm_dataset), stdin=script)
    assert result.returncode == 0, result.stderr
    assert str(sum(e.cat == "kernel" for e in dlrm_raw[2].events)) in result.stdout
    assert "et_nodes" in result.stdout  # .tables
    failing = run_cli("sql", str(dlrm_dataset), stdin="select 1\nselect nope\nselect 2\n")
    assert failing.returncode == 2 and "nope" in failing.stderr


def test_cli_run_scoped_and_listings(dlrm_dataset):
    result = run_cli("run", "kernel_summary", str(dlrm_dataset), "--only-rank", "5", "--format", "csv")
    assert result.returncode == 0, result.stderr
    assert set(pl.read_csv(result.stdout.encode())["rank"]) == {5}
    listed = run_cli("queries")
    assert listed.returncode == 0 and "op_summary" in listed.stdout and "critical_path" in listed.stdout
    described = run_cli("schema")
    assert "| `ts` | int64 | ns |" in described.stdout


def test_python_example_in_readme_runs(tmp_path):
    """The README's API example, as written, on a synth trace."""
    from tracekit import synth

    synth.generate(tmp_path, 2, 4, 0)
    text = (REPO / "README.md").read_text()
    block = text.split("```python\n# tracekit.open", 1)[1].split("```", 1)[0]
    exec("# tracekit.open" + block.replace('"traces/"', repr(str(tmp_path))), {})


def test_kernel_categories_per_rank_match_by_group_by_and_raw(dlrm_raw):
    """A typical ad-hoc question: kernel time by name prefix per rank, checked against the raw JSON."""
    with tracekit.open(shared_trace(DLRM)) as db:
        got = db.sql("select rank, split_part(name, '<', 1) as family, sum(dur) as ns from events "
                     "where kind = 'kernel' group by all")
    want = defaultdict(int)
    for rank, raw in dlrm_raw.items():
        for e in raw.events:
            if e.cat == "kernel":
                want[(rank, e.name.split("<", 1)[0])] += e.dur
    assert {(r, f): ns for r, f, ns in got.iter_rows()} == dict(want)
