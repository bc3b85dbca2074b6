"""Chaos: random DDL, DML, bulk loads, a datagen source, settings, compaction and retention in a
child process SIGKILLed at random moments (and at random named crash points), restarted after each
kill. After every restart and at the end, every relation equals the DuckDB oracle at every retained
epoch that changed anything (a seeded sample of `MAX_CHECKED_EPOCHS` after a restart, and at the end
of a long run: checking all of a 30-minute run's epochs takes over an hour), the source holds each
of its rows once, no file outside the warehouse was touched, and after a final compaction +
retention no orphan file remains.

The seed comes from `SPARKWAVE_CHAOS_SEED` (default 1 in CI; `make chaos` draws fresh seeds for
`SPARKWAVE_CHAOS_MINUTES`); a failure names it, so the run can be replayed (the operations and
kill delays follow from the seed; where a kill lands depends on the machine's speed)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import sparkwave
from tests import chaos_child
from tests.delta_log_util import assert_delta_follows_catalog
from tests.oracle import Model, connect, duckdb_sql, multiset, rows_of

ROOT = Path(__file__).resolve().parents[2]
CRASH_POINTS = ["after_plan", "mid_execute", "mid_commit", "before_catalog_commit", "mid_compaction",
                "mid_compaction_after_delta", "backfill_mid_chunk", "backfill_after_chunk_rows",
                "backfill_after_merge_chunk", "backfill_between_phases", "backfill_mid_log_store", "backfill_mid_merge",
                "after_catalog_commit", "mid_delta_sync", "retention_after_catalog", "retention_after_delta"]
KILL_WITHIN_S = 30.0  # a timed kill lands this long at most after the child is ready
MAX_CHECKED_EPOCHS = 30  # per check: a seeded sample beyond this (a short run's final check takes all)


@dataclass
class History:
    """What the acknowledged operations did: the tables after each DML statement (a committed epoch
    holds a prefix of them) and the query of every MV ever created."""

    model: Model = field(default_factory=Model)
    states: list[dict[str, Counter]] = field(default_factory=list)
    queries: dict[str, str] = field(default_factory=dict)
    read: int = 0  # journal lines consumed
    stats: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        for name, (_, ddl, cols, key) in chaos_child.TABLES.items():
            self.model.table(name, ddl, cols, key)
        self.states.append(self.snapshot())

    def snapshot(self) -> dict[str, Counter]:
        return {t: multiset(self.model.rows(t)) for t in chaos_child.TABLES}

    def apply(self, st: list) -> None:
        self.model.apply_epoch([tuple(st)])
        self.states.append(self.snapshot())


def _restore(model: Model, state: dict[str, Counter]) -> None:
    for t, rows in state.items():
        model.db.execute(f"DELETE FROM {t}")
        flat = [r for r, n in rows.items() for _ in range(n)]
        if flat:
            model.db.executemany(f"INSERT INTO {t} VALUES ({', '.join('?' * len(flat[0]))})", flat)


def reconcile(s: sparkwave.Session, h: History, journal: Path) -> None:
    """Fold the journal's new records into the history. An operation that was in flight when the
    kill came (or failed) took effect or not: the recovered tables say which."""
    lines = journal.read_text().splitlines() if journal.exists() else []
    records = [json.loads(line) for line in lines[h.read:]]
    h.read = len(lines)
    i = 0
    while i < len(records):
        rec = records[i]
        i += 1
        if "begin" not in rec:
            continue
        op = rec["begin"]
        outcome = records[i] if i < len(records) and "begin" not in records[i] else None
        if outcome is not None:
            i += 1
        h.stats["operations"] += 1
        if "create" in op:
            h.queries[op["create"]] = op["query"]
        if "model" not in op:
            continue
        h.stats["statements"] += 1
        if outcome is not None and outcome.get("done"):
            h.apply(op["model"])
            continue
        before = h.snapshot()
        h.model.apply_epoch([tuple(op["model"])])
        after = h.snapshot()
        table = op["model"][1]
        actual = multiset(rows_of(s.table(table)))
        if actual == after[table]:
            h.states.append(after)
        else:
            assert actual == before[table], f"table {table} after a kill mid-statement {op['model']} is neither " \
                                            f"before nor after it: extra {actual - after[table]}, missing " \
                                            f"{after[table] - actual}"
            _restore(h.model, before)


def check(s: sparkwave.Session, h: History, rnd: random.Random, *, every: bool) -> int:
    """Every relation at every retained epoch that changed anything (or a sample of them) against
    the oracle; returns the epochs checked."""
    cat = s.catalog
    rels = {r.name: r for r in cat.relations()}
    tables = list(chaos_child.TABLES)
    lo = min(s.rt.retained_from(r) for r in rels.values())
    committed = s.committed_epoch
    changed = sorted({e for name in rels for e, _ in cat.log_files(name, lo - 1, committed)} | {committed})
    epochs = [e for e in changed if e >= lo]
    if not every and len(epochs) > MAX_CHECKED_EPOCHS:
        epochs = sorted({epochs[0], epochs[-1], *rnd.sample(epochs, MAX_CHECKED_EPOCHS - 2)})
    k = 0
    for e in epochs:
        seen = {t: multiset(rows_of(s.table(t, as_of=e))) for t in tables if e >= s.rt.retained_from(rels[t])}
        while k < len(h.states) and any(h.states[k][t] != rows for t, rows in seen.items()):
            k += 1
        assert k < len(h.states), f"the tables at epoch {e} are no state the acknowledged statements produced " \
                                  f"(retained tables: {sorted(seen)})"
        gen_kept = e >= s.rt.retained_from(rels["gen"])  # retained on its own: its floor may be above the others'
        gen = rows_of(s.table("gen", as_of=e)) if gen_kept else []
        ids = [r[0] for r in gen]
        assert sorted(ids) == list(range(len(ids))), f"the datagen source lost or doubled rows at epoch {e}"
        db = connect()
        for t, (_, ddl, cols, _) in chaos_child.TABLES.items():
            db.execute(f"CREATE TABLE {t} ({ddl})")
            flat = [r for r, n in h.states[k][t].items() for _ in range(n)]
            if flat:
                db.executemany(f"INSERT INTO {t} VALUES ({', '.join('?' * len(cols))})", flat)
        db.execute(f"CREATE TABLE gen ({chaos_child.SOURCE_DUCKDB})")
        if gen:
            db.executemany("INSERT INTO gen VALUES (?, ?)", gen)
        for name, query in h.queries.items():
            db.execute(f"CREATE VIEW {name} AS {duckdb_sql(query, db)}")
        for name, rel in rels.items():
            if rel.kind != "mv" or e < rel.created_epoch or e < s.rt.retained_from(rel) or (
                    not gen_kept and "gen" in rel.upstreams):
                continue
            if len(seen) < len(tables):  # an input not retained at e: which state the MV saw is unknown
                h.stats["relation-epochs skipped (inputs not retained)"] += 1
                continue
            got = multiset(rows_of(s.table(name, as_of=e)))
            want = multiset(db.execute(f"SELECT * FROM {name}").fetchall())
            assert got == want, f"{name} ({h.queries[name]}) differs from DuckDB at epoch {e}: " \
                                f"extra {got - want}, missing {want - got}"
            h.stats["relation-epochs checked"] += 1
    h.stats["epochs checked"] += len(epochs)
    return len(epochs)


def restart_and_check(spark, wh: Path, journal: Path, h: History, rnd: random.Random) -> None:
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        h.stats["restarts"] += 1
        assert s.pipeline_error is None, s.pipeline_error
        s.flush()  # DML staged before the kill commits now
        reconcile(s, h, journal)
        check(s, h, rnd, every=False)


def finish(spark, wh: Path, h: History, rnd: random.Random, *, every: bool) -> None:
    """Every job resumed and merged, everything compacted with no retention window: all checked (a
    long run's thousands of epochs: a seeded sample, as at each restart), and only files the
    catalog references are left."""
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        for j in s.jobs():
            if j.creating:
                s.sql(f"ALTER MATERIALIZED VIEW {j.name} SET BACKFILL_RATE_LIMIT = DEFAULT")
        s.sql("WAIT")
        s.flush()
        check(s, h, rnd, every=every)
        s.sql("SET retention_seconds = 0")
        s.compact()
        referenced = {p for r in s.catalog.relations(internal=True)
                      for p in [*(f for _, f in s.catalog.log_files(r.name, -1, s.committed_epoch)),
                                *(f for b in s.catalog.bases(r.name) for f in b.files)]}
        on_disk = {str(p) for p in (wh / "tables").rglob("*.parquet") if "_delta_log" not in p.parts}
        assert on_disk <= referenced, f"orphan files: {sorted(on_disk - referenced)[:10]}"
        assert not list(s.warehouse.staging_dir().iterdir()), "staged DML left behind"
        names = {r.name for r in s.catalog.relations(creating=True, internal=True)}
        assert set(s.warehouse.tables_entries()) <= names
        assert not (wh / "lost+found").exists(), "recovery found files the catalog did not record as sparkwave's"
        check(s, h, rnd, every=every)
        s.loop.committer.delta.drain()
        assert_delta_follows_catalog(s.catalog, s.warehouse)


def run_chaos(spark, tmp_path: Path, seed: int, *, rounds: int | None, minutes: float | None) -> Counter:
    wh, journal = tmp_path / "wh", tmp_path / "journal"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("a file the warehouse must not touch\n")
    fingerprint = sorted((p.name, p.stat().st_mtime_ns) for p in outside.iterdir())
    rnd = random.Random(seed)
    h = History()
    deadline = time.time() + minutes * 60 if minutes else None
    r = 0
    while (rounds is None or r < rounds) and (deadline is None or time.time() < deadline):
        r += 1
        env = dict(os.environ)  # two shuffle partitions, as every test JVM (tests/__init__.py)
        kill_after = None
        if rnd.random() < 0.3:
            env["SPARKWAVE_CRASH_AT"] = f"{rnd.choice(CRASH_POINTS)}:{rnd.randint(1, 3)}"
        else:
            kill_after = rnd.uniform(1, KILL_WITHIN_S)
        steps = rnd.randint(8, 40)
        proc = subprocess.Popen([sys.executable, "-m", "tests.chaos_child", str(wh), str(journal),
                                 str(rnd.randrange(1 << 30)), str(steps)],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        proc.stdout.readline()  # "ready" once recovered and set up (or EOF: killed at a crash point before)
        try:
            _, err = proc.communicate(timeout=kill_after if kill_after is not None else 900)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            _, err = proc.communicate()
        if proc.returncode == -signal.SIGKILL:
            h.stats["kills"] += 1
        else:
            assert proc.returncode == 0, f"round {r} failed (rc {proc.returncode}):\n{err[-4000:]}"
        restart_and_check(spark, wh, journal, h, rnd)
    finish(spark, wh, h, rnd, every=rounds is not None)  # a long run's history: a sample, as at restarts
    assert sorted((p.name, p.stat().st_mtime_ns) for p in outside.iterdir()) == fingerprint
    h.stats["rounds"] = r
    return h.stats


def _run(spark, tmp_path: Path, seed: int, **kw) -> Counter:
    try:
        stats = run_chaos(spark, tmp_path, seed, **kw)
    except BaseException as e:
        raise AssertionError(f"chaos run with SPARKWAVE_CHAOS_SEED={seed} failed: {e}") from e
    print(f"\nchaos seed {seed}: {dict(stats)}")
    return stats


def test_chaos_short(spark, tmp_path):
    seed = int(os.environ.get("SPARKWAVE_CHAOS_SEED", "1"))
    stats = _run(spark, tmp_path, seed, rounds=2, minutes=None)
    assert stats["statements"] > 0 and stats["epochs checked"] > 0


@pytest.mark.chaos
def test_chaos_long(spark, tmp_path):
    seed = int(os.environ.get("SPARKWAVE_CHAOS_SEED", str(random.randrange(1 << 30))))
    minutes = float(os.environ.get("SPARKWAVE_CHAOS_MINUTES", "30"))
    stats = _run(spark, tmp_path, seed, rounds=None, minutes=minutes)
    assert stats["kills"] > 0
