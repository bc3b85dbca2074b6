"""Delta tables as sources: an external Delta table written by delta-rs (as another job would), read
version by version. MVs created before and after versions land equal DuckDB over the Delta table as
of the version each epoch read, as delta-rs itself reads it; a change data feed brings updates and
deletes into a keyed TABLE; a version that rewrites files without one stops the source, naming it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import sparkwave
from sparkwave.core import policy
from sparkwave.core.errors import SqlError
from tests.kafka_util import check_epoch
from tests.lakehouse_util import file_rows, version_read_by

ROOT = Path(__file__).resolve().parents[2]
EV_DDL = "id BIGINT, name VARCHAR, price DOUBLE"
MVS = {
    "cheap": "SELECT id, name, price FROM dl WHERE price < 40",
    "by_name": "SELECT name, count(*) AS n, sum(price) AS total, max(id) AS last FROM dl GROUP BY name",
}
CDF = {"delta.enableChangeDataFeed": "true"}


def batch(n: int, lo: int) -> pa.Table:
    rows = file_rows(n, lo)
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()), "name": [r[1] for r in rows],
                     "price": [r[2] for r in rows]})


def as_of(path: Path, version: int) -> list[tuple]:
    """The Delta table as of `version`, read by delta-rs (none before version 0)."""
    if version < 0:
        return []
    t = DeltaTable(str(path), version=version).to_pyarrow_table(columns=["id", "name", "price"])
    return list(zip(*(t.column(c).to_pylist() for c in ("id", "name", "price")), strict=True))


def check_all(s, path: Path, relation: str, names: list[str]) -> None:
    for name in names:
        for epoch in s.catalog.committed_epochs(s.catalog.relation(name).created_epoch):
            rows = as_of(path, version_read_by(s, relation, epoch))
            check_epoch(s, epoch, {"dl": (EV_DDL, rows)}, {name: MVS[name]})


def test_appends_with_mvs_before_and_after_they_land(session, tmp_path):
    path = tmp_path / "delta"
    write_deltalake(str(path), batch(50, 0))
    write_deltalake(str(path), batch(50, 50), mode="append")
    session.sql(f"CREATE SOURCE dl (id bigint, name varchar, price double) WITH (connector = 'deltalake', "
                f"location = '{path}', max.rows.per.epoch = '60')")
    session.sql(f"CREATE MATERIALIZED VIEW cheap AS {MVS['cheap']}")
    session.flush()
    assert version_read_by(session, "dl", session.committed_epoch) == 0, "an epoch of at most 60 rows: one version"
    for lo in (100, 130):
        write_deltalake(str(path), batch(30, lo), mode="append")
    DeltaTable(str(path)).optimize.compact()  # rearranges files (no dataChange): adds no rows
    write_deltalake(str(path), batch(20, 160), mode="append")
    for _ in range(2):
        session.flush()
    session.sql("SET backfill_chunk_rows = 1; SET background_ddl = true")
    session.sql(f"CREATE MATERIALIZED VIEW by_name AS {MVS['by_name']}")  # reads versions 0..S, then those after
    write_deltalake(str(path), batch(10, 180), mode="append")
    session.wait()
    latest = DeltaTable(str(path)).version()
    while version_read_by(session, "dl", session.committed_epoch) < latest:
        session.flush()
    session.flush()
    check_all(session, path, "dl", list(MVS))
    assert sum(r.n for r in session.sql("SELECT n FROM by_name").collect()) == 190
    (src,) = session.sql("SHOW SOURCES").collect()
    assert (src.connector, src.topic, src.committed_offsets, src.status) == (
        "deltalake", str(path), f'{{"0": {latest + 1}}}', None)


def test_a_change_data_feed_brings_updates_and_deletes_into_a_keyed_table(session, tmp_path, monkeypatch):
    monkeypatch.setattr(policy, "LOCAL_ROWS", 1)  # the versions' files read by Spark's tasks, not the driver
    path = tmp_path / "delta"
    write_deltalake(str(path), batch(40, 0), configuration=CDF)
    session.sql(f"CREATE TABLE dl (id bigint PRIMARY KEY, name varchar, price double) WITH (connector = "
                f"'deltalake', location = '{path}')")
    session.sql(f"CREATE MATERIALIZED VIEW by_name AS {MVS['by_name']}")
    session.flush()
    dt = DeltaTable(str(path))
    dt.update(updates={"price": "price + 100", "name": "'upd'"}, predicate="id % 5 = 0")
    write_deltalake(str(path), batch(10, 40), mode="append")
    session.flush()
    dt = DeltaTable(str(path))
    dt.delete("id % 3 = 0")
    new = batch(6, 45)  # ids 45..50: 45..49 exist (an update), 50 is new (an insert)
    new = new.set_column(1, "name", pa.array(["merged"] * 6))
    (DeltaTable(str(path)).merge(new, "t.id = s.id", source_alias="s", target_alias="t")
     .when_matched_update_all().when_not_matched_insert_all().execute())
    write_deltalake(str(path), batch(20, 30), mode="overwrite")  # no change files: removed rows, then added rows
    write_deltalake(str(path), batch(5, 60), mode="append")
    session.sql(f"CREATE MATERIALIZED VIEW cheap AS {MVS['cheap']}")
    latest = DeltaTable(str(path)).version()
    while version_read_by(session, "dl", session.committed_epoch) < latest:
        session.flush()
    session.wait()
    session.flush()
    check_all(session, path, "dl", list(MVS))
    for epoch in session.catalog.committed_epochs(session.catalog.relation("dl").created_epoch):
        check_epoch(session, epoch, {"d": (EV_DDL, as_of(path, version_read_by(session, "dl", epoch)))},
                    {"dl": "SELECT id, name, price FROM d"})


def test_a_version_rewriting_files_without_a_change_feed_stops_the_source_naming_it(session, tmp_path):
    path, cdf = tmp_path / "plain", tmp_path / "cdf"
    write_deltalake(str(path), batch(10, 0))
    write_deltalake(str(path), batch(10, 10), mode="append")
    DeltaTable(str(path)).delete("id < 5")  # version 2: rewrites a file, no change data
    write_deltalake(str(path), batch(10, 20), mode="append")
    session.sql(f"CREATE SOURCE dl (id bigint, name varchar, price double) WITH (connector = 'deltalake', "
                f"location = '{path}')")
    session.sql("CREATE MATERIALIZED VIEW n AS SELECT count(*) AS n FROM dl")
    for _ in range(2):
        session.flush()
    assert version_read_by(session, "dl", session.committed_epoch) == 1, "the versions before it are read"
    assert session.sql("SELECT n FROM n").collect()[0].n == 20
    (src,) = session.sql("SHOW SOURCES").collect()
    assert f"version 2 of Delta table '{path}' (DELETE) rewrites files without a change data feed" in src.status
    (job,) = [j for j in session.jobs() if j.name == "dl"]
    assert job.error == src.status, "SHOW JOBS says why it waits"
    # An append-only relation over a change feed that deletes: the version is named too.
    write_deltalake(str(cdf), batch(10, 0), configuration=CDF)
    DeltaTable(str(cdf)).delete("id = 3")
    session.sql(f"CREATE SOURCE dc (id bigint) WITH (connector = 'deltalake', location = '{cdf}')")
    for _ in range(2):
        session.flush()
    status = {r.name: r.status for r in session.sql("SHOW SOURCES").collect()}
    assert f"version 1 of Delta table '{cdf}' (DELETE) updates or deletes rows" in status["dc"]
    assert version_read_by(session, "dc", session.committed_epoch) == 0
    with pytest.raises(SqlError, match="no Delta table there"):
        session.sql(f"CREATE SOURCE nothing (id bigint) WITH (connector = 'deltalake', location = '{tmp_path}')")
    with pytest.raises(SqlError, match="location must be an absolute path"):
        session.sql("CREATE SOURCE rel (id bigint) WITH (connector = 'deltalake', location = 'relative/path')")


@pytest.mark.parametrize("crash_at", ["before_catalog_commit:3", "mid_commit:2"])
def test_a_delta_source_killed_mid_epoch_reads_each_version_once(spark, tmp_path, crash_at):
    from tests import delta_crash_child as child

    path, wh = tmp_path / "delta", tmp_path / "wh"
    latest = child.land(str(path))
    env = {**os.environ, "SPARKWAVE_CRASH_AT": crash_at}
    proc = subprocess.run([sys.executable, "-m", "tests.delta_crash_child", str(wh), str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        while version_read_by(s, "dl", s.committed_epoch) < latest:
            s.flush()
        s.flush()
        read = [v for _, r in s.catalog.source_ranges("dl") for v in range(*r["0"])]
        assert read == list(range(latest + 1)), "each version once, in order"
        check_all(s, path, "dl", ["by_name"])
        for epoch in s.catalog.committed_epochs(s.catalog.relation("dl").created_epoch):
            check_epoch(s, epoch, {"d": (EV_DDL, as_of(path, version_read_by(s, "dl", epoch)))},
                        {"dl": "SELECT id, name, price FROM d"})


def test_a_create_without_columns_takes_the_delta_tables(session, tmp_path):
    path = tmp_path / "delta"
    write_deltalake(str(path), batch(5, 0))
    session.sql(f"CREATE SOURCE typed WITH (connector = 'deltalake', location = '{path}')")
    assert [(c.name, c.type.name) for c in session.catalog.relation("typed").schema.visible] == [
        ("id", "bigint"), ("name", "varchar"), ("price", "double")]
    session.sql("CREATE MATERIALIZED VIEW n AS SELECT count(*) AS n, sum(id) AS s FROM typed")
    session.flush()
    assert [tuple(r) for r in session.sql("SELECT n, s FROM n").collect()] == [(5, 10)]
    with pytest.raises(SqlError, match="the columns of Delta table .* cannot be read"):
        session.sql(f"CREATE SOURCE nothing WITH (connector = 'deltalake', location = '{tmp_path / 'none'}')")
    with pytest.raises(SqlError, match="needs at least one column"):
        session.sql("CREATE SOURCE k WITH (connector = 'kafka', topic = 't', properties.bootstrap.server = 'x:1')")
    assert session.catalog.relation("nothing") is None and session.catalog.relation("k") is None
