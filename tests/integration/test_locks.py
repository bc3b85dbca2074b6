"""The one lock order (meta/locks.py): DROP, compaction, retention, epochs and a creating job's
merge run concurrently, in a loop, and all finish with the data intact. With the order inverted
(DROP taking the epoch lock before the ddl lock, compaction the other way round) a DROP that meets
a compaction deadlocks both."""

from __future__ import annotations

import threading

import pyarrow as pa

from tests.oracle import multiset, rows_of

ROUNDS = 6
DEADLOCK_S = 600  # a deadlock detector, not a timing assertion: a healthy round takes seconds


def test_drop_compaction_retention_and_merges_run_concurrently(session):
    s = session
    s.sql("CREATE TABLE t (k int, v int, PRIMARY KEY (k)); SET retention_seconds = 0; SET background_ddl = true")
    s.insert("t", pa.table({"k": list(range(300)), "v": [k % 11 for k in range(300)]}))
    s.flush()
    stop = threading.Event()
    failures: list[BaseException] = []
    counts = {"compactions": 0, "epochs": 0}

    def forever(name: str, work) -> threading.Thread:  # type: ignore[no-untyped-def]
        def run() -> None:
            try:
                while not stop.is_set():
                    work()
                    counts[name] += 1
            except BaseException as e:  # surfaced by the assertion below
                failures.append(e)

        return threading.Thread(target=run, name=f"test-{name}", daemon=True)

    def epoch() -> None:
        n = counts["epochs"]
        s.insert("t", pa.table({"k": [1000 + n], "v": [n % 11]}))
        s.flush()

    background = [forever("compactions", s.compact), forever("epochs", epoch)]
    for t in background:
        t.start()

    def rounds() -> None:
        try:
            for i in range(ROUNDS):
                s.sql(f"CREATE MATERIALIZED VIEW m{i} AS SELECT k, v * 2 AS v2 FROM t WHERE v > 3")
                s.sql("WAIT")  # the job merged, between two of the epochs the other thread runs
                s.sql(f"DROP MATERIALIZED VIEW m{i}")
            s.sql("CREATE MATERIALIZED VIEW last AS SELECT k, v * 2 AS v2 FROM t WHERE v > 3")
            s.sql("WAIT")
        except BaseException as e:
            failures.append(e)

    main = threading.Thread(target=rounds, name="test-ddl", daemon=True)
    main.start()
    main.join(DEADLOCK_S)
    stop.set()
    for t in background:
        t.join(DEADLOCK_S)
    alive = [t.name for t in (main, *background) if t.is_alive()]
    assert not alive, f"deadlock: {alive} did not finish"
    assert not failures, failures
    assert counts["compactions"] >= 1 and counts["epochs"] >= 1, counts
    s.flush()
    t_rows = rows_of(s.table("t"))
    assert len(t_rows) == 300 + counts["epochs"]
    assert multiset(rows_of(s.table("last"))) == multiset([(k, v * 2) for k, v in t_rows if v > 3])
    assert {r.name for r in s.catalog.relations()} == {"t", "last"}
