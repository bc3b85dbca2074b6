"""One round of the chaos test, in a child process that the test SIGKILLs at a random moment.

Usage: python -m tests.chaos_child WAREHOUSE JOURNAL SEED STEPS. It opens the warehouse (recovering
it), then runs STEPS random operations drawn from `random.Random(SEED)`: DML (UPDATE and DELETE
after a flush, so every statement sees the ones before it), bulk loads, MVs of every kind created with
every strategy (in the background or not), drops, cancels, rate limits, settings and compaction.
Before each operation it appends what it is about to do to JOURNAL (fsynced), and `done` after,
so the test knows every acknowledged operation and the one in flight when the kill came."""

from __future__ import annotations

import json
import os
import random
import sys

import pyarrow as pa

import sparkwave
from sparkwave.core.spark import create_spark
from tests import TEST_MASTER
from tests.oracle import to_sql

TABLES = {  # name: (sparkwave DDL, DuckDB columns, column names, key)
    "a": ("CREATE TABLE a (k int, v int, s varchar, PRIMARY KEY (k))", "k INTEGER, v INTEGER, s VARCHAR",
          ["k", "v", "s"], ["k"]),
    "b": ("CREATE TABLE b (k int, w int, PRIMARY KEY (k))", "k INTEGER, w INTEGER", ["k", "w"], ["k"]),
    "ev": ("CREATE TABLE ev (id int, g int) APPEND ONLY", "id INTEGER, g INTEGER", ["id", "g"], []),
}
SOURCE = ("CREATE TABLE gen (id bigint, v int) WITH (connector = 'datagen', fields.id.kind = 'sequence', "
          "fields.id.start = '0', fields.v.min = '0', fields.v.max = '20', fields.v.seed = '3', "
          "datagen.rows.per.second = '20')")
SOURCE_DUCKDB = "id BIGINT, v INTEGER"
QUERIES = [  # MV queries over the tables, the source, and (`{agg}`) an aggregate MV
    "SELECT k, v * 2 AS v2, s FROM a WHERE v > 10",
    "SELECT a.k, a.v, b.w FROM a JOIN b ON a.k = b.k",
    "SELECT s, count(*) AS n, sum(v) AS sv FROM a GROUP BY s",
    "SELECT a.k, b.w FROM a LEFT JOIN b ON a.k = b.k",
    "SELECT g, count(*) AS n, max(id) AS mx FROM ev GROUP BY g",
    "SELECT v % 5 AS r, count(*) AS n FROM gen GROUP BY v % 5",
    "SELECT count(*) AS n, sum(w) AS sw FROM b",
    "SELECT b.k, b.w, e.id FROM b JOIN ev e ON b.k = e.g",
    "SELECT s, n FROM {agg} WHERE n > 1",
]
AGG = 2  # QUERIES[AGG] is the aggregate that `{agg}` names
STRATEGIES = ["blocking", "snapshot", "rearranged"]
KEYS = 40


def _dml(rnd: random.Random, next_id: list[int]) -> tuple:
    """A statement as a model tuple (tests/oracle.py: `Model.apply_epoch`)."""
    kind = rnd.choice(["insert_a", "insert_a", "update_a", "delete_a", "insert_b", "update_b", "delete_b",
                       "insert_ev"])
    lo = rnd.randrange(KEYS)
    hi = lo + rnd.randint(0, 8)
    if kind == "insert_a":
        return ("insert", "a", [(rnd.randrange(KEYS), rnd.randint(0, 30), rnd.choice(["p", "q", "r", None]))
                                for _ in range(rnd.randint(1, 6))])
    if kind == "update_a":
        return ("update", "a", {"v": f"v + {rnd.randint(-5, 5)}"}, f"k BETWEEN {lo} AND {hi}")
    if kind == "delete_a":
        return ("delete", "a", f"k BETWEEN {lo} AND {hi}")
    if kind == "insert_b":
        return ("insert", "b", [(rnd.randrange(KEYS), rnd.randint(0, 9)) for _ in range(rnd.randint(1, 5))])
    if kind == "update_b":
        return ("update", "b", {"w": f"w * 2 - {rnd.randint(0, 3)}"}, f"k BETWEEN {lo} AND {hi}")
    if kind == "delete_b":
        return ("delete", "b", f"k BETWEEN {lo} AND {hi}")
    rows = []
    for _ in range(rnd.randint(1, 6)):
        next_id[0] += 1
        rows.append((next_id[0], rnd.randrange(KEYS)))
    return ("insert", "ev", rows)


class Round:
    def __init__(self, s: sparkwave.Session, journal: str, seed: int) -> None:
        self.s = s
        self.rnd = random.Random(seed)
        self.journal = open(journal, "a")  # noqa: SIM115 (closed with the process)
        self.next_id = [seed % 1_000_000 * 1000]  # append-only ids, mostly distinct across rounds

    def log(self, record: dict) -> None:
        self.journal.write(json.dumps(record) + "\n")
        self.journal.flush()
        os.fsync(self.journal.fileno())

    def mvs(self) -> list[str]:
        return sorted(r.name for r in self.s.catalog.relations(creating=True) if r.kind == "mv")

    def creating(self) -> list[int]:
        return [j.id for j in self.s.jobs() if j.creating]

    def step(self) -> None:
        r = self.rnd.random()
        if r < 0.55:
            st = _dml(self.rnd, self.next_id)
            # UPDATE and DELETE read the committed state: everything staged before them is flushed first,
            # so each statement sees the ones before it, as the test's model does.
            self.run({"model": st}, lambda: (st[0] == "insert" or self.s.flush(), self.s.sql(to_sql(st))))
        elif r < 0.62:
            n = self.rnd.randint(10, 60)
            base = self.rnd.randrange(KEYS)
            rows = [((base + i) % (KEYS + 20), self.rnd.randint(0, 30), self.rnd.choice(["p", "q", None]))
                    for i in range(n)]
            data = pa.table({"k": pa.array([x[0] for x in rows], pa.int32()),
                             "v": pa.array([x[1] for x in rows], pa.int32()),
                             "s": pa.array([x[2] for x in rows], pa.string())})
            self.run({"model": ("insert", "a", rows)}, lambda: self.s.insert("a", data))
        elif r < 0.75:
            self.create()
        elif r < 0.80:
            candidates = [m for m in self.mvs() if not any(m in r.upstreams for r in
                                                           self.s.catalog.relations(creating=True))]
            if candidates:
                name = self.rnd.choice(candidates)
                self.run({"drop": name}, lambda: self.s.sql(f"DROP MATERIALIZED VIEW {name}"))
        elif r < 0.84:
            jobs = self.creating()
            if jobs:
                job = self.rnd.choice(jobs)
                name = next(j.name for j in self.s.jobs() if j.id == job)
                self.run({"cancel": name}, lambda: self.s.sql(f"CANCEL JOBS {job}"))
        elif r < 0.88:
            jobs = [j for j in self.s.jobs() if j.creating]
            if jobs:
                j = self.rnd.choice(jobs)
                limit = self.rnd.choice(["DEFAULT", "DEFAULT", "50"])
                self.run({"sql": "alter"}, lambda: self.s.sql(
                    f"ALTER MATERIALIZED VIEW {j.name} SET BACKFILL_RATE_LIMIT = {limit}"))
        elif r < 0.93:
            setting = self.rnd.choice([f"compaction_epochs = {self.rnd.randint(2, 25)}",
                                       f"retention_seconds = {self.rnd.choice([0, 1, 5, 3600])}",
                                       f"backfill_chunk_rows = {self.rnd.choice([5, 50, 10000000])}"])
            self.run({"sql": setting}, lambda: self.s.sql(f"SET {setting}"))
        elif r < 0.97:
            self.run({"compact": True}, self.s.compact)
        else:
            self.run({"wait": True}, self.s.wait)

    def create(self) -> None:
        aggs = [m for m in self.mvs() if m.startswith(f"mv{AGG}_")]
        i = self.rnd.choice([i for i, q in enumerate(QUERIES) if "{agg}" not in q or aggs])
        query = QUERIES[i].replace("{agg}", self.rnd.choice(aggs) if aggs else "")
        name = f"mv{i}_{self.rnd.randrange(10**6)}"
        strategy = self.rnd.choice(STRATEGIES)
        background = self.rnd.random() < 0.5
        limit = self.rnd.choice(["DEFAULT", "DEFAULT", "100"])

        def create() -> None:
            self.s.sql(f"SET background_ddl = {'true' if background else 'false'}; "
                       f"SET backfill_rate_limit = {limit}")
            self.s.sql(f"CREATE MATERIALIZED VIEW {name} WITH (backfill_strategy = '{strategy}') AS {query}")

        self.run({"create": name, "query": query}, create)

    def run(self, record: dict, action) -> None:
        """Journal, act, journal. An error sparkwave raises by design (a cancel that lost the race to
        a merge, a foreground CREATE whose job failed) is journalled: the test reconciles it."""
        self.log({"begin": record})
        try:
            action()
        except sparkwave.SparkwaveError as e:
            self.log({"error": f"{type(e).__name__}: {e}"})
            return
        self.log({"done": True})


def setup(s: sparkwave.Session) -> None:
    for name, (ddl, *_) in TABLES.items():
        if s.catalog.relation(name) is None:
            s.sql(ddl)
    if s.catalog.relation("gen") is None:
        s.sql(SOURCE)


def main(warehouse: str, journal: str, seed: int, steps: int) -> None:
    spark = create_spark(TEST_MASTER)
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=300) as s:
        setup(s)
        s.flush()  # DML staged before a kill is committed before anything reads the tables
        print("ready", flush=True)  # the test's kill timer starts now
        r = Round(s, journal, seed)
        for _ in range(steps):
            r.step()
        r.log({"round_done": True})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
