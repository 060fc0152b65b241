"""Several analyses at a time (`analyses.run_all` on cursors of one database) give what one at a time gives: the
same results, the same failures with the same reasons in the same order, each shared table computed once, and a
query that runs out of memory beside others run again alone."""

from __future__ import annotations

import threading
import time

import duckdb
import pyarrow as pa
import pytest

import tracekit
from tracekit import synth
from tracekit.engine import catalog
from tracekit.output import workbooks
from tracekit.output.terminal import QUERIES
from tracekit.query import analyses


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth")
    synth.generate(out, ranks=2, steps=3, seed=5)
    return tracekit.load(sorted(out.glob("rank*.json")))


NAMES = list(dict.fromkeys(workbooks.report_queries() + list(QUERIES)))


def test_many_at_a_time_equals_one_at_a_time(tables):
    one = analyses.run_all(tables, NAMES, {}, threads=1)
    many = analyses.run_all(tables, NAMES, {}, threads=3)
    assert list(one) == list(many) == [n for n in NAMES if n in one]
    for name in NAMES:
        assert one[name].equals(many[name]), name


def test_each_shared_table_is_computed_once_and_before_its_readers(tables, monkeypatch):
    computed, running, overlapped = [], set(), []
    real_materialize, real_step = catalog.materialize_macro, analyses.run_step
    lock = threading.Lock()

    def materialize(con, name):
        with lock:
            computed.append(name)
        real_materialize(con, name)

    def run_step(con, step, *rest, **named):
        with lock:
            running.add(step)
            if len(running) > 1:
                overlapped.append(set(running))
        try:
            # a query calling a shared table not yet computed would compute it here, on its own thread
            assert catalog.shared_tables(con, catalog.query_macros(step)) == set(), step
            real_step(con, step, *rest, **named)
        finally:
            with lock:
                running.discard(step)

    monkeypatch.setattr(catalog, "materialize_macro", materialize)
    monkeypatch.setattr(analyses, "run_step", run_step)
    failures: dict[str, str] = {}
    results = analyses.run_all(tables, NAMES, failures, threads=2)
    assert not failures and set(results) == set(NAMES)
    assert len(computed) == len(set(computed)) and set(computed) <= set(catalog.SHARED_TABLE_MACROS)
    assert "_critical_path_lanes" in computed
    assert overlapped, "two analyses never ran at once"


def test_a_run_on_its_own_connection_frees_the_shared_tables_its_analyses_have_read(tables, monkeypatch):
    """The critical path's stages are dropped once the walk is made from them, and no table is computed twice:
    each went only after every analysis and table that reads it (a reader after it would compute it again, or fail);
    the results are those of a run that keeps them (`test_many_at_a_time_equals_one_at_a_time`)."""
    computed, dropped = [], []
    real_materialize, real_drop = catalog.materialize_macro, catalog.drop_shared_table

    def materialize(con, name):
        computed.append(name)
        real_materialize(con, name)

    def drop(con, name):
        dropped.append(name)
        real_drop(con, name)

    monkeypatch.setattr(catalog, "materialize_macro", materialize)
    monkeypatch.setattr(catalog, "drop_shared_table", drop)
    failures: dict[str, str] = {}
    kept = analyses.run_all(tables, NAMES, failures, threads=2)
    assert not failures and set(kept) == set(NAMES)
    assert {"_critical_path_calls", "_critical_path_lanes"} <= set(dropped)
    assert len(computed) == len(set(computed)) and len(dropped) == len(set(dropped)) and set(dropped) <= set(computed)
    with catalog.connect(tables, materialize=True) as con:  # a caller's connection: its tables are its own
        computed.clear(), dropped.clear()
        analyses.run_all(tables, NAMES, {}, threads=2, con=con)
        assert computed and not dropped


@pytest.fixture
def step_windows_broken(monkeypatch):
    """The shared table step_windows fails (step_stats and others call it)."""
    real_materialize = catalog.materialize_macro

    def materialize(con, name):
        if name == "step_windows":
            raise duckdb.InvalidInputException("step_windows broke")
        real_materialize(con, name)

    monkeypatch.setattr(catalog, "materialize_macro", materialize)


def test_failures_are_the_same_reasons_in_the_same_order(tables, step_windows_broken):
    """A shared table that fails fails every analysis that calls it with its own error, as one at a time; an
    analysis reading a failed one says so; a missing one is named."""
    names = [*NAMES, "no_such_analysis"]
    one_failures: dict[str, str] = {}
    many_failures: dict[str, str] = {}
    one = analyses.run_all(tables, names, one_failures, threads=1)
    many = analyses.run_all(tables, names, many_failures, threads=3)
    assert list(one_failures.items()) == list(many_failures.items())
    assert one_failures["step_stats"] == "step_windows broke"
    assert "no_such_analysis" in one_failures
    order = list(one_failures)
    needing = {name: why.split()[1].rstrip(",") for name, why in one_failures.items() if why.startswith("needs ")}
    assert needing and all(order.index(needed) < order.index(name) for name, needed in needing.items())
    assert list(one) == list(many)


def test_arrivals_get_every_result_and_failure_the_run_gives(tables, step_windows_broken):
    names = [*NAMES, "no_such_analysis"]
    for threads in (1, 3):
        arrivals, failures = analyses.Arrivals(names), {}
        results = analyses.run_all(tables, names, failures, threads=threads, arrivals=arrivals)
        assert arrivals.failures == {name: why for name, why in failures.items() if name in names}
        assert "step_stats" in arrivals.failures and "no_such_analysis" in arrivals.failures
        assert arrivals.results.keys() == results.keys()
        assert all(arrivals.results[name] is results[name] for name in results)
        arrivals.wait_for(names)  # every one has arrived: returns at once


def test_waiting_for_arrivals_stops_with_the_run_and_never_waits_for_what_was_not_asked():
    arrivals = analyses.Arrivals(["a", "b"])
    arrivals.wait_for(["c"])  # not asked for: not coming
    arrivals.arrive("a", None, "broke")
    arrivals.wait_for(["a", "c"])
    waited: list[BaseException | None] = []

    def wait_for_b():
        try:
            arrivals.wait_for(["a", "b"])
            waited.append(None)
        except analyses.RunStopped as exc:
            waited.append(exc)

    waiter = threading.Thread(target=wait_for_b)
    waiter.start()
    time.sleep(0.05)
    assert not waited, "returned before b arrived"
    arrivals.stop()
    waiter.join(10)
    assert len(waited) == 1 and isinstance(waited[0], analyses.RunStopped)


def test_a_query_out_of_memory_beside_others_runs_again_alone(tables, monkeypatch):
    real_step = analyses.run_step
    running, tries, lock = set(), [], threading.Lock()

    def run_step(con, step, *rest, **named):
        with lock:
            running.add(step)
            others = running - {step}
        try:
            if step == "op_perf":
                tries.append(others)
                if others:
                    raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate")
            real_step(con, step, *rest, **named)
        finally:
            with lock:
                running.discard(step)

    monkeypatch.setattr(analyses, "run_step", run_step)
    failures: dict[str, str] = {}
    many = analyses.run_all(tables, NAMES, failures, threads=2)
    assert not failures
    assert len(tries) in (1, 2) and tries[-1] == set()  # again alone only if it first ran beside another
    assert many["op_perf"].equals(analyses.run_all(tables, ["op_perf"], {}, threads=1)["op_perf"])


def test_an_error_without_failures_is_raised(tables, monkeypatch):
    def materialize(con, name):
        raise duckdb.InvalidInputException(f"{name} broke")

    monkeypatch.setattr(catalog, "materialize_macro", materialize)
    with pytest.raises(duckdb.InvalidInputException, match="broke"):
        analyses.run_all(tables, NAMES, threads=2)


def long_query(con, outcome: list[str]) -> None:
    """A query of minutes on CON; OUTCOME gets "interrupted" or "finished"."""
    try:
        con.execute("select sum(range % 7) from range(30000000000)").fetchall()
        outcome.append("finished")
    except duckdb.InterruptException:
        outcome.append("interrupted")


def test_an_error_stops_the_queries_still_running(tables, monkeypatch):
    """The first shared table to start runs a long query; the second fails once it has started: the long one is
    interrupted (Ctrl-C reaches the same path), not waited for."""
    started, outcome = threading.Event(), []

    def materialize(con, name):
        if not started.is_set():
            started.set()
            return long_query(con, outcome)
        started.wait()
        time.sleep(1)  # the long query has begun: an interrupt before it begins would be lost
        raise RuntimeError(f"{name} failed")

    monkeypatch.setattr(catalog, "materialize_macro", materialize)
    with pytest.raises(RuntimeError, match="failed"):
        analyses.run_all(tables, NAMES, {}, threads=2)
    assert outcome == ["interrupted"]


def test_in_background_gives_what_run_gives(tables):
    with catalog.connect(tables) as con, analyses.in_background(
            con, tables, lambda cur: analyses.run_into(cur, "critical_path", {})) as result:
        other = con.execute("select count(*) from events").fetchone()[0]  # the connection stays free meanwhile
        assert result().equals(analyses.run(tables, "critical_path"))
    assert other == tables.events.num_rows


def test_in_background_sees_what_is_bound(tables):
    bound = {"extra": pa.table({"x": [1, 2, 3]})}
    with catalog.connect(tables) as con, analyses.in_background(
            con, tables, lambda cur: cur.execute("select sum(x) from extra").fetchone()[0], bound) as result:
        assert result() == 6


def test_in_background_out_of_memory_runs_again_when_waited_for(tables):
    calls = []

    def work(con):
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            raise duckdb.OutOfMemoryException("out of memory beside the block's queries")
        return con.execute("select count(*) from events").fetchone()[0]

    with catalog.connect(tables) as con, analyses.in_background(con, tables, work) as result:
        assert result() == tables.events.num_rows
    assert len(calls) == 2 and calls[0] != calls[1]  # the second run on the waiting thread, alone


def test_leaving_the_block_early_interrupts_the_background_query(tables):
    started, outcome = threading.Event(), []

    def work(con):
        started.set()
        long_query(con, outcome)

    with pytest.raises(RuntimeError, match="stop"), catalog.connect(tables) as con:
        with analyses.in_background(con, tables, work):
            started.wait()
            time.sleep(1)  # the long query has begun: an interrupt before it begins would be lost
            raise RuntimeError("stop")
    assert outcome == ["interrupted"]


def test_chains_start_before_the_sheets_own_analyses_which_start_in_sheet_order():
    """A chain behind a sheet in the middle (gemm → op_perf → roofline) started in its sheet's place ended last, and
    the writer wrote every later sheet alone after the analyses; the walk's prerequisites still go first."""
    needs = {"overview": {"macro:calls"}, "macro:calls": set(), "gemm": set(), "op_perf": {"gemm"},
             "roofline": {"op_perf"}, "diagnostics": set(), "path_top": {"macro:walk"}, "macro:walk": {"macro:events"},
             "macro:events": set()}
    steps = ["overview", "gemm", "op_perf", "roofline", "path_top", "diagnostics"]
    assert analyses.start_order(needs, steps, {"path_top"}) == [
        "macro:events", "macro:walk", "path_top",  # the walk, by its chain
        "gemm",  # the longest chain of the rest
        "macro:calls", "op_perf",  # chains of two, in the place of the first sheet that waits on them
        "overview", "roofline", "diagnostics"]  # the sheets' own analyses, in sheet order


def test_a_report_starts_its_op_model_chain_before_the_overviews_analyses(tables, monkeypatch):
    orders = []
    real = analyses.start_order

    def start_order(*args):
        order = real(*args)
        orders.append(list(order))  # the run takes each node off the list as it starts it
        return order

    monkeypatch.setattr(analyses, "start_order", start_order)
    analyses.run_all(tables, NAMES, {}, threads=2)
    (order,) = orders
    assert order.index("gemm") < order.index("op_perf") < order.index("rank_info") < order.index("roofline")
    leaves = [n for n in order if n in NAMES and not any(n in analyses.analysis_inputs(m) for m in NAMES)
              and not catalog.walks_critical_path(n)]
    assert leaves == order[-len(leaves):], "the sheets' own analyses run last"
