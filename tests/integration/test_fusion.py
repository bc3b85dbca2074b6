"""Fused reads (`stream/fusion.py`): the scan-and-projection chains of the MVs over a source,
computed by the job that reads the source, equal each chain computed on its own over the same log
rows, for plans the planner makes (filters, expressions, a chain under an aggregate, both sides of a
self-join, a chain beside a join with a table); a windowed scan is left to itself. A failure of
that job falls back to reading the source alone unless the source's reader failed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from sparkwave.core.chunk import Op
from sparkwave.core.local_frames import local_frame, to_arrow
from sparkwave.stream import fusion
from sparkwave.stream.dataflow import Dataflow
from sparkwave.stream.fused_read import raised_by_python as _raised_by_python
from sparkwave.stream.operator import EpochIO

QUERIES = {
    "cheap": "SELECT id, name FROM ev WHERE price < 50",
    # Fails on id 4 unless the predicate keeps its expressions from that row, as the chain alone does.
    "ratio": "SELECT id, CASE WHEN id = 4 THEN raise_error('id 4') ELSE price / 2 END AS r, upper(name) AS u "
             "FROM ev WHERE id <> 4",
    "per_name": "SELECT upper(name) AS u, count(*) AS n, sum(price) AS s FROM ev WHERE price IS NOT NULL "
                "GROUP BY upper(name)",
    "pairs": "SELECT a.id, b.id AS other FROM ev a JOIN ev b ON a.name = b.name WHERE a.id < 3",
    "labelled": "SELECT ev.id, d.label FROM ev JOIN d ON ev.id = d.k",
    "windowed": "SELECT window_start, count(*) AS n FROM TUMBLE(ev, ts, INTERVAL '1' HOUR) GROUP BY window_start",
}
# (top operator's type, at the MV's root) per chain that reads `ev`
CHAINS = {"cheap": [("project", True)], "ratio": [("project", True)], "per_name": [("project", False)],
          "pairs": [("scan", False), ("scan", False)], "labelled": [("scan", False)], "windowed": []}
T0 = datetime(2026, 11, 27, tzinfo=UTC)
ROWS = [  # (_op, id, name, price): a source's rows are inserts; NULLs, a repeated row
    (Op.INSERT, 1, "a", 10.0), (Op.INSERT, 2, "b", 70.0), (Op.INSERT, 4, "a", 30.0),
    (Op.INSERT, 5, None, None), (Op.INSERT, 6, "b", 20.0), (Op.INSERT, 6, "b", 20.0),
    (Op.INSERT, 7, "a", 40.0), (Op.INSERT, 8, "c", 49.5), (Op.INSERT, None, "c", 5.0),
]
BAD = (Op.INSERT, 4, "a", None)  # a bad record: no chain may see it, nor fail on it


def log_rows(rows: list[tuple], errors: list[str | None] | None) -> pa.Table:
    """`ev`'s log rows of an epoch, as the source's read has them (with `_error` when `errors`)."""
    cols = {"_epoch": pa.array([1] * len(rows), pa.int64()), "_seq": pa.array(range(len(rows)), pa.int64()),
            "_op": pa.array([int(r[0]) for r in rows], pa.int8()), "_vnode": pa.array([0] * len(rows), pa.int16()),
            "id": pa.array([r[1] for r in rows], pa.int32()), "name": pa.array([r[2] for r in rows], pa.string()),
            "price": pa.array([r[3] for r in rows], pa.float64()),
            "ts": pa.array([T0] * len(rows), pa.timestamp("us", tz="UTC")),
            "_row_id": pa.array(range(100, 100 + len(rows)), pa.int64())}
    if errors is not None:
        cols["_error"] = pa.array(errors, pa.string())
    return pa.table(cols)


DDL = ("_epoch bigint, _seq bigint, _op tinyint, _vnode smallint, id int, name string, price double, ts timestamp, "
       "_row_id bigint")


def as_counter(t: pa.Table) -> Counter:
    return Counter(tuple(r.values()) for r in t.to_pylist())


def test_fused_chains_equal_each_chain_on_its_own(session):
    s = session
    s.sql("CREATE TABLE ev (id int, name varchar, price double, ts timestamptz); "
          "CREATE TABLE d (k int PRIMARY KEY, label varchar)")
    for name, q in QUERIES.items():
        s.sql(f"CREATE MATERIALIZED VIEW {name} AS {q}")
    roots = {name: Dataflow(s.rt, s.catalog.relation(name)).root for name in QUERIES}
    chains = [c for name, root in roots.items() for c in fusion.branches(name, root, "ev")]
    assert {name: [(c.op.op, c.root) for c in chains if c.mv == name] for name in QUERIES} == CHAINS
    # An MV whose every scan of `ev` is fused reads nothing else of it: the source writes no file for it.
    assert {name for name, root in roots.items()
            if not fusion.covers(root, "ev", {c.op.id for c in chains if c.mv == name})} == {"windowed"}
    one_side = next(c.op.id for c in chains if c.mv == "pairs")
    assert not fusion.covers(roots["pairs"], "ev", {one_side}), "the self-join's other side is not fused"

    good = local_frame(s.rt.spark, log_rows(ROWS, None), DDL)
    read = local_frame(s.rt.spark, log_rows([*ROWS, BAD], [None] * len(ROWS) + ["not JSON"]),
                       DDL + ", _error string")
    fused_read = fusion.fused_read(read, chains, "`_error` IS NULL")
    assert fused_read is not None
    wide = fused_read[0].toArrow()
    own, fused = fusion.split(wide, read.columns, chains, fused_read[1], pc.is_null(wide["_error"]))
    assert own.column_names == read.columns and own.num_rows == len(ROWS) + 1
    for c in chains:
        alone = c.op._collected(EpochIO(s.rt, {}, changes={"ev": good}), c.root)
        assert alone is not None and alone.num_rows > 0
        got = fused[c.mv][c.op.id]
        assert got.schema == alone.schema, c
        assert as_counter(got) == as_counter(alone), c
        io = EpochIO(s.rt, {}, fused={c.op.id: got})  # the chain takes the read's rows without a job of its own
        assert c.op._collected(io, c.root) is got


def test_a_source_whose_columns_look_like_fused_ones_is_read_alone(session):
    s = session
    s.sql("CREATE TABLE ev (id int, name varchar, price double, ts timestamptz); "
          f"CREATE MATERIALIZED VIEW cheap AS {QUERIES['cheap']}")
    chains = fusion.branches("cheap", Dataflow(s.rt, s.catalog.relation("cheap")).root, "ev")
    rows = local_frame(s.rt.spark, log_rows(ROWS, None), DDL).withColumnRenamed("ts", "_fz0_ts")
    assert fusion.fused_read(rows, chains, "true") is None
    assert fusion.fused_read(local_frame(s.rt.spark, log_rows(ROWS, None), DDL), [], "true") is None


class _Failing(DataSource):
    """A source whose reader fails in its Python worker, as a Kafka read that cannot reach its broker."""

    @classmethod
    def name(cls) -> str:
        return "sparkwave_test_failing"

    def schema(self) -> str:
        return "x int"

    def reader(self, schema: StructType) -> DataSourceReader:
        return _FailingReader()


class _FailingReader(DataSourceReader):
    def read(self, partition: InputPartition) -> Iterator[tuple]:
        raise RuntimeError("the broker is gone")
        yield (1,)


def test_a_failure_in_the_reader_is_the_sources_and_any_other_falls_back(spark):
    """`_read_fused` reads a source alone when its fused job fails, unless the failure is the
    reader's own (it would fail alone too, and the source's error must say so)."""
    spark.dataSource.register(_Failing)
    failures = []
    for df in (spark.read.format("sparkwave_test_failing").load(),
               spark.range(3).selectExpr("CASE WHEN id = 1 THEN raise_error('an expression failed') END AS q")):
        with pytest.raises(Exception) as raised:
            to_arrow(df)
        failures.append(_raised_by_python(raised.value))
    assert failures == [True, False]
    assert not _raised_by_python(ValueError("an Arrow cast on the driver"))
