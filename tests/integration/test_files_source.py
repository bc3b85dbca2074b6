"""posix_fs sources: the files of a folder (CSV, JSON lines, Parquet), each new file read once, in
name order, with a malformed line set aside as a bad record; MVs created before and after the files
land equal DuckDB over exactly the files their epoch covers. Nothing outside the root is read."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sparkwave
from sparkwave.core import policy
from sparkwave.core.errors import SqlError
from tests.kafka_util import check_epoch
from tests.lakehouse_util import FILE_COLS, FILE_DDL, file_rows, files_read_by, write_csv

ROOT = Path(__file__).resolve().parents[2]
MVS = {
    "cheap": "SELECT id, name, price FROM fs WHERE price < 40",
    "by_name": "SELECT name, count(*) AS n, sum(price) AS total, max(id) AS last FROM fs GROUP BY name",
}
BAD = "17,n3,not-a-number"


def source_sql(root: Path, encode: str = "CSV", pattern: str = "*.csv", per_epoch: int = 100) -> str:
    return (f"CREATE SOURCE fs ({FILE_COLS}) WITH (connector = 'posix_fs', posix_fs.root = '{root}', "
            f"match_pattern = '{pattern}', max.rows.per.epoch = '{per_epoch}') FORMAT PLAIN ENCODE {encode}")


def check_all(s, written: dict[str, list[tuple]], names: list[str]) -> None:
    """Each MV at every committed epoch from its creation on equals DuckDB over the files read by then."""
    for name in names:
        for epoch in s.catalog.committed_epochs(s.catalog.relation(name).created_epoch):
            rows = [r for f in files_read_by(s, "fs", epoch) for r in written[f]]
            check_epoch(s, epoch, {"fs": (FILE_DDL, rows)}, {name: MVS[name]})


def test_new_files_over_epochs_equal_the_oracle_before_and_after_they_land(session, tmp_path):
    root = tmp_path / "in"
    (root / "sub").mkdir(parents=True)
    written: dict[str, list[tuple]] = {}

    def land(name: str, n: int, lo: int, bad: bool = False) -> None:
        written[name] = file_rows(n, lo)
        write_csv(root, name, written[name], BAD if bad else None)

    land("a.csv", 60, 0)
    land("b.csv", 60, 60, bad=True)
    (root / "ignored.json").write_text('{"id": 1}\n')
    session.sql(source_sql(root, per_epoch=100))
    session.sql(f"CREATE MATERIALIZED VIEW cheap AS {MVS['cheap']}")
    session.flush()
    assert files_read_by(session, "fs", session.committed_epoch) == ["a.csv"], "whole files, within the budget"
    land("sub/c.csv", 30, 120)
    land(".d.csv", 5, 500)  # hidden: a file being written
    for _ in range(3):
        session.flush()
    session.sql("SET backfill_chunk_rows = 40; SET background_ddl = true")
    session.sql(f"CREATE MATERIALIZED VIEW by_name AS {MVS['by_name']}")  # a source backfill of the files read
    land("e.csv", 10, 150, bad=True)
    session.wait()
    for _ in range(2):
        session.flush()
    assert files_read_by(session, "fs", session.committed_epoch) == ["a.csv", "b.csv", "sub/c.csv", "e.csv"]
    (root / "a.csv").write_text("id,name,price\n999,again,1.0\n")  # a file read once is not read again
    session.flush()
    assert files_read_by(session, "fs", session.committed_epoch)[-1] == "e.csv"
    check_all(session, written, list(MVS))
    errors = session.sql("SHOW SOURCE ERRORS FROM fs").collect()
    assert sorted((e.split.partition(" ")[2], e.error.split(": ", 1)[0]) for e in errors) == [
        ("b.csv", f"file 'b.csv' under '{root}', record 32"), ("e.csv", f"file 'e.csv' under '{root}', record 7")]
    (src,) = [r for r in session.sql("SHOW SOURCES").collect() if r.name == "fs"]
    assert (src.connector, src.splits, src.bad_records, src.status) == ("posix_fs", 4, 2, None)
    assert not any((session.warehouse.relation_dir("fs") / "log").iterdir()), "a source keeps no rows"


def test_json_lines_and_parquet_folders(session, tmp_path, monkeypatch):
    """JSON lines (a line that is not JSON is a bad record) into a TABLE keyed by id (a later file
    upserts), and Parquet files (a value out of its column's range is a bad record), read by Spark's
    tasks (the driver reads only a small epoch's files itself)."""
    monkeypatch.setattr(policy, "LOCAL_ROWS", 1)
    jroot, proot = tmp_path / "j", tmp_path / "p"
    jroot.mkdir()
    proot.mkdir()
    (jroot / "1.jsonl").write_text("\n".join([json.dumps({"id": 1, "name": "a", "price": 1.5}), "{oops",
                                              json.dumps({"id": 2, "name": "b", "price": 2.5})]) + "\n")
    (jroot / "2.jsonl").write_text(json.dumps({"id": 1, "name": "A", "price": 10}) + "\n")
    session.sql(f"CREATE TABLE j (id int PRIMARY KEY, name varchar, price double) WITH (connector = 'posix_fs', "
                f"posix_fs.root = '{jroot}', match_pattern = '*.jsonl') FORMAT PLAIN ENCODE JSON")
    pq.write_table(pa.table({"id": pa.array([1, 2, 2**40], pa.int64()), "name": ["x", "y", "z"],
                             "price": [1.0, 2.0, 3.0]}), proot / "1.parquet")
    session.sql(f"CREATE SOURCE p ({FILE_COLS}) WITH (connector = 'posix_fs', posix_fs.root = '{proot}', "
                "match_pattern = '*.parquet') FORMAT PLAIN ENCODE PARQUET")
    session.sql("CREATE MATERIALIZED VIEW pv AS SELECT id, name FROM p")
    session.flush()
    assert sorted(tuple(r) for r in session.sql("SELECT id, name, price FROM j").collect()) == [
        (1, "A", 10.0), (2, "b", 2.5)]
    assert sorted(tuple(r) for r in session.sql("SELECT * FROM pv").collect()) == [(1, "x"), (2, "y")]
    errors = {r.relation: r.error for r in session.sql("SHOW SOURCE ERRORS").collect()}
    assert "record 2: not valid JSON" in errors["j"]
    assert "record 3: column id" in errors["p"] and "1099511627776" in errors["p"]
    session.sql("ALTER SOURCE p SET SOURCE_RATE_LIMIT = 0")  # paused: a new file waits
    pq.write_table(pa.table({"id": pa.array([7], pa.int64()), "name": ["w"], "price": [7.0]}), proot / "2.parquet")
    session.flush()
    assert sorted(r.id for r in session.sql("SELECT id FROM pv").collect()) == [1, 2]
    assert [r.status for r in session.sql("SHOW SOURCES").collect() if r.name == "p"] == [
        "paused (source_rate_limit = 0)"]
    session.sql("ALTER SOURCE p SET SOURCE_RATE_LIMIT = DEFAULT")
    session.flush()
    assert sorted(r.id for r in session.sql("SELECT id FROM pv").collect()) == [1, 2, 7]


def test_nothing_outside_the_root_is_read(session, tmp_path):
    root, outside = tmp_path / "in", tmp_path / "secret"
    root.mkdir()
    outside.mkdir()
    write_csv(outside, "s.csv", file_rows(3, 900))
    for pattern in ("../secret/*.csv", "/etc/*", "sub/../../secret/*"):
        with pytest.raises(SqlError, match="match_pattern .* (holds a '..' component|is an absolute path)"):
            session.sql(source_sql(tmp_path / "in", pattern=pattern))
    with pytest.raises(SqlError, match="posix_fs.root .* is not a folder"):
        session.sql(source_sql(tmp_path / "nowhere"))
    os.symlink(outside / "s.csv", root / "link.csv")  # a file leading out
    os.symlink(outside, root / "dir")  # a folder leading out: not walked
    write_csv(root, "ok.csv", file_rows(2, 0))
    session.sql(source_sql(root, pattern="*"))
    session.sql("CREATE MATERIALIZED VIEW v AS SELECT id FROM fs")
    session.flush()
    assert sorted(r.id for r in session.sql("SELECT id FROM v").collect()) == [0, 1]
    (src,) = session.sql("SHOW SOURCES").collect()
    assert src.status == f"skipped 1 file(s) that lead outside posix_fs.root '{root}': link.csv"


@pytest.mark.parametrize("crash_at", ["before_catalog_commit:3", "mid_commit:4"])
def test_a_files_source_killed_mid_epoch_loses_and_doubles_nothing(spark, tmp_path, crash_at):
    from tests import files_crash_child as child

    root, wh = tmp_path / "in", tmp_path / "wh"
    root.mkdir()
    written = child.land(root)
    env = {**os.environ, "SPARKWAVE_CRASH_AT": crash_at}
    proc = subprocess.run([sys.executable, "-m", "tests.files_crash_child", str(wh), str(root)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.wait()
        while len(files_read_by(s, "fs", s.committed_epoch)) < len(written):
            s.flush()
        s.flush()
        assert sorted(files_read_by(s, "fs", s.committed_epoch)) == sorted(written), "each file once"
        check_all(s, written, list(MVS))
        assert s.sql("SHOW SOURCE ERRORS FROM fs").count() == child.BAD_FILES
