"""The critical path's call trees (tracekit/engine/call_trees.py), against a reading by hand of their definition: one
row at a time, walking up the parents."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from tracekit.engine import call_trees, catalog


def by_hand(rows: list[dict]) -> list[dict]:
    """ROWS (in pre-order) finished one at a time: pre-order number from 1; siblings (one parent's children, or one
    thread's top-level events) before and after each; its last descendant: the row before the next sibling of its
    nearest ancestor-or-self that has one, else its thread's last row."""
    at = {(r["rank"], r["id"]): i for i, r in enumerate(rows)}
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        key = ("child of", r["rank"], r["parent"]) if r["parent"] is not None else ("top", r["rank"], r["lane"])
        groups.setdefault(key, []).append(i)
    prev, nxt = {}, {}
    for members in groups.values():
        for a, b in zip(members, members[1:]):
            nxt[a], prev[b] = b, a
    thread_last = {}
    for i, r in enumerate(rows):
        thread_last[(r["rank"], r["lane"])] = i + 1
    out = []
    for i, r in enumerate(rows):
        node = i
        while node not in nxt and rows[node]["parent"] is not None:
            node = at[(rows[node]["rank"], rows[node]["parent"])]
        last = nxt[node] if node in nxt else None
        last_pre = last if last is not None else thread_last[(r["rank"], r["lane"])]  # pre of nxt is nxt + 1
        out.append({**r, "pre": i + 1,
                    "prev_sibling": rows[prev[i]]["id"] if i in prev else None,
                    "prev_sibling_end": rows[prev[i]]["end_ns"] if i in prev else None,
                    "next_sibling_pre": nxt[i] + 1 if i in nxt else None,
                    "last_pre": last_pre})
    return out


def random_forest(seed: int) -> list[dict]:
    """Rows in pre-order on 2 ranks of 1-3 threads each, every parent earlier on its thread (any earlier one: the
    order of real traces' sub-µs improper overlaps is not a depth-first one), ids shuffled and shared by the ranks."""
    rng = random.Random(seed)
    rows = []
    for rank in (0, 7):
        ids = iter(rng.sample(range(10_000), 400))
        for lane in sorted(rng.sample([1, 2**63 + 5, 2**64 - 1, 3], rng.randint(1, 3))):
            thread = []
            for _ in range(rng.randint(0, 60)):
                parent = rng.choice(thread)["id"] if thread and rng.random() < 0.8 else None
                ts = rng.randint(0, 10**6)
                thread.append({"rank": rank, "id": next(ids), "lane": lane, "ts": ts, "end_ns": ts + rng.randint(0, 99),
                               "parent": parent})
            rows += thread
    return rows


def finished(rows: list[dict]) -> list[dict]:
    schema = pa.schema([call_trees.SCHEMA.field(c) for c in call_trees.INPUT_COLUMNS])
    return call_trees.finished_calls(pa.Table.from_pylist(rows, schema=schema)).to_pylist()


@pytest.mark.parametrize("seed", range(40))
def test_random_forests_agree_with_reading_by_hand(seed):
    rows = random_forest(seed)
    assert finished(rows) == by_hand(rows)


def test_a_deep_chain_and_no_rows():
    """A thread of 1000 nested calls (pointer jumping takes ~10 passes, one walk up 999 steps) and an empty input."""
    chain = [{"rank": 0, "id": 5000 - i, "lane": 9, "ts": i, "end_ns": 2000 - i, "parent": 5001 - i if i else None}
             for i in range(1000)]
    rows = chain + [{"rank": 0, "id": 1, "lane": 9, "ts": 1500, "end_ns": 1600, "parent": None}]
    assert finished(rows) == by_hand(rows)
    assert [r["last_pre"] for r in finished(rows)][:2] == [1000, 1000]
    assert finished([]) == []


def test_a_real_traces_call_trees_agree_with_reading_by_hand(loaded_trace):
    """The rows the SQL body selects from a real trace (Python frames with_stack, many threads), finished both ways;
    and the finished table is what the critical path's connection holds."""
    tables = loaded_trace("nvidia/h100_qwen1.5-0.5b.json.gz")
    with catalog.connect(tables, materialize=True) as con:
        catalog.define_macros(con, catalog.macro_calls(catalog.macro_definitions()["_critical_path_calls"]))
        rows = con.sql(catalog.table_macro_body("_critical_path_calls")).to_arrow_table().to_pylist()
        catalog.define_macros(con, {"_critical_path_calls"})
        held = con.sql("from _critical_path_calls()").to_arrow_table().to_pylist()
    assert len(rows) > 5000 and sum(r["parent"] is not None for r in rows) > 1000
    assert held == by_hand(rows)


def test_a_connection_that_does_not_materialize_computes_the_table(loaded_trace):
    """The macro reads its finished table on any connection (ad-hoc SQL, `tracekit sql`): DuckDB cannot inline
    Python."""
    tables = loaded_trace("nvidia/h100_qwen1.5-0.5b.json.gz")
    with catalog.connect(tables) as con:
        catalog.define_macros(con, {"_critical_path_lanes"})
        assert con.sql("select count(*) from _critical_path_lanes()").fetchall()[0][0] > 0
        assert con.sql("select count(*) from _critical_path_calls_result").fetchall()[0][0] > 0
