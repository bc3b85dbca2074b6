"""sparkwave deletes only what it owns: a warehouse is recognised by its marker; a folder that is
not one is refused untouched; a warehouse without a readable catalog is refused, not emptied;
what recovery cannot place goes to lost+found; removal stays inside the warehouse. Also: retention
after a forward clock jump, and column names Spark cannot quote."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sparkwave
from sparkwave.core.catalog import Catalog, Relation
from sparkwave.core.epoch import epoch_from_ms
from sparkwave.core.errors import CatalogError, NotRetainedError, SqlError, WarehouseError
from sparkwave.core.schema import Column, Schema, parse_type
from sparkwave.storage.sweep import sweep
from sparkwave.storage.warehouse import FORMAT_VERSION, MARKER, Warehouse
from tests.oracle import rows_of

ROOT = Path(__file__).resolve().parents[2]


def files_of(folder: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under `folder`, by relative path."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), folder)] = None
        for f in filenames:
            path = os.path.join(dirpath, f)
            out[os.path.relpath(path, folder)] = Path(path).read_bytes()
    return out


def user_folder(tmp_path: Path) -> Path:
    home = tmp_path / "pictures"
    (home / "tables" / "photos_2023").mkdir(parents=True)
    (home / "tables" / "photos_2023" / "img.jpg").write_bytes(b"\xff\xd8\xff\xe0 a photo")
    (home / "tables" / "taxes").mkdir()
    (home / "tables" / "taxes" / "2024.pdf").write_bytes(b"%PDF-1.7 taxes")
    (home / "notes.txt").write_text("my notes\n")
    (home / "staging").mkdir()
    (home / "staging" / "draft.doc").write_bytes(b"draft")
    return home


def test_connect_refuses_a_folder_of_user_files_and_touches_none(spark, tmp_path):
    home = user_folder(tmp_path)
    before = files_of(home)
    with pytest.raises(WarehouseError, match=f"{home} is not a sparkwave warehouse"):
        sparkwave.connect(home, spark=spark)
    assert files_of(home) == before  # nothing deleted, nothing added (no OWNER, catalog.db, marker)


def test_cli_refuses_a_folder_of_user_files_and_touches_none(tmp_path):
    home = user_folder(tmp_path)
    before = files_of(home)
    r = subprocess.run([sys.executable, "-m", "sparkwave.cli.main", "sql", "--warehouse", str(home), "-e",
                        "SHOW TABLES"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "COLUMNS": "300"})
    assert r.returncode == 1 and "is not a sparkwave warehouse" in r.stdout, r.stdout + r.stderr
    assert files_of(home) == before


def test_a_new_warehouse_has_a_marker_and_an_old_one_is_adopted(spark, tmp_path):
    wh = tmp_path / "wh"
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE t (k int, v varchar, PRIMARY KEY (k)); INSERT INTO t VALUES (1, 'a'), (2, 'b')")
        s.flush()
    marker = json.loads((wh / MARKER).read_text())
    assert marker["version"] == FORMAT_VERSION and marker["created"]
    (wh / MARKER).unlink()  # as the release before the marker left it
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        assert sorted(rows_of(s.table("t"))) == [(1, "a"), (2, "b")]
    assert json.loads((wh / MARKER).read_text())["version"] == FORMAT_VERSION


def test_a_marker_of_a_newer_format_is_refused(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    wh.open()
    wh.marker_path.write_text(json.dumps({"kind": "sparkwave warehouse", "version": FORMAT_VERSION + 1}))
    before = files_of(wh.root)
    with pytest.raises(WarehouseError, match=f"format version {FORMAT_VERSION + 1}.*newer"):
        sparkwave.connect(wh.root)
    wh.marker_path.write_text("{not json")
    with pytest.raises(WarehouseError, match=f"marker {wh.marker_path} cannot be read"):
        sparkwave.connect(wh.root)
    wh.marker_path.write_text(json.dumps({"kind": "sparkwave warehouse", "version": FORMAT_VERSION + 1}))
    assert files_of(wh.root) == before


@pytest.mark.parametrize("damage", ["deleted", "truncated", "garbage"])
def test_a_warehouse_without_a_readable_catalog_is_refused_and_its_data_kept(spark, tmp_path, damage):
    wh = tmp_path / "wh"
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE t (k int, PRIMARY KEY (k)); INSERT INTO t VALUES (1), (2)")
        s.flush()
    data = files_of(wh / "tables")
    assert any(p.endswith(".parquet") for p in data)
    catalog = wh / "catalog.db"
    {"deleted": catalog.unlink, "truncated": lambda: catalog.write_bytes(b""),
     "garbage": lambda: catalog.write_bytes(b"not a database " * 100)}[damage]()
    what = {"deleted": "is missing", "truncated": "is empty", "garbage": "cannot be read"}[damage]
    with pytest.raises(WarehouseError, match=f"the catalog {catalog} of warehouse {wh} {what}"):
        sparkwave.connect(wh, spark=spark)
    assert files_of(wh / "tables") == data
    assert catalog.exists() == (damage != "deleted")  # never made again in its place


def test_what_recovery_cannot_place_goes_to_lost_and_found(spark, tmp_path, caplog):
    wh = tmp_path / "wh"
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE t (k int, PRIMARY KEY (k)); INSERT INTO t VALUES (1)")
        s.flush()
        s.sql("CREATE TABLE gone (k int); DROP TABLE gone")
        assert s.catalog.pending_folders() == set() and not (wh / "tables" / "gone").exists()
        batches = int(s.catalog.setting("counter.dml_batch"))
    (wh / "tables" / "photos_2023").mkdir()
    (wh / "tables" / "photos_2023" / "img.jpg").write_bytes(b"a photo")
    (wh / "staging" / "draft.doc").write_bytes(b"draft")
    (wh / "staging" / f"dml-{batches - 1}").mkdir()  # a statement that crashed before it was staged
    with caplog.at_level(logging.WARNING, logger="sparkwave.storage.sweep"):
        with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
            assert rows_of(s.table("t")) == [(1,)]
    (lost,) = (wh / "lost+found").iterdir()
    assert (lost / "tables" / "photos_2023" / "img.jpg").read_bytes() == b"a photo"
    assert (lost / "staging" / "draft.doc").read_bytes() == b"draft"
    assert sorted(files_of(lost)) == ["staging", "staging/draft.doc", "tables", "tables/photos_2023",
                                      "tables/photos_2023/img.jpg"]
    assert not (wh / "tables" / "photos_2023").exists() and not (wh / "staging" / f"dml-{batches - 1}").exists()
    assert "photos_2023" in caplog.text and "lost+found" in caplog.text


def test_recovery_deletes_only_folders_the_catalog_recorded(tmp_path):
    """A CREATE records its folder before making it and a DROP before removing it: a crash in
    between leaves a folder recovery deletes; a folder it never recorded is moved."""
    wh = Warehouse(tmp_path / "wh")
    wh.open()
    catalog = Catalog(wh.catalog_path, create=False)
    try:
        catalog.folder_pending("half_made")  # as CREATE does first
        (wh.root / "tables" / "half_made" / "log").mkdir(parents=True)
        (wh.root / "tables" / "half_made" / "log" / "e1.parquet").write_bytes(b"x")
        catalog.folder_pending("dropped")
        with catalog.transaction() as db:  # a CREATE's commit takes the folder over ...
            catalog.add_relation(db, Relation("dropped", "table", Schema((Column("k", parse_type("int")),), ("k",)),
                                              {}, 0))
        assert catalog.pending_folders() == {"half_made"}
        with catalog.transaction() as db:  # ... a DROP's hands it back, until the folder is gone
            catalog.remove_relation(db, "dropped")
        assert catalog.pending_folders() == {"half_made", "dropped"}
        (wh.root / "tables" / "dropped" / "base").mkdir(parents=True)
        (wh.root / "tables" / "stranger").mkdir()
        moved = sweep(wh, catalog)
        assert wh.tables_entries() == [] and catalog.pending_folders() == set()
        assert [p.relative_to(wh.lost_and_found).parts[1:] for p in moved] == [("tables", "stranger")]
    finally:
        catalog.close()


def test_remove_tree_refuses_anything_outside_the_warehouse(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    wh.open()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    (wh.root / "tables" / "link").symlink_to(outside)
    for path in (wh.root / "tables" / ".." / ".." / "outside", wh.root / "tables" / "link", wh.root,
                 wh.root / "tables" / ".."):
        with pytest.raises(CatalogError, match="BUG: .* is not inside the warehouse"):
            wh.remove_tree(path)
    assert (outside / "keep.txt").read_text() == "keep" and wh.catalog_path.exists()


def test_retention_after_a_forward_clock_jump_ages_epochs_from_when_the_clock_came_back(session):
    """A day-ahead clock numbered an epoch (and so every later one) a day in the future and
    recorded its commit a day ahead. Once the clock is back, the next commit clamps that time to
    now, and retention measures age by commit times: old files go as they would have."""
    s = session
    s.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k))")
    s.sql("INSERT INTO t VALUES (0, 0)")
    first = s.flush()
    for i in (1, 2):
        s.sql(f"INSERT INTO t VALUES ({i}, {i})")
        s.flush()
    ahead = time.time() + 86_400
    prev = s.committed_epoch
    jumped = epoch_from_ms(int(ahead * 1000))
    db = sqlite3.connect(s.warehouse.catalog_path)  # the outside world's clock, as the catalog recorded it
    with db:
        db.execute("INSERT INTO epochs (epoch, prev, state, plan, planned_at, committed_at) "
                   "VALUES (?, ?, 'committed', '{}', ?, ?)", (jumped, prev, ahead, ahead))
    db.close()
    s.sql("INSERT INTO t VALUES (10, 10)")
    after = s.flush()
    assert after > jumped  # numbered after the jump: in the future for good
    committed_at = [r[0] for r in s.catalog._all("SELECT committed_at FROM epochs WHERE state = 'committed'")]
    assert max(committed_at) <= time.time()  # the time recorded ahead was clamped at the next commit
    s.compact()
    log_dir = s.warehouse.relation_dir("t") / "log"
    assert len([f for f in os.listdir(log_dir) if f.endswith(".parquet")]) == 4  # retention (1 h) keeps them
    s.sql("SET retention_seconds = 0")
    s.sql("INSERT INTO t VALUES (11, 11)")
    s.flush()
    s.compact()
    assert [f for f in os.listdir(log_dir) if f.endswith(".parquet")] == []
    with pytest.raises(NotRetainedError):
        s.table("t", as_of=first)
    assert sorted(rows_of(s.table("t"))) == [(0, 0), (1, 1), (2, 2), (10, 10), (11, 11)]


BAD_NAMES = [
    ('"x`y"', "backtick"),
    ('"a\x00b"', "control character"),
    ('"tab\there"', "control character"),
    ('""', "empty or only spaces"),
    ('" "', "empty or only spaces"),
    ('" lead"', "leading or trailing spaces"),
    ('"trail "', "leading or trailing spaces"),
    ('"' + "c" * 64 + '"', "longer than 63 characters"),
    ("_vnode", "reserved"),
]


@pytest.mark.parametrize(("name", "rule"), BAD_NAMES)
def test_column_names_spark_cannot_quote_are_refused(session, name, rule):
    s = session
    with pytest.raises(SqlError, match=f"column name .* {rule}"):
        s.sql(f"CREATE TABLE t (k int, {name} int)")
    with pytest.raises(SqlError, match=f"column name .* {rule}"):
        s.sql(f"CREATE SOURCE src (k int, {name} int) WITH (connector = 'kafka', topic = 'x', "
              "properties.bootstrap.server = '127.0.0.1:9')")
    s.sql("CREATE TABLE IF NOT EXISTS u (k int, PRIMARY KEY (k))")
    with pytest.raises(SqlError, match=f"output column name .* {rule}"):
        s.sql(f"CREATE MATERIALIZED VIEW m AS SELECT k AS {name} FROM u")
    assert [r[0] for r in rows_of(s.sql("SHOW TABLES"))] == ["u"]


def test_quoted_column_names_with_spaces_and_case_work(session):
    s = session
    s.sql('CREATE TABLE t (k int, "Unit Price" int, PRIMARY KEY (k)); INSERT INTO t VALUES (1, 5), (2, 7)')
    s.sql('CREATE MATERIALIZED VIEW m AS SELECT k, "unit price" * 2 AS "Twice the Price" FROM t')
    s.sql("INSERT INTO t VALUES (3, 9)")
    s.flush()
    assert sorted(rows_of(s.table("m"))) == [(1, 10), (2, 14), (3, 18)]
    assert s.table("m").columns == ["k", "twice the price"]
