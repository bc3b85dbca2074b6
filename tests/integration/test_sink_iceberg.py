"""The Iceberg sink in a running warehouse: the Iceberg table, read back by pyiceberg after each
delivery and by DuckDB over the current snapshot's data files at the end, equals DuckDB's oracle
over the inputs at every epoch the sink commits; its backfill is chunked and paced like the other
sinks'; bad options create nothing."""

from __future__ import annotations

import threading
from collections import Counter

import duckdb
import pytest

from sparkwave.core.errors import SqlError
from tests.integration.test_sinks import AGG_COLS, FLT_COLS, rounds
from tests.oracle import multiset
from tests.sink_util import MV_QUERIES, T_DDL, oracle, wait_sink


def iceberg_with(tmp_path, table: str, **changed: str) -> str:
    options = {"connector": "iceberg", "warehouse.path": str(tmp_path / "lake"), "database.name": "db",
               "table.name": table, "catalog.type": "sql", "catalog.uri": f"sqlite:///{tmp_path / 'catalog.db'}",
               "create_table_if_not_exists": "true"}
    options.update({k.replace("__", "."): v for k, v in changed.items()})
    return ", ".join(f"{k} = '{v}'" for k, v in options.items())


def load(tmp_path, table: str):
    from pyiceberg.catalog.sql import SqlCatalog
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path / 'catalog.db'}")
    return catalog.load_table(("db", table))


def iceberg_rows(tmp_path, table: str, cols: list[str]) -> Counter:
    return multiset(tuple(r[c] for c in cols) for r in load(tmp_path, table).scan().to_arrow().to_pylist())


def duckdb_rows(tmp_path, table: str, cols: list[str]) -> Counter:
    """DuckDB over the data files of the current snapshot (copy-on-write: there are no delete files)."""
    tasks = list(load(tmp_path, table).scan().plan_files())
    assert all(not t.delete_files for t in tasks)
    files = [t.file.file_path.removeprefix("file://") for t in tasks]
    return multiset(duckdb.connect().execute(f"SELECT {', '.join(cols)} FROM read_parquet({files})").fetchall())


class Deliveries:
    """What each Iceberg table held right after each delivery of its sink."""

    def __init__(self, session, tmp_path, targets: dict[str, tuple[str, list[str]]]) -> None:
        self.tmp_path, self.targets = tmp_path, targets
        self.seen: list[tuple[str, int, int, Counter]] = []
        self._lock = threading.Lock()
        session.sinks.delivered_hook = self._hook

    def _hook(self, sink: str, position) -> None:
        table, cols = self.targets[sink]
        rows = iceberg_rows(self.tmp_path, table, cols)
        with self._lock:
            self.seen.append((sink, position.epoch, position.vnode, rows))


def test_an_iceberg_sink_equals_the_mv_at_every_epoch_it_commits(session, tmp_path, monkeypatch):
    import sparkwave.meta.sinks as sinks_module
    monkeypatch.setattr(sinks_module, "SNAPSHOT_CHUNK_ROWS", 4)  # the sink backfill takes several deliveries
    session.sql(f"CREATE TABLE t ({T_DDL}); CREATE TABLE log (x int, y varchar) APPEND ONLY")
    for name, q in MV_QUERIES.items():
        session.sql(f"CREATE MATERIALIZED VIEW {name} AS {q}")
    rounds(session, 0, 3)
    session.sql("INSERT INTO log VALUES (1, 'a'), (2, 'b')")
    deliveries = Deliveries(session, tmp_path, {"i_agg": ("agg_out", AGG_COLS), "i_log": ("log_out", ["x", "y"]),
                                                 "i_flt": ("flt_out", FLT_COLS)})
    session.sql(f"CREATE SINK i_agg FROM agg WITH ({iceberg_with(tmp_path, 'agg_out')}, type = 'upsert')")
    session.sql(f"CREATE SINK i_log FROM log WITH ({iceberg_with(tmp_path, 'log_out')}, type = 'append-only')")
    session.sql(f"CREATE SINK i_flt AS SELECT k, v, s FROM t WHERE v % 3 <> 0 WITH "
                f"({iceberg_with(tmp_path, 'flt_out')}, primary_key = 'k')")
    snapshot_steps = [s for s in session.catalog.job_steps(session.catalog.sink("i_flt").job) if s.phase == "snapshot"]
    assert len(snapshot_steps) >= 2  # chunked
    epochs = rounds(session, 3, 5)
    session.sql("INSERT INTO log VALUES (3, 'c'), (3, 'c')")
    last = session.flush()
    for sink in ("i_agg", "i_log", "i_flt"):
        wait_sink(session, sink, last)
    inputs = {"t": ["k", "g", "v", "s"]}
    for sink, query in (("i_agg", MV_QUERIES["agg"]), ("i_flt", MV_QUERIES["flt"])):
        seen = [(e, rows) for s, e, v, rows in deliveries.seen if s == sink and v == 256]
        assert len(seen) >= 3, (sink, len(seen))
        for epoch, rows in seen:
            assert rows == oracle(session, query, epoch, inputs), (sink, epoch)
    assert duckdb_rows(tmp_path, "agg_out", AGG_COLS) == oracle(session, MV_QUERIES["agg"], last, inputs)
    log_rows = multiset(tuple(r) for r in session.table("log", as_of=last).select("x", "y").collect())
    assert iceberg_rows(tmp_path, "log_out", ["x", "y"]) == log_rows == duckdb_rows(tmp_path, "log_out", ["x", "y"])
    summary = load(tmp_path, "agg_out").current_snapshot().summary
    assert summary["sparkwave.sink"] == "i_agg" and int(summary["sparkwave.epoch"]) == epochs[-1]
    shown = {r["name"]: r for r in session.sql("SHOW SINKS").collect()}
    assert shown["i_agg"]["committed_epoch"] == last and shown["i_agg"]["phase"] == "running"
    job = {j["name"]: j for j in session.sql("SHOW JOBS").collect()}["i_agg"]
    assert job["kind"] == "sink" and job["snapshot_rows_done"] == job["snapshot_rows_total"] > 0


def test_a_paused_iceberg_sink_catches_up_exactly_and_bad_options_create_nothing(session, tmp_path):
    session.sql(f"CREATE TABLE t ({T_DDL})")
    for name, q in MV_QUERIES.items():
        session.sql(f"CREATE MATERIALIZED VIEW {name} AS {q}")
    rounds(session, 0, 1)
    session.sql("SET background_ddl = true")
    session.sql(f"CREATE SINK p FROM flt WITH ({iceberg_with(tmp_path, 'p_out')}, sink_rate_limit = 0)")
    assert session.sql("SHOW SINKS").collect()[0]["phase"] == "paused"
    epochs = rounds(session, 1, 3)  # the pipeline commits while the sink is paused
    assert load(tmp_path, "p_out").current_snapshot() is None  # created at CREATE SINK, nothing delivered yet
    session.sql("ALTER SINK p SET SINK_RATE_LIMIT = DEFAULT")
    wait_sink(session, "p", epochs[-1])
    assert iceberg_rows(tmp_path, "p_out", FLT_COLS) == oracle(session, MV_QUERIES["flt"], epochs[-1],
                                                               {"t": ["k", "g", "v", "s"]})
    bad = {
        "in-memory catalog": iceberg_with(tmp_path, "x", catalog__uri="sqlite://"),
        "inside the warehouse": iceberg_with(tmp_path, "x", warehouse__path=str(session.warehouse.root / "lake")),
        "does not exist": iceberg_with(tmp_path, "x", create_table_if_not_exists="false"),
        "column 'g' .int. is missing": iceberg_with(tmp_path, "p_out"),
    }
    for message, options in bad.items():
        with pytest.raises(SqlError, match=message):
            session.sql(f"CREATE SINK b FROM {'agg' if 'column' in message else 'flt'} WITH ({options})")
        assert session.catalog.sink("b") is None
