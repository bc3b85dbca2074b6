"""Review of the PostgreSQL catalog (issue 50 item 3): answers that differed from SQLite's, a
password echoed by an error, a bad record a PostgreSQL catalog could not commit, and a PostgreSQL
warehouse whose creation a crash interrupted. Real SQLite and PostgreSQL; no Spark."""

from __future__ import annotations

import itertools
import logging
import os

import pytest

from sparkwave.core.catalog import Catalog, Relation, history, location
from sparkwave.core.schema import Schema
from sparkwave.storage.warehouse import MARKER, Warehouse
from tests.unit.test_catalog_migrations import T_SCHEMA

_names = itertools.count()


@pytest.fixture
def pg_dsn(postgres) -> str:
    return postgres.create_database(f"review{next(_names)}")


@pytest.mark.parametrize("dsn", ["password=hunter2 host=h dbname", "host=h password='hunter2 dbname=d",
                                 "postgresql://h/db?password=hunter2&x", "host=h password = hunter2 port"])
def test_a_malformed_connection_string_is_refused_without_its_password(tmp_path, dsn: str) -> None:
    with pytest.raises(Exception, match="not a PostgreSQL connection string") as e:
        Warehouse(tmp_path / "wh").open(dsn)
    assert "hunter2" not in str(e.value)


def _catalogs(tmp_path, pg_dsn):
    for name, dsn in (("sqlite", None), ("postgresql", pg_dsn)):
        wh = Warehouse(tmp_path / name)
        wh.open(dsn)
        yield name, wh, Catalog(wh.catalog_path, create=False)


def test_history_is_pruned_alike_on_both_back_ends(tmp_path, pg_dsn, monkeypatch) -> None:
    """A relation with no retention yet is needed from its creation epoch: SQLite's `CAST(NULL AS
    INTEGER)` is NULL, so the floor is `created_epoch`; PostgreSQL's translation made it 0 and
    never pruned a committed epoch (the catalog grew for good)."""
    monkeypatch.setattr(history, "KEPT_EPOCHS", 1)
    gone = {}
    for name, _, catalog in _catalogs(tmp_path, pg_dsn):
        try:
            with catalog.transaction() as db:
                catalog.add_relation(db, Relation("t", "table", Schema.from_json(T_SCHEMA), {}, 3, "created"))
            for epoch in range(1, 7):
                catalog.persist_plan(epoch, epoch - 1, {"now": epoch}, [])
                catalog.commit_epoch(epoch, [], {}, 0, 0.1)
            gone[name] = (catalog.prune_history(), catalog.committed_by(1e12))
        finally:
            catalog.close()
    assert gone["sqlite"] == gone["postgresql"]
    assert gone["sqlite"][0] == 2  # epochs 1 and 2, below t's creation epoch 3


def test_a_bad_record_with_a_nul_character_commits_on_both_back_ends(tmp_path, pg_dsn) -> None:
    """A Kafka payload is decoded with `backslashreplace`: a 0x00 byte stays a NUL character, which
    PostgreSQL's text cannot hold. Its epoch failed on every retry: the pipeline stopped for good."""
    kept = {}
    for name, _, catalog in _catalogs(tmp_path, pg_dsn):
        try:
            with catalog.transaction() as db:
                catalog.add_relation(db, Relation("t", "table", Schema.from_json(T_SCHEMA), {}, 0, "created"))
            catalog.persist_plan(1, 0, {"now": 1}, [])
            catalog.commit_epoch(1, [], {"t": {"0": 2}}, 2, 0.1,
                                 errors=[("t", "0", 1, "not JSON: '\x00{'", "\x00{\"a\": 1}")], bad_counts={"t": 1})
            kept[name] = (catalog.committed_epoch(), [tuple(r)[:3] for r in catalog.source_errors("t", 10)])
        finally:
            catalog.close()
    assert kept["sqlite"] == kept["postgresql"]
    assert kept["postgresql"][0] == 1


@pytest.mark.parametrize("left", [f"{MARKER}.tmp", f"{location.CATALOG_FILE}.tmp"])
def test_a_postgresql_warehouse_whose_creation_crashed_opens_again(tmp_path, pg_dsn, left: str) -> None:
    """A crash while the marker (or the CATALOG file) was being written leaves its temporary file:
    SQLite's warehouse is adopted then (its catalog.db is there); a PostgreSQL one was refused for
    good ("not a sparkwave warehouse")."""
    root = tmp_path / "wh"
    if left.startswith(MARKER):
        Warehouse(root).open(pg_dsn)
        os.replace(root / MARKER, root / left)  # as if the crash came before the marker's rename
        os.rmdir(root / "tables")
    else:
        root.mkdir()
        (root / left).write_text('{"postgresql": "dbn')  # the crash came while it was being written
    Warehouse(root).open(pg_dsn)
    assert (root / MARKER).exists()
    Warehouse(root).open()  # and later opens follow it
    catalog = Catalog(root / "catalog.db", create=False)
    try:
        assert catalog.where.startswith("PostgreSQL catalog")
    finally:
        catalog.close()


def test_a_spark_connect_token_is_not_echoed_by_serve(tmp_path, monkeypatch) -> None:
    """`serve --spark-remote sc://host:port/;token=...`: a URL the client refuses was printed whole."""
    from sparkwave.cli.serve import ServeError, _connect_spark

    monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED", raising=False)  # restored: the client sets it
    for name in ("pyspark", "grpc"):  # `_connect_spark` sends these loggers to its log file: restored after
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "handlers", list(logger.handlers))
        monkeypatch.setattr(logger, "propagate", logger.propagate)
    with pytest.raises(ServeError, match="no Spark Connect session at sc://127.0.0.1:1/") as e:
        _connect_spark(tmp_path / "spark.log", "sc://127.0.0.1:1/;token=SECRETTOKEN;bogus", {})
    assert "SECRETTOKEN" not in str(e.value)
