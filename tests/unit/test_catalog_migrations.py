"""The catalog's schema version (`PRAGMA user_version`) and its migrations, without Spark: a new
catalog is at the latest version; catalogs of earlier releases (tests/fixtures/catalog_v0*.sql, made
by those releases' own code) are migrated at open and read back what those releases read; a catalog
of a newer release is refused untouched; a step that fails or a process that dies mid-migration
leaves the catalog at its old version."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from sparkwave.core.catalog import Catalog, catalog_problem, migrations
from sparkwave.core.errors import CatalogError, WarehouseError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ROOT = Path(__file__).resolve().parents[2]
LATEST = migrations.latest()


def load(fixture: str, wh: Path) -> Path:
    """A warehouse folder `wh` whose catalog is the fixture's, as its release left it."""
    wh.mkdir(parents=True, exist_ok=True)
    path = wh / "catalog.db"
    with closing(sqlite3.connect(path)) as db:
        db.executescript((FIXTURES / fixture).read_text().replace("@WAREHOUSE@", str(wh.resolve())))
    return path


def stored(path: Path, sql: str) -> list[tuple]:
    with closing(sqlite3.connect(path)) as db:
        return db.execute(sql).fetchall()


def version(path: Path) -> int:
    return stored(path, "PRAGMA user_version")[0][0]


def shape(path: Path) -> dict[str, list[tuple]]:
    """Every table's and index's columns, by name."""
    with closing(sqlite3.connect(path)) as db:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
                                          "ORDER BY name")]
        return {n: db.execute(f"SELECT * FROM pragma_table_info('{n}')").fetchall() + db.execute(
                    f"SELECT * FROM pragma_index_info('{n}')").fetchall() for n in names}


def dump(path: Path) -> list[str]:
    """The catalog's schema and rows as SQL."""
    with closing(sqlite3.connect(path)) as db:
        return list(db.iterdump())


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def read_back(catalog: Any) -> Any:
    """What the catalog's readers return, as JSON with the warehouse's folder written @WAREHOUSE@
    and wall times left out. (Written against the API both releases share: the fixtures'
    expectations below are what this function read with the releases that made them.)"""
    rels = catalog.relations(creating=True, internal=True)
    jobs = catalog.jobs()
    out = {
        "relations": [[r.name, r.kind, r.schema.to_json(), r.definition, r.created_epoch, r.state] for r in rels],
        "main graph": [r.name for r in catalog.relations()],
        "jobs": [[j.id, j.relation, j.strategy, str(j.phase), j.upstream, j.snapshot_epoch, j.consumed_epoch,
                  j.allowed_lag, j.next_vnode, j.vnode_rows, j.rows_total, j.rows_done, j.rate_limit,
                  j.finished_at is not None, j.merged_epoch, j.held_back, j.error] for j in jobs],
        "chunks": {j.id: [[c.lo, c.hi, c.rows, c.state, c.attempts, c.files] for c in catalog.job_chunks(j.id)]
                   for j in jobs},
        "steps": {j.id: [[s[0], s[1], *s[3:]] for s in catalog.job_steps(j.id)] for j in jobs},
        "committed": catalog.committed_epoch(), "committed epochs": catalog.committed_epochs(),
        "epochs": catalog.epochs_between(0), "planned": list(catalog.uncommitted_plan() or []),
        "files": {r.name: [[list(f) for f in catalog.log_files(r.name, -1, 10**9)],
                           [list(f) for f in catalog.log_file_rows(r.name, -1, 10**9)],
                           list(catalog.log_rows_since(r.name, 0)),
                           [[b.epoch, b.version, b.rows, b.files] for b in catalog.bases(r.name)],
                           catalog.retained_from(r.name, -1), catalog.min_pin(r.name),
                           catalog.source_offsets(r.name), [list(e) for e in catalog.source_ranges(r.name)]]
                  for r in rels},
        "dml": [[list(b) for b in catalog.pending_dml()], [list(b) for b in catalog.dml_batches([1, 2, 3])],
                sorted(catalog.staged_paths()), [list(b) for b in catalog.consumed_dml()]],
        "sources": [catalog.source_snapshot("ev", 2), [list(e) for e in catalog.source_errors()],
                    catalog.source_error_counts()],
        "sinks": [[s.name, s.mv, s.sink_id, s.spec, s.decouple, s.job] for s in catalog.sinks()],
        "requests": [[r.id, r.job, r.kind, r.value] for r in catalog.pending_requests()] + [catalog.request_outcome(1)],
        "settings": [catalog.setting("barrier_interval_ms"), catalog.setting("counter.dml_batch")],
        "pending folders": sorted(catalog.pending_folders()),
    }
    return json.loads(json.dumps(out).replace(catalog.root, "@WAREHOUSE@"))


def _schema(columns: list[tuple[str, str, bool]], key: str, append_only: bool = False) -> dict:
    return {"columns": [{"name": n, "type": t, "hidden": h} for n, t, h in columns], "key": [key],
            "append_only": append_only}


T_SCHEMA = _schema([("k", "int", False), ("v", "varchar", False)], "k")
M_SCHEMA = _schema([("v", "varchar", False), ("n", "bigint", False)], "v")
EV_SCHEMA = _schema([("x", "bigint", False), ("_row_id", "bigint", True)], "_row_id", append_only=True)
M_QUERY = "SELECT v, count(*) AS n FROM t GROUP BY v"
T_DEF = {"sql": "CREATE TABLE t (k int, v varchar, PRIMARY KEY (k))", "upstreams": []}
W = "@WAREHOUSE@"

# What the release of 2026-11-28 (c157ed6) read from tests/fixtures/catalog_v0.sql with read_back.
V0_READS = {
    "relations": [
        ["t", "table", T_SCHEMA, {**T_DEF, "on_conflict": "ignore"}, 0, "created"],
        ["ev", "source", EV_SCHEMA, {"sql": "CREATE SOURCE ev (x bigint) WITH (connector = 'kafka')", "upstreams": [],
                                     "connector": {"connector": "kafka", "topic": "ev"},
                                     "startup_offsets": {"0": 0, "1": 5}}, 0, "created"],
        ["m", "mv", M_SCHEMA, {"sql": f"CREATE MATERIALIZED VIEW m AS {M_QUERY}", "query": M_QUERY, "upstreams": ["t"],
                               "dataflow": {"op": "agg"}, "outputs": [["v", 0], ["n", 1]], "states": ["s0"],
                               "backfill_strategy": "snapshot"}, 2, "created"],
        ["m.s0", "state", M_SCHEMA, {"owner": "m", "upstreams": []}, 2, "created"]],
    "main graph": ["t", "ev", "m"],
    "jobs": [[1, "t", "-", "created", None, 0, 0, None, 0, None, 0, 0, None, True, None, 0, None],
             [2, "ev", "-", "created", None, 0, 0, None, 0, None, 0, 0, None, True, None, 0, None],
             [3, "m", "snapshot", "created", "t", 2, 3, None, 128, {"t": [1, 2]}, 3, 3, None, True, 3, 0, None],
             [4, "snk", "sink", "snapshot", "m", 3, 3, None, 64, None, 0, 2, 100, False, None, 0, None]],
    "chunks": {"1": [], "2": [], "3": [[0, 128, 3, "done", 1, {"m": [f"{W}/tables/m/log/chunk-0.parquet"],
                                                               "m.s0": [f"{W}/tables/m.s0/log/chunk-0.parquet"]}],
                                       [128, 256, 0, "reading", 1, {}]], "4": []},
    "steps": {"1": [], "2": [], "3": [[1, "snapshot", 3, 0, 1, 100, None], [2, "log_store", 0, 0, 0, 0, 4.0],
                                      [3, "log_store", 1, 1, 0, 0, 2.0], [4, "created", 0, 0, 0, 0, 0.0]],
              "4": [[1, "snapshot", 2, 1, 0, 0, None]]},
    "committed": 3, "committed epochs": [1, 2, 3], "epochs": [1, 2, 3, 4],
    "planned": [4, 3, {"sources": {}, "dml": [3]}],
    "files": {
        "t": [[[2, f"{W}/tables/t/log/part-2.parquet"], [3, f"{W}/tables/t/log/part-3.parquet"]], [[2, 3], [3, 1]],
              [2, 4], [[3, 2, 4, [f"{W}/tables/t/base/b-3.parquet"]]], 2, None, {}, []],
        "ev": [[], [], [0, 0], [], -1, None, {"0": 10, "1": 7}, [[1, {"0": [0, 10], "1": [5, 7]}]]],
        "m": [[[3, f"{W}/tables/m/log/part-3.parquet"]], [[3, 1]], [1, 1],
              [[2, 1, 2, [f"{W}/tables/m/base/b-2.parquet"]]], -1, 3, {}, []],
        "m.s0": [[], [], [0, 0], [], -1, None, {}, []]},
    "dml": [[[2, "t", f"{W}/staging/dml-1", 2]],
            [[1, "t", f"{W}/staging/dml-0", 3], [2, "t", f"{W}/staging/dml-1", 2], [3, "t", f"{W}/staging/dml-2", 1]],
            [f"{W}/staging/dml-0", f"{W}/staging/dml-1", f"{W}/staging/dml-2"], [[1, f"{W}/staging/dml-0"]]],
    "sources": [{"0": [0, 10], "1": [5, 7]}, [["ev", "1", 6, 1, "bad json", "{x"]], {"ev": 1}],
    "sinks": [["snk", "m", "sid-1", {"columns": ["v", "n"], "key": ["v"], "mode": "upsert",
                                     "options": {"connector": "delta"}}, True, 4]],
    "requests": [[2, 4, "cancel", None], "applied"],
    "settings": ["250", "2"],
    "pending folders": ["half"],
}

# What the release of 2026-11-28 (c157ed6) read from tests/fixtures/catalog_v0_oldest.sql with read_back.
OLDEST_READS = {
    "relations": [
        ["t", "table", T_SCHEMA, T_DEF, 0, "created"],
        ["m", "mv", M_SCHEMA, {"sql": f"CREATE MATERIALIZED VIEW m AS {M_QUERY}", "upstreams": ["t"],
                               "dataflow": {"op": "agg"}, "outputs": [["v", 0], ["n", 1]], "states": []}, 1,
         "creating"]],
    "main graph": ["t"],
    "jobs": [[1, "t", "-", "created", None, 0, 0, None, 0, None, 0, 0, None, True, None, 0, None],
             [2, "m", "snapshot", "log_store", "t", 1, 1, 4.0, 256, {"*": [1, 2]}, 3, 3, None, False, None, 0,
              None]],
    "chunks": {"1": [], "2": [[0, 256, 3, "done", 1, {"m": [f"{W}/tables/m/log/chunk-0.parquet"]}]]},
    "steps": {"1": [], "2": [[1, "snapshot", 3, 0, 1, 100, None], [2, "log_store", 0, 0, 0, 0, 4.0]]},
    "committed": 1, "committed epochs": [1], "epochs": [1, 2], "planned": [2, 1, {"dml": [2]}],
    "files": {
        "t": [[[1, f"{W}/tables/t/log/part-1.parquet"]], [[1, 3]], [1, 3], [], -1, 1, {}, []],
        "m": [[], [], [0, 0], [[1, 1, 2, [f"{W}/tables/m/base/b-1.parquet"]]], -1, None, {}, []]},
    "dml": [[], [[1, "t", f"{W}/staging/dml-0", 3], [2, "t", f"{W}/staging/dml-1", 2]],
            [f"{W}/staging/dml-0", f"{W}/staging/dml-1"], [[1, f"{W}/staging/dml-0"]]],
    "sources": [None, [], {}],
    "sinks": [],
    "requests": [None],
    "settings": ["250", None],
    "pending folders": [],
}


def test_a_new_catalog_is_at_the_latest_version_with_the_shape_of_a_migrated_one(tmp_path):
    (tmp_path / "new").mkdir()
    fresh = Catalog(tmp_path / "new" / "catalog.db")
    assert fresh.version == LATEST == len(migrations.MIGRATIONS)
    fresh.close()
    assert version(tmp_path / "new" / "catalog.db") == LATEST
    for fixture in ("catalog_v0.sql", "catalog_v0_oldest.sql"):
        old = load(fixture, tmp_path / fixture)
        Catalog(old).close()
        assert version(old) == LATEST
        assert shape(old) == shape(tmp_path / "new" / "catalog.db"), fixture


def test_a_catalog_of_the_last_release_is_migrated_and_reads_back_the_same(tmp_path):
    path = load("catalog_v0.sql", tmp_path / "wh")
    before = stored(path, "SELECT * FROM jobs ORDER BY id")
    assert version(path) == 0
    catalog = Catalog(path)
    try:
        assert catalog.version == LATEST
        assert read_back(catalog) == V0_READS
        assert stored(path, "SELECT * FROM jobs ORDER BY id") == before  # nothing to change in its rows
        catalog.commit_epoch(4, [("t", str(tmp_path / "wh" / "tables" / "t" / "log" / "part-4.parquet"), 1, 3)],
                             {}, 1, 1.0)  # and it goes on where it was
        assert catalog.committed_epoch() == 4 and catalog.consumed_dml()[-1].path.endswith("staging/dml-2")
    finally:
        catalog.close()


def test_a_catalog_of_the_oldest_shape_is_migrated_and_reads_back_the_same(tmp_path):
    wh = tmp_path / "wh"
    path = load("catalog_v0_oldest.sql", wh)
    assert "sinks" not in shape(path)
    catalog = Catalog(path)
    try:
        assert catalog.version == LATEST
        assert read_back(catalog) == OLDEST_READS
    finally:
        catalog.close()
    # stored as today's release stores them: paths relative to the warehouse, counts by upstream
    assert stored(path, "SELECT path FROM log_files UNION ALL SELECT path FROM base_files UNION ALL "
                        "SELECT path FROM dml") == [("tables/t/log/part-1.parquet",), ("tables/m/base/b-1.parquet",),
                                                    ("staging/dml-0",), ("staging/dml-1",)]
    assert stored(path, "SELECT files FROM job_chunks") == [('{"m": ["tables/m/log/chunk-0.parquet"]}',)]
    assert stored(path, "SELECT vnode_rows FROM jobs WHERE id = 2") == [('{"*": [1, 2]}',)]


def test_a_path_recorded_outside_a_moved_warehouse_reads_as_recorded(tmp_path):
    """An old catalog's absolute paths outside its folder (a warehouse moved before it was
    migrated) stay as recorded: the release before read them there too."""
    path = load("catalog_v0_oldest.sql", tmp_path / "wh")
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE log_files SET path = '/elsewhere/wh/tables/t/log/part-1.parquet'")
    catalog = Catalog(path)
    try:
        assert catalog.log_files("t", 0, 1) == [(1, "/elsewhere/wh/tables/t/log/part-1.parquet")]
    finally:
        catalog.close()


def test_a_catalog_of_a_newer_release_is_refused_and_untouched(tmp_path):
    wh = tmp_path / "wh"
    path = load("catalog_v0.sql", wh)
    Catalog(path).close()
    with closing(sqlite3.connect(path)) as db:
        db.execute(f"PRAGMA user_version = {LATEST + 1}")
    before = files_of(wh)
    for kwargs in ({}, {"create": False}, {"read_only": True}):
        with pytest.raises(WarehouseError, match=f"{path} of warehouse {wh} has version {LATEST + 1}, newer than "
                                                 f"this sparkwave knows \\(version {LATEST}\\)"):
            Catalog(path, **kwargs)
        after = files_of(wh)  # reading leaves SQLite's empty -wal and its -shm index, nothing else
        assert after["catalog.db"] == before["catalog.db"] and after.get("catalog.db-wal", b"") == b"", kwargs
        assert set(after) <= {"catalog.db", "catalog.db-wal", "catalog.db-shm"}
    assert catalog_problem(path) is None  # a catalog all the same: never taken for damage


def test_read_only_reads_a_current_catalog_and_refuses_an_older_one(tmp_path):
    path = load("catalog_v0.sql", tmp_path / "wh")
    with pytest.raises(CatalogError, match=f"{path} has version 0, older than this sparkwave's \\({LATEST}\\); "
                                           "open the warehouse once for writing"):
        Catalog(path, read_only=True)
    assert version(path) == 0
    Catalog(path).close()
    reader = Catalog(path, read_only=True)
    try:
        assert reader.version == LATEST and read_back(reader) == V0_READS
    finally:
        reader.close()


def _boom(db: sqlite3.Connection, root: str) -> None:
    raise RuntimeError("injected between steps")


def test_a_failing_step_leaves_the_catalog_at_its_old_version(tmp_path, monkeypatch):
    path = load("catalog_v0_oldest.sql", tmp_path / "wh")
    before = dump(path)
    steps = (*migrations.MIGRATIONS[:2], migrations.Migration(3, "fails", _boom), *migrations.MIGRATIONS[2:])
    monkeypatch.setattr(migrations, "MIGRATIONS", steps)
    with pytest.raises(RuntimeError, match="injected between steps"):
        Catalog(path)
    assert version(path) == 0 and dump(path) == before  # steps 1 and 2 rolled back with the failure
    monkeypatch.undo()
    catalog = Catalog(path)  # the next open migrates it
    try:
        assert catalog.version == LATEST and read_back(catalog) == OLDEST_READS
    finally:
        catalog.close()


CRASH = """
import os, sys
from pathlib import Path
from sparkwave.core.catalog import Catalog, migrations
def die(db, root):
    os._exit(3)  # the process dies mid-migration: no rollback, no close
migrations.MIGRATIONS = (*migrations.MIGRATIONS[:2], migrations.Migration(3, "dies", die))
Catalog(Path(sys.argv[1]))
"""


def test_a_process_that_dies_mid_migration_leaves_the_catalog_at_its_old_version(tmp_path):
    path = load("catalog_v0_oldest.sql", tmp_path / "wh")
    before = dump(path)
    r = subprocess.run([sys.executable, "-c", CRASH, str(path)], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert r.returncode == 3, r.stderr
    assert version(path) == 0 and dump(path) == before
    catalog = Catalog(path)
    try:
        assert catalog.version == LATEST and read_back(catalog) == OLDEST_READS
    finally:
        catalog.close()


def test_create_false_and_catalog_problem_are_unchanged(tmp_path):
    """Issue 43: a missing catalog is never made again where one is expected; a file that is not
    one is refused, never overwritten."""
    missing = tmp_path / "catalog.db"
    with pytest.raises(WarehouseError, match=f"the catalog {missing} of warehouse {tmp_path} is missing"):
        Catalog(missing, create=False)
    assert not missing.exists() and catalog_problem(missing) == "is missing"
    with closing(sqlite3.connect(missing)) as db:
        db.execute("CREATE TABLE photos (name TEXT)")
    before = missing.read_bytes()
    with pytest.raises(WarehouseError, match="is not a sparkwave catalog \\(it has no table relations, epochs, "
                                             "log_files, jobs\\)"):
        Catalog(missing)
    assert missing.read_bytes() == before and version(missing) == 0


def test_a_relation_definition_reads_typed_and_is_stored_as_it_was(tmp_path):
    path = load("catalog_v0.sql", tmp_path / "wh")
    catalog = Catalog(path)
    try:
        t, ev, m, state = (catalog.relation(n) for n in ("t", "ev", "m", "m.s0"))
        assert t is not None and ev is not None and m is not None and state is not None
        assert (t.spec.on_conflict, t.spec.sql, t.spec.upstreams) == ("ignore", T_DEF["sql"], ())
        assert ev.spec.connector == {"connector": "kafka", "topic": "ev"}
        assert ev.spec.startup_offsets == {"0": 0, "1": 5}
        assert (m.spec.upstreams, m.spec.states, m.spec.query, m.spec.backfill_strategy, m.spec.on_conflict) == (
            ("t",), ("s0",), M_QUERY, "snapshot", "overwrite")
        assert (state.spec.owner, m.spec.owner, m.spec.sink, m.spec.connector) == ("m", None, None, None)
        catalog.set_definition("m", {**m.definition, "sink": "snk"})
        assert (again := catalog.relation("m")) is not None and again.spec.sink == "snk"
    finally:
        catalog.close()
    assert json.loads(stored(path, "SELECT definition FROM relations WHERE name = 'm'")[0][0]) == {
        **V0_READS["relations"][2][3], "sink": "snk"}
