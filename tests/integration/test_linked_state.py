"""A join side that is an append-only table's rows keeps them under the table's column names, and a
backfill links the table's snapshot files as that state's base instead of writing a sorted copy
(`stream/table_side.py`, `storage/links.py`); its first compaction writes the copy."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkwave
from sparkwave.core import policy
from tests.integration.test_dataflow_oracle import TABLES, check, stmt
from tests.integration.test_oracle import FAST_PHASES
from tests.oracle import Model, rows_of, to_sql

LINKED_MVS = [
    ("l_early", "SELECT e.g, e.v, dim.name FROM e JOIN dim ON e.g = dim.g"),
    # created mid-stream: the table's side is preserved (its NULL keys are in the linked files), or not
    ("l_left", "SELECT e.v, dim.name, dim.w FROM e LEFT JOIN dim ON e.g = dim.g AND e.v = dim.w"),
    ("l_agg", "SELECT dim.name, count(*) AS n, max(e.v) AS mx FROM dim JOIN e ON dim.g = e.g GROUP BY dim.name"),
    # q7's shape: the table's rows against an aggregate of them, which the build computes first
    ("l_max", "SELECT e.g, e.v FROM e JOIN (SELECT g, max(v) AS mv FROM e GROUP BY g) m ON e.g = m.g AND e.v = m.mv"),
]


@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck), phases=FAST_PHASES)
@given(epochs=st.lists(st.lists(stmt, min_size=2, max_size=6), min_size=2, max_size=3), late=st.integers(0, 1),
       strategy=st.sampled_from(["snapshot", "blocking"]), chunk_rows=st.sampled_from([1, 10_000_000]))
def test_joins_keeping_a_tables_rows_equal_duckdb_at_every_epoch(spark, tmp_path_factory, epochs, late, strategy,
                                                                 chunk_rows):
    """Backfilled in one chunk or one per vnode (the linking chunk is the first), every step as
    Spark frames (the snapshot build links; a build on the driver would not), compacted in between:
    the MVs equal DuckDB's at every epoch."""
    model = Model()
    with sparkwave.connect(tmp_path_factory.mktemp("wh"), spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql(f"SET big_epoch_rows = 0; SET backfill_chunk_rows = {chunk_rows}")
        for ddl, name, duck, cols, key in TABLES:
            s.sql(ddl)
            model.table(name, duck, cols, key)
        for i, seed in enumerate(([("insert", "e", [(1, 4), (None, 2), (3, 7)]),
                                   ("insert", "dim", [(0, "x", 0), (1, "y", 4), (2, "z", 2), (3, None, 7)])],
                                  [("insert", "e", [(1, 5), (2, 2), (0, 0)])])):
            for statement in seed:
                s.sql(to_sql(statement))
            model.apply_epoch(seed)
            s.flush()
            if i == 0:
                s.compact("e")  # the table's snapshot: a base and log files
        s.sql(f"CREATE MATERIALIZED VIEW {LINKED_MVS[0][0]} AS {LINKED_MVS[0][1]}")
        model.view(*LINKED_MVS[0])
        created = [LINKED_MVS[0][0]]
        for i, batch in enumerate(epochs):
            if i == late:
                for name, sql in LINKED_MVS[1:]:
                    s.sql(f"CREATE MATERIALIZED VIEW {name} WITH (backfill_strategy = '{strategy}') AS {sql}")
                    model.view(name, sql)
                    created.append(name)
                    files = _base_files(s, _state(s, name, "e"))
                    assert files and all(Path(f).name.startswith("linked-") for f in files)
                check(s, model, s.committed_epoch, created)
                batch = [("update", "dim", {"w": "w + 1"}, "g <= 4"), *batch]  # every group's rows are looked up
            for statement in batch:
                s.sql(to_sql(statement))
            model.apply_epoch(batch)
            check(s, model, s.flush(), created)
            if i == late + 1:
                s.compact()  # the linked states' sorted copies
                assert not any(Path(f).name.startswith("linked-") for n in created
                               for f in _base_files(s, _state(s, n, "e")))
                check(s, model, s.committed_epoch, created)


def _state(s: sparkwave.Session, mv: str, relation: str) -> str:
    """The one state table of `mv` that keeps `relation`'s rows."""
    plan = s.catalog.relation(mv).definition["dataflow"]
    found = []

    def walk(op: dict) -> None:
        for side, rel in op.get("linked", {}).items():
            if rel == relation:
                found.append(f"{mv}.j{op['id']}{side[0]}")
        for child in op.get("inputs", []):
            walk(child)

    walk(plan)
    assert len(found) == 1, f"{mv} keeps {relation}'s rows in {found}"
    return found[0]


def _base_files(s: sparkwave.Session, name: str) -> list[str]:
    base = s.catalog.base_at(name, s.committed_epoch)
    return base.files if base else []


def test_a_backfill_links_the_tables_files_and_compaction_replaces_them(session, monkeypatch):
    """The state's base is the table's base and log files, hard-linked: the table's compaction and
    retention remove the table's names of them, not the state's; new rows reach the state as its
    own log; the state's compaction writes a copy sorted by join key and its retention removes the
    links, not the table's files; a DROP of the MV leaves the table whole."""
    s = session
    s.sql("CREATE TABLE ev (g int, v int, note varchar) APPEND ONLY; "
          "CREATE TABLE d (g int, name varchar, PRIMARY KEY (g)); SET big_epoch_rows = 0")
    s.sql("INSERT INTO ev VALUES (3, 30, 'a'), (1, 10, 'b'), (NULL, 5, 'c'), (2, 20, 'd')")
    s.sql("INSERT INTO d VALUES (1, 'one'), (2, 'two'), (3, 'three')")
    s.flush()
    s.compact("ev")
    s.sql("INSERT INTO ev VALUES (1, 11, 'e'), (4, 40, 'f')")
    s.flush()
    base = s.catalog.base_at("ev", s.committed_epoch)
    table_files = base.files + [p for _, p in s.catalog.log_files("ev", base.epoch, s.committed_epoch)]
    s.sql("CREATE MATERIALIZED VIEW m AS SELECT ev.v, d.name FROM ev JOIN d ON ev.g = d.g")
    state = _state(s, "m", "ev")
    linked = _base_files(s, state)
    assert all(Path(f).name.startswith("linked-") for f in linked) and len(linked) == len(table_files) == 2
    assert {os.stat(f).st_ino for f in linked} == {os.stat(f).st_ino for f in table_files}, "not the table's files"
    assert sorted(rows_of(s.table("m"))) == [(10, "one"), (11, "one"), (20, "two"), (30, "three")]

    s.sql("SET retention_seconds = 0")
    s.compact("ev")  # the table's new base: its retention removes its old files
    assert not any(os.path.exists(f) for f in table_files)
    s.sql("INSERT INTO d VALUES (4, 'four'); INSERT INTO ev VALUES (2, 21, 'g')")  # lookups in both directions
    s.flush()
    assert sorted(rows_of(s.table("m"))) == [(10, "one"), (11, "one"), (20, "two"), (21, "two"), (30, "three"),
                                             (40, "four")]

    assert session.maintenance.run(s.catalog.relation(state), s.committed_epoch)
    copied = _base_files(s, state)
    assert not any(Path(f).name.startswith("linked-") for f in copied)
    assert not any(os.path.exists(f) for f in linked), "the state's retention kept its links"
    keys = [k for f in copied for k in pq.read_table(f)["g"].to_pylist()]
    assert keys == sorted(keys, key=lambda k: (k is not None, k)), "the copy is not sorted by join key"
    assert all(os.path.exists(f) for f in _base_files(s, "ev"))

    s.sql("UPDATE d SET name = 'uno' WHERE g = 1")
    s.flush()
    assert sorted(rows_of(s.table("m"))) == [(10, "uno"), (11, "uno"), (20, "two"), (21, "two"), (30, "three"),
                                             (40, "four")]
    monkeypatch.setattr(policy, "LINK_MAX_ROWS", 6)  # a bigger table's side is written sorted by the backfill
    s.sql("CREATE MATERIALIZED VIEW m2 AS SELECT ev.v, d.name FROM ev JOIN d ON ev.g = d.g")
    assert not any(Path(f).name.startswith("linked-") for f in _base_files(s, _state(s, "m2", "ev")))
    assert sorted(rows_of(s.table("m2"))) == sorted(rows_of(s.table("m")))
    s.sql("DROP MATERIALIZED VIEW m")
    assert sorted(rows_of(s.table("ev").select("v"))) == [(5,), (10,), (11,), (20,), (21,), (30,), (40,)]


def test_a_tables_rows_joined_with_a_small_aggregate_broadcast_it(session):
    """Spark cannot size an aggregate's output before computing it: the snapshot build computes a
    join side that state computes, against a table's rows, before the writes are planned, so the
    MV's rows are a broadcast join of the small aggregate, not a shuffle and sort of the table."""
    from sparkwave.stream.dataflow import Dataflow

    s = session
    s.sql("CREATE TABLE e (g int, v int) APPEND ONLY")
    s.insert("e", pa.table({"g": [i % 5 for i in range(2_000)], "v": list(range(2_000))}))
    s.flush()
    s.sql(f"CREATE MATERIALIZED VIEW l_max AS {dict(LINKED_MVS)['l_max']}")
    assert sorted(rows_of(s.table("l_max"))) == [(g, 1_995 + g) for g in range(5)]
    flow = Dataflow(s.rt, s.catalog.relation("l_max"))
    threshold = s.spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    s.spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "4096")  # the table's files are bigger
    try:
        plan = flow.build(s.committed_epoch)["l_max"]._jdf.queryExecution().executedPlan().toString()
    finally:
        s.spark.conf.set("spark.sql.autoBroadcastJoinThreshold", threshold)
        flow.release()
    assert "BroadcastHashJoin" in plan and "SortMergeJoin" not in plan, plan

