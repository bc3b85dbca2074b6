"""Parity of each stateful operator's three evaluations (DBSP's incremental == from scratch).

Every join, aggregate and window operator is evaluated three ways (`stream/operator.py`), and
`core/policy.py` picks one by size: in Arrow on the driver per epoch (`Operator.delta` against its
state tables), as Spark frames on the executors per big epoch (`Operator.delta_frame`, `FrameIO`),
and from snapshots in one Spark build (`Dataflow.build`, `SnapshotIO`). The three must give the
same rows and the same state, which the next epoch reads on from whichever path wrote it.

Random batches of changes (upserts, updates and deletes; groups emptied, rows moved between join
keys, NULL keys) go through two warehouses: one whose epochs all run on the driver (`big_epoch_rows`
at its default), one whose epochs all run on the executors (`big_epoch_rows = 0`; but a tree with
a window function, which has no frame evaluation: `OverWindow.on_spark`). Then each builds
every MV again from the snapshots (blocking backfill; on the driver's side what is above a tree's
top aggregate runs on the driver, `Dataflow`'s `Top`; on the other side Spark evaluates it all).
Every MV and every state table of the four must hold the same rows.

Spark is slow, so one example carries `SUBCASES` independent cases side by side: each table has a
column `ex`, every join, group and window partition is by `ex` too, and every statement touches
one case's rows (the scalar aggregate sees them all together, which is one more random input).
Derandomized, so a failure repeats."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkwave
from sparkwave.core.schema import Schema
from sparkwave.stream.dataflow import top_of
from sparkwave.stream.plan import from_json
from tests.integration.test_oracle import FAST_PHASES
from tests.oracle import multiset, rows_of, values_sql

SUBCASES = 6
EPOCHS = 2  # the first seeds every table; the second changes rows the state already holds

TABLES = [
    "CREATE TABLE l (ex int, id int, k int, v int, x decimal(10, 2), PRIMARY KEY (ex, id))",
    "CREATE TABLE r (ex int, id int, k int, w int, PRIMARY KEY (ex, id))",
    "CREATE TABLE e (ex int, k int, v int) APPEND ONLY",
]

MVS = {
    # each join type, and each kind of join side (`stream/join_side.py`): own state on both sides
    "j_inner": "SELECT l.ex, l.id, l.v, r.id AS rid, r.w FROM l JOIN r ON l.ex = r.ex AND l.k = r.k",
    "j_full": "SELECT l.ex AS lex, l.id, l.k AS lk, r.ex AS rex, r.id AS rid FROM l FULL JOIN r "
              "ON l.ex = r.ex AND l.k = r.k",
    # the right side read from the aggregate's partials
    "j_left_agg": "SELECT l.ex, l.id, l.k, q.n, q.sw FROM l LEFT JOIN (SELECT ex, k, count(*) AS n, sum(w) AS sw "
                  "FROM r GROUP BY ex, k) q ON l.ex = q.ex AND l.k = q.k",
    # the left side kept as the append-only table's rows (linked by a build)
    "j_right_table": "SELECT e.ex, e.k, e.v, r.id AS rid, r.w FROM e RIGHT JOIN r ON e.ex = r.ex AND e.k = r.k",
    # ASOF joins (`stream/asof_join.py`): integer times with ties, a tie to the least right key
    "asof_inner": "SELECT l.ex, l.id, l.v, r.id AS rid, r.w FROM l ASOF JOIN r ON l.ex = r.ex AND l.k = r.k "
                  "AND l.v >= r.w",
    "asof_left_agg": "SELECT l.ex, l.id, q.n, q.mw FROM l ASOF LEFT JOIN (SELECT ex, k, count(*) AS n, max(w) AS mw "
                     "FROM r GROUP BY ex, k) q ON l.ex = q.ex AND l.k = q.k AND l.v < q.mw",
    # every aggregate function, exact under retractions (value counts for min, max, count distinct)
    "a_group": "SELECT ex, k, count(*) AS n, count(v) AS cv, sum(v) AS s, avg(v) AS a, min(v) AS mn, max(v) AS mx, "
               "count(DISTINCT v) AS cd, sum(x) AS sx, avg(x) AS ax, max(x) AS mxx FROM l GROUP BY ex, k",
    "a_scalar": "SELECT count(*) AS n, sum(v) AS s, min(x) AS mn, max(v) AS mx, count(DISTINCT k) AS ks FROM l",
    # append-only min and max (no value counts) below an aggregate above the build's top aggregate
    "a_top": "SELECT ex, n, count(*) AS groups, sum(mx) AS total, min(mn) AS least FROM (SELECT ex, k, count(*) AS n, "
             "max(v) AS mx, min(v) AS mn FROM e GROUP BY ex, k) q GROUP BY ex, n",
    # ordered aggregates: window functions over the group below a max (`frontend/plan/ordered_aggs.py`)
    "o_group": "SELECT ex, k, first_value(v ORDER BY id) AS fv, last_value(x ORDER BY v, id) AS lv, "
               "percentile_cont(0.5) WITHIN GROUP (ORDER BY v) AS pc, percentile_disc(0.5) WITHIN GROUP "
               "(ORDER BY x DESC) AS pd, mode() WITHIN GROUP (ORDER BY v) AS md FROM l GROUP BY ex, k",
    # window functions, and a top-n of them
    "w_top": "SELECT ex, k, id, v, total FROM (SELECT ex, k, id, v, sum(v) OVER (PARTITION BY ex, k) AS total, "
             "row_number() OVER (PARTITION BY ex, k ORDER BY v DESC, id) AS rn FROM l) q WHERE rn <= 2",
}

ids = st.integers(0, 6)
keys = st.one_of(st.integers(0, 2), st.none())  # (the simplest example matches on its keys)
ints = st.one_of(st.integers(-2, 9), st.none())
decs = st.one_of(st.sampled_from(["1.25", "-0.50", "3.00"]), st.none())


def _key(g: int | None) -> str:
    return "NULL" if g is None else str(g)


def inserts(ex: int, table: str, *, min_size: int = 1) -> st.SearchStrategy[str]:
    """Rows of case `ex` into `table` (an upsert where l's or r's id is there)."""
    row = {"l": st.tuples(ids, keys, ints, decs), "r": st.tuples(st.integers(0, 3), keys, ints),
           "e": st.tuples(keys, ints)}[table]
    return st.lists(row, min_size=min_size, max_size=4).map(
        lambda rows: f"INSERT INTO {table} VALUES {values_sql([(ex, *r) for r in rows])}")


def statement(ex: int) -> st.SearchStrategy[str]:
    """One statement on case `ex`'s rows."""
    return st.one_of(
        inserts(ex, "l"), inserts(ex, "r"), inserts(ex, "e"),
        st.builds(lambda a: f"UPDATE l SET v = v + 1 WHERE ex = {ex} AND id >= {a}", ids),
        st.builds(lambda g, a: f"UPDATE l SET k = {_key(g)} WHERE ex = {ex} AND id <= {a}", keys, ids),
        st.builds(lambda a, b: f"DELETE FROM l WHERE ex = {ex} AND id BETWEEN {a} AND {b}", ids, ids),
        st.builds(lambda x: f"DELETE FROM l WHERE ex = {ex} AND v >= {x}", st.integers(3, 9)),  # the max goes
        st.builds(lambda g: f"DELETE FROM l WHERE ex = {ex} AND k = {g}", st.integers(0, 2)),  # a group empties
        st.builds(lambda a: f"DELETE FROM r WHERE ex = {ex} AND id = {a}", st.integers(0, 3)),
        st.builds(lambda g, a: f"UPDATE r SET k = {_key(g)}, w = w + 1 WHERE ex = {ex} AND id <= {a}",
                  keys, st.integers(0, 3)),
    )


def case(ex: int) -> st.SearchStrategy[list[list[str]]]:
    """Case `ex`'s statements, a batch per epoch, the first starting with rows in every table."""
    seed = st.tuples(inserts(ex, "l", min_size=2), inserts(ex, "r"), inserts(ex, "e")).map(list)
    return st.tuples(seed, st.lists(st.lists(statement(ex), min_size=1, max_size=4), min_size=EPOCHS,
                                    max_size=EPOCHS)).map(lambda c: [c[0] + c[1][0], *c[1][1:]])


_PARTIALS = re.compile(r"a\d+")  # an aggregate's partials state (`stream/aggregate.py`)
_COUNTED = re.compile(r"n(\d+)")  # a sum's or avg's count of non-NULL inputs, beside its partial `p<i>`

# the epochs' batches: epoch i runs every case's batch i
cases = st.tuples(*[case(ex) for ex in range(SUBCASES)]).map(
    lambda cs: [[sql for c in cs for sql in c[i]] for i in range(EPOCHS)])


def canonical(state: str, schema: Schema, rows: list[tuple]) -> list[tuple]:
    """A state's rows with what no path reads taken out. A join state's rows with a NULL key: a
    state linked from a table's files holds them (they never match), one written row by row does
    not. In an aggregate's partials, a sum's partial `p<i>` where its count of non-NULL inputs `n<i>`
    is 0: NULL from a build, or 0 where values were added and retracted per epoch; finalizing gives
    NULL either way, and adding to either gives the same sum."""
    names = list(schema.names)
    if state.startswith("j"):
        at = [names.index(k) for k in schema.key]
        return [r for r in rows if all(r[i] is not None for i in at)]
    if not _PARTIALS.fullmatch(state):
        return rows
    pairs = [(names.index(f"p{m.group(1)}"), names.index(n)) for n in names if (m := _COUNTED.fullmatch(n))]
    return [tuple(None if any(i == p and r[c] == 0 for p, c in pairs) else v for i, v in enumerate(r)) for r in rows]


def tables(s: sparkwave.Session, mvs: set[str], suffix: str = "") -> dict[str, Counter]:
    """Each MV's rows and each of its state tables' (as `mv` and `mv.<state>`, `suffix` taken off
    the MV's name) as of the last committed epoch, read on the driver: every stored column but
    `_vnode`, states in their `canonical` form."""
    epoch = s.committed_epoch
    out: dict[str, Counter] = {}
    for rel in s.catalog.relations(internal=True):
        mv, _, state = rel.name.partition(".")
        if not mv.endswith(suffix) or mv.removesuffix(suffix) not in mvs:
            continue
        names = list(rel.schema.names)
        rows = s.rt.local_snapshot(rel, epoch)
        if rows is None:  # too big for the driver: not at these sizes, but read it all the same
            rows = pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in
                                         rows_of(s.rt.snapshot(rel, epoch).select(*[f"`{n}`" for n in names]))])
        listed = canonical(state, rel.schema, [tuple(r[n] for n in names) for r in rows.select(names).to_pylist()])
        out[f"{mv.removesuffix(suffix)}{'.' if state else ''}{state}"] = multiset(listed)
    return out


def evaluate(spark, wh: Path, epochs: list[list[str]], *, big: bool) -> tuple[dict[str, Counter], dict[str, Counter]]:
    """The MVs' and their states' rows after `epochs` (each a batch of statements, then a flush),
    every step on the executors if `big`, on the driver if not; then the same MVs built again from
    the snapshots (`<mv>_built`): on the driver's side only those with a top (`top_of`), the others'
    builds being the executors' side's."""
    with sparkwave.connect(wh, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql(f"SET big_epoch_rows = {0 if big else 1_000_000}")
        for ddl in TABLES:
            s.sql(ddl)
        for name, sql in MVS.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        for batch in epochs:
            for sql in batch:
                s.sql(sql)
            s.flush()
        stepped = tables(s, set(MVS))
        rebuilt = {n for n in MVS if big or top_of(from_json(s.catalog.relation(n).definition["dataflow"]))}
        for name in rebuilt:
            s.sql(f"CREATE MATERIALIZED VIEW {name}_built WITH (backfill_strategy = 'blocking') AS {MVS[name]}")
        return stepped, tables(s, rebuilt, "_built")


@settings(max_examples=2, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
          phases=FAST_PHASES)
@given(epochs=cases)
def test_each_stateful_operator_agrees_per_epoch_per_big_epoch_and_from_snapshots(spark, tmp_path_factory, epochs):
    on_driver, built_with_top = evaluate(spark, tmp_path_factory.mktemp("wh"), epochs, big=False)
    on_executors, built = evaluate(spark, tmp_path_factory.mktemp("wh"), epochs, big=True)
    assert set(on_driver) > set(MVS), f"MVs or states missing: {sorted(on_driver)}"
    topped = {name.partition(".")[0] for name in built_with_top}
    assert {"a_group", "a_top"} <= topped, f"no top built on the driver: {sorted(topped)}"
    for path, got, mvs in (("per big epoch", on_executors, set(MVS)), ("from snapshots", built, set(MVS)),
                           ("from snapshots, top on the driver", built_with_top, topped)):
        want = {n: rows for n, rows in on_driver.items() if n.partition(".")[0] in mvs}
        assert got.keys() == want.keys(), f"{path}: other tables {sorted(got)} than per epoch {sorted(want)}"
        for name, rows in want.items():
            assert got[name] == rows, (f"{name} {path} differs from per epoch in Arrow: extra {got[name] - rows}, "
                                       f"missing {rows - got[name]}")
