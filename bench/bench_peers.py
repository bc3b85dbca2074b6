"""Peers, side by side: one workload on sparkwave, on Spark Structured Streaming and on Spark Declarative
Pipelines, so the README's claims can be read against what plain Spark offers.

Workload: `t (k bigint primary key, g int, v bigint)` of N rows and `d (g int primary key, name varchar)`
naming 900 of t's 1,000 groups; the aggregate `SELECT g, count(*), sum(v) FROM t GROUP BY g` and the join
`SELECT t.k, t.v, d.name FROM t JOIN d ON t.g = d.g` (0.9 N rows: what a recompute rewrites). Measured:
- freshness: wall time from submitting a 1k-row change (400 updates that also move rows between groups,
  300 inserts, 300 deletes) until both results hold it; median of a few changes after a warm-up one;
- throughput: rows/s of appends offered at 100k rows/s for a while (sparkwave, Structured Streaming);
- exactness: both results after the changes against DuckDB on the true table contents (multisets).

How each peer gets the changes:
- sparkwave: one literal `DELETE ... WHERE k IN (...)`, `Session.insert` upserting the new rows, `flush()`.
- Structured Streaming (SS) cannot retract from an append-only source, so it is given what it can express:
  a parquet file source of signed change rows carrying before-images (an update is -old, +new; a delete
  -old), as a CDC feed would. The aggregate is `sum(sign)`, `sum(sign * v)` by g, update mode, in the
  RocksDB state store, into foreachBatch; the join a stream-static join into a parquet sink whose signed
  rows the reader nets. Both trigger every second. A second, append-only reading of the same feed (the
  new rows only, as an upsert topic gives them) shows what SS yields without before-images.
- Spark Declarative Pipelines (SDP) run through Spark Connect: a Connect service is started in this
  process's JVM (`SparkConnectService.start` on the shared SparkContext, an ephemeral port on 127.0.0.1)
  and each refresh does what `spark-pipelines run` does (define a dataflow graph, register its elements
  with `pyspark.pipelines`' decorators, `start_run`, read its events to the end), without a JVM start.
  A graph runs once, so each refresh defines it again. SDP's AUTO CDC flow needs a MERGE-capable table
  format (Delta), which is not installable here, so `t` is a temporary view over the base files and the
  change log (the last change per key wins) and the two materialized views are recomputed over it on
  every refresh, as open-source SDP does (the first refresh takes the warm-up change). It needs
  `pyspark[pipelines]` (grpcio, grpcio-status, googleapis-common-protos, zstandard); without them its
  rows say so.

Sizes: SPARKWAVE_BENCH_PEERS_SIZES (default "1000000,10000000"); changes per size:
SPARKWAVE_BENCH_PEERS_ROUNDS (default 3, after one warm-up); throughput at the smallest size for
SPARKWAVE_BENCH_PEERS_TP_SECONDS (default 20) at SPARKWAVE_BENCH_PEERS_RATE rows/s (default 100,000)."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

import sparkwave
from bench.common import fresh_dir, median, report, spark

SIZES = [int(x) for x in os.environ.get("SPARKWAVE_BENCH_PEERS_SIZES", "1000000,10000000").split(",")]
ROUNDS = int(os.environ.get("SPARKWAVE_BENCH_PEERS_ROUNDS", 3))
TP_SECONDS = int(os.environ.get("SPARKWAVE_BENCH_PEERS_TP_SECONDS", 20))
RATE = int(os.environ.get("SPARKWAVE_BENCH_PEERS_RATE", 100_000))
GROUPS, NAMED = 1000, 900
UPDATES, INSERTS, DELETES = 400, 300, 300
TIMEOUT = 1800.0
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
BASE_COLS = ["id AS k", f"CAST(id % {GROUPS} AS INT) AS g", "(id * 7919) % 1000003 AS v"]
AGG = "SELECT g, count(*) AS n, sum(v) AS total FROM t GROUP BY g"
JOIN = "SELECT t.k, t.v, d.name FROM t JOIN d ON t.g = d.g"
SS_SCHEMA = "k BIGINT, g INT, v BIGINT, sign INT"
SW, SS, SS_APPEND, SDP = ("sparkwave", "Structured Streaming", "Structured Streaming, append-only reading",
                          "Declarative Pipelines")


def base_row(k: int) -> tuple[int, int]:
    """(g, v) of base key k, as BASE_COLS computes it in Spark and the truth in DuckDB."""
    return k % GROUPS, k * 7919 % 1000003


@dataclass
class Change:
    """One 1k-row change: inserts (k, g, v), updates (k, old g, old v, g, v), deletes (k, old g, old v)."""

    seq: int
    inserts: list[tuple[int, int, int]]
    updates: list[tuple[int, int, int, int, int]]
    deletes: list[tuple[int, int, int]]

    def upserts(self) -> pa.Table:
        rows = self.inserts + [(k, g, v) for k, _, _, g, v in self.updates]
        return _table(rows, ["k", "g", "v"])

    def signed(self) -> pa.Table:
        """The change as SS can take it: rows with a sign, before-images included."""
        rows = [(k, g, v, 1) for k, g, v in self.inserts]
        rows += [r for k, og, ov, g, v in self.updates for r in ((k, og, ov, -1), (k, g, v, 1))]
        rows += [(k, g, v, -1) for k, g, v in self.deletes]
        return _table(rows, ["k", "g", "v", "sign"])

    def log(self) -> pa.Table:
        """The change as a CDC log: one row per key with its op and sequence number."""
        rows = ([(k, g, v, "I", self.seq) for k, g, v in self.inserts]
                + [(k, g, v, "U", self.seq) for k, _, _, g, v in self.updates]
                + [(k, g, v, "D", self.seq) for k, g, v in self.deletes])
        return _table(rows, ["k", "g", "v", "op", "seq"])


def _table(rows: list[tuple], names: list[str]) -> pa.Table:
    types = {"k": pa.int64(), "g": pa.int32(), "v": pa.int64(), "sign": pa.int32(), "op": pa.string(),
             "seq": pa.int64()}
    cols = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    return pa.table({n: pa.array(c, types[n]) for n, c in zip(names, cols, strict=True)})


class Truth:
    """The table's true contents: the base formula plus the last image of every changed key."""

    def __init__(self, n: int) -> None:
        self.n, self.next_key = n, n
        self.changed: dict[int, tuple[int, int] | None] = {}

    def image(self, k: int) -> tuple[int, int] | None:
        if k in self.changed:
            return self.changed[k]
        return base_row(k) if k < self.n else None

    def change(self, seq: int, rnd: random.Random) -> Change:
        picked: dict[int, tuple[int, int]] = {}
        while len(picked) < UPDATES + DELETES:
            k = rnd.randrange(self.next_key)
            if k not in picked and (img := self.image(k)) is not None:
                picked[k] = img
        keys = list(picked)
        new = [(self.next_key + i, rnd.randrange(GROUPS), rnd.randrange(1_000_000)) for i in range(INSERTS)]
        self.next_key += INSERTS
        ch = Change(seq, new, [(k, *picked[k], rnd.randrange(GROUPS), rnd.randrange(1_000_000))
                               for k in keys[:UPDATES]], [(k, *picked[k]) for k in keys[UPDATES:]])
        for k, g, v in ch.inserts:
            self.changed[k] = (g, v)
        for k, _, _, g, v in ch.updates:
            self.changed[k] = (g, v)
        for k, _, _ in ch.deletes:
            self.changed[k] = None
        return ch

    def checker(self) -> Checker:
        ks = list(self.changed)
        live = [self.changed[k] is not None for k in ks]
        imgs = [self.changed[k] or (0, 0) for k in ks]
        over = pa.table({"k": pa.array(ks, pa.int64()), "g": pa.array([i[0] for i in imgs], pa.int32()),
                         "v": pa.array([i[1] for i in imgs], pa.int64()), "live": pa.array(live)})
        return Checker(self.n, over)


class Checker:
    """Compares a system's aggregate or join, as a multiset, with DuckDB's on the true current table."""

    AGG_COLS = "CAST(g AS BIGINT) AS g, CAST(n AS BIGINT) AS n, CAST(total AS BIGINT) AS total"
    JOIN_COLS = "CAST(k AS BIGINT) AS k, CAST(v AS BIGINT) AS v, CAST(name AS VARCHAR) AS name"

    def __init__(self, n: int, over: pa.Table) -> None:
        self.con = duckdb.connect()
        self.con.execute("SET threads = 2")
        self.con.register("over", over)
        self.con.execute(f"""
            CREATE TABLE t AS
              SELECT b.range AS k, CAST(b.range % {GROUPS} AS INTEGER) AS g, (b.range * 7919) % 1000003 AS v
              FROM range({n}) b ANTI JOIN over o ON o.k = b.range
              UNION ALL SELECT k, g, v FROM over WHERE live""")
        self.con.execute(f"CREATE TABLE d AS SELECT CAST(range AS INTEGER) AS g, 'name' || range AS name "
                         f"FROM range({NAMED})")
        self.truth = {"agg": self.counted(AGG, "agg"), "join": self.counted(JOIN, "join")}  # the same SQL

    def counted(self, sql: str, kind: str, signed: bool = False) -> str:
        """`sql`'s rows with their multiplicity: count(*), or the sum of their signs for signed rows."""
        casts = self.AGG_COLS if kind == "agg" else self.JOIN_COLS
        names = ", ".join(c.split(" AS ")[-1] for c in casts.split(", "))
        weight = "sum(sign)" if signed else "count(*)"
        return (f"SELECT {names}, CAST({weight} AS BIGINT) AS c FROM (SELECT {casts}{', sign' if signed else ''} "
                f"FROM ({sql})) GROUP BY {names} HAVING {weight} <> 0")

    def exact(self, kind: str, got: str) -> bool:
        truth = self.truth[kind]
        q = (f"SELECT (SELECT count(*) FROM (({truth}) EXCEPT ({got}))) "
             f"+ (SELECT count(*) FROM (({got}) EXCEPT ({truth})))")
        return self.con.execute(q).fetchall() == [(0,)]

    def arrow(self, name: str, table: pa.Table) -> str:
        self.con.register(name, table)
        return f"SELECT * FROM {name}"


def parquet(path: Path) -> str:
    return f"SELECT * FROM read_parquet('{path}/*.parquet')"


@dataclass
class Outcome:
    """One system's figures at one size (`skipped` says why there are none)."""

    fresh: list[float] = field(default_factory=list)
    agg_exact: bool | None = None
    join_exact: bool | None = None
    tp: tuple[float, float] | None = None  # sustained rows/s, lag after the last offered row (s)
    skipped: str = ""


# --- sparkwave ----------------------------------------------------------------------------------------
def run_sparkwave(n: int, changes: list[Change], check: Checker, tp_batches: list[pa.Table] | None) -> Outcome:
    out = Outcome()
    with sparkwave.connect(fresh_dir(f"peers-sw-{n}"), spark=spark(), barrier_interval_ms=1000) as s:
        s.sql("CREATE TABLE t (k bigint, g int, v bigint, PRIMARY KEY (k)); "
              "CREATE TABLE d (g int, name varchar, PRIMARY KEY (g))")
        s.insert("d", spark().range(NAMED).selectExpr("CAST(id AS INT) AS g", "concat('name', id) AS name"))
        s.insert("t", spark().range(n).selectExpr(*BASE_COLS))
        s.flush()
        s.compact()
        s.sql(f"CREATE MATERIALIZED VIEW agg AS {AGG}; CREATE MATERIALIZED VIEW j AS {JOIN}")
        s.wait()
        for ch in changes:
            t0 = time.perf_counter()  # the DELETE first: it is evaluated (a Spark job), the upserts only staged
            s.sql(f"DELETE FROM t WHERE k IN ({', '.join(str(k) for k, _, _ in ch.deletes)})")
            s.insert("t", ch.upserts())
            s.flush()
            out.fresh.append(time.perf_counter() - t0)
        out.fresh = out.fresh[1:]
        out.agg_exact = check.exact("agg", check.counted(check.arrow("sw_agg", s.table("agg").toArrow()), "agg"))
        path = fresh_dir(f"peers-sw-{n}-join")
        s.table("j").select("k", "v", "name").write.parquet(str(path))
        out.join_exact = check.exact("join", check.counted(parquet(path), "join"))
        if tp_batches:
            t0 = time.perf_counter()
            for i, b in enumerate(tp_batches):
                _sleep_until(t0 + i)
                s.insert("t", b)
            last = time.perf_counter()
            s.flush()
            end = time.perf_counter()
            out.tp = (sum(b.num_rows for b in tp_batches) / (end - t0), end - last)
    return out


def _sleep_until(t: float) -> None:
    """Paces the offered rate: batch i is offered i seconds after the first."""
    time.sleep(max(0.0, t - time.perf_counter()))


# --- Structured Streaming -----------------------------------------------------------------------------
class Progress(StreamingQueryListener):
    """Counts each query's input rows as its batches commit, so the bench waits on progress events
    rather than on sleeps (processAllAvailable would also wait for the next, empty trigger)."""

    def __init__(self) -> None:
        super().__init__()
        self.cond = threading.Condition()
        self.rows: dict[str, int] = {}
        self.at: dict[str, float] = {}

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        with self.cond:
            if p.numInputRows:
                self.rows[str(p.id)] = self.rows.get(str(p.id), 0) + p.numInputRows
                self.at[str(p.id)] = time.perf_counter()
            self.cond.notify_all()

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        with self.cond:
            self.cond.notify_all()

    def counts(self, queries: list[StreamingQuery]) -> list[int]:
        with self.cond:
            return [self.rows.get(str(q.id), 0) for q in queries]

    def wait(self, queries: list[StreamingQuery], targets: list[int]) -> float:
        """The time the last of `queries` committed a batch that brought its input count to its target."""
        deadline = time.perf_counter() + TIMEOUT
        with self.cond:
            while any(self.rows.get(str(q.id), 0) < t for q, t in zip(queries, targets, strict=True)):
                for q in queries:
                    if not q.isActive:
                        raise RuntimeError(f"streaming query {q.name or q.id} stopped: {q.exception()}")
                if time.perf_counter() > deadline:
                    raise TimeoutError("streaming queries did not catch up")
                self.cond.wait(0.5)
            return max(self.at[str(q.id)] for q in queries)


def _drop_in(table: pa.Table, folder: Path, name: str) -> None:
    """Adds a parquet file to a file source's folder atomically (written beside it, then renamed)."""
    tmp = folder.parent / f".{name}"
    pq.write_table(table, tmp)
    os.replace(tmp, folder / name)


def run_streaming(n: int, changes: list[Change], check: Checker, tp_batches: list[pa.Table] | None,
                  append_only: bool) -> tuple[Outcome, Outcome | None]:
    root = fresh_dir(f"peers-ss-{n}")
    src, dpath = root / "src", root / "d"
    sp = spark()
    sp.range(n).selectExpr(*BASE_COLS, "1 AS sign").write.parquet(str(src))
    sp.range(NAMED).selectExpr("CAST(id AS INT) AS g", "concat('name', id) AS name").write.parquet(str(dpath))
    sp.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    groups: dict[int, tuple[int, int]] = {}

    def upsert_groups(df: DataFrame, _batch: int) -> None:
        for r in df.collect():
            groups[r["g"]] = (r["n"], r["total"])

    listener = Progress()
    sp.streams.addListener(listener)
    out, plain = Outcome(), None
    queries: list[StreamingQuery] = []
    try:
        changes_in = sp.readStream.schema(SS_SCHEMA).parquet(str(src))
        d = sp.read.parquet(str(dpath))
        queries.append(changes_in.groupBy("g").agg(F.sum("sign").alias("n"), F.sum(F.col("sign") * F.col("v"))
                                                   .alias("total"))
                       .writeStream.queryName("peers_agg").outputMode("update").foreachBatch(upsert_groups)
                       .option("checkpointLocation", str(root / "ck-agg")).trigger(processingTime="1 second")
                       .start())
        queries.append(changes_in.join(d, "g").select("k", "v", "name", "sign")
                       .writeStream.queryName("peers_join").format("parquet").option("path", str(root / "join"))
                       .option("checkpointLocation", str(root / "ck-join")).trigger(processingTime="1 second")
                       .start())
        listener.wait(queries, [n, n])
        for ch in changes:
            before = listener.counts(queries)
            t0 = time.perf_counter()
            rows = ch.signed()
            _drop_in(rows, src, f"change-{ch.seq}.parquet")
            out.fresh.append(listener.wait(queries, [c + rows.num_rows for c in before]) - t0)
        out.fresh = out.fresh[1:]
        agg = pa.table({"g": pa.array(list(groups), pa.int32()), "n": pa.array([x[0] for x in groups.values()]),
                        "total": pa.array([x[1] for x in groups.values()])})
        out.agg_exact = check.exact("agg", check.counted(check.arrow("ss_agg", agg) + " WHERE n <> 0", "agg"))
        out.join_exact = check.exact("join", check.counted(parquet(root / "join"), "join", signed=True))
        if append_only:
            plain = append_only_reading(sp, src, d, root, check)
        if tp_batches:
            before = listener.counts(queries)
            t0 = time.perf_counter()
            for i, b in enumerate(tp_batches):
                _sleep_until(t0 + i)
                _drop_in(b.append_column("sign", pa.array([1] * b.num_rows, pa.int32())), src, f"tp-{i}.parquet")
            last = time.perf_counter()
            total = sum(b.num_rows for b in tp_batches)
            end = listener.wait(queries, [c + total for c in before])
            out.tp = (total / (end - t0), max(0.0, end - last))
    finally:
        for q in queries:
            q.stop()
        sp.streams.removeListener(listener)
        sp.conf.unset("spark.sql.streaming.stateStore.providerClass")
    return out, plain


def append_only_reading(sp: Any, src: Path, d: DataFrame, root: Path, check: Checker) -> Outcome:
    """The same feed read as an append-only stream of new rows (no before-images; a delete's tombstone
    names no group, so it drops out), run once over everything with an availableNow trigger."""
    rows = sp.readStream.schema(SS_SCHEMA).parquet(str(src)).where("sign = 1").drop("sign")
    qa = (rows.groupBy("g").agg(F.count(F.lit(1)).alias("n"), F.sum("v").alias("total"))
          .writeStream.queryName("peers_append_agg").outputMode("complete").format("memory")
          .option("checkpointLocation", str(root / "ck-append-agg")).trigger(availableNow=True).start())
    qj = (rows.join(d, "g").select("k", "v", "name").writeStream.format("parquet")
          .option("path", str(root / "append-join")).option("checkpointLocation", str(root / "ck-append-join"))
          .trigger(availableNow=True).start())
    qa.awaitTermination()
    qj.awaitTermination()
    agg = sp.table("peers_append_agg").toArrow()
    return Outcome(agg_exact=check.exact("agg", check.counted(check.arrow("ss_append_agg", agg), "agg")),
                   join_exact=check.exact("join", check.counted(parquet(root / "append-join"), "join")))


# --- Spark Declarative Pipelines ----------------------------------------------------------------------
class Pipelines:
    """A Spark Connect service in this JVM and a Connect client to it, for SDP's dataflow graphs."""

    def __init__(self) -> None:
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        sc = spark().sparkContext
        sc._conf.set("spark.connect.grpc.binding.port", "0")  # an ephemeral port: other Sparks run here
        sc._conf.set("spark.connect.grpc.binding.address", "127.0.0.1")
        self.service = getattr(getattr(sc._jvm.org.apache.spark.sql.connect.service, "SparkConnectService$"),
                               "MODULE$")
        self.service.start(sc._jsc.sc())
        self.client: Any = ConnectSession.builder.remote(f"sc://127.0.0.1:{self.service.localPort()}").create()

    def close(self) -> None:
        self.client.stop()
        self.service.stop(getattr(self.service, "stop$default$1")(), getattr(self.service, "stop$default$2")())

    def refresh(self, root: Path, database: str) -> None:
        """One `spark-pipelines run`: define the graph, run it to the end, drop it."""
        from pyspark import pipelines as dp
        from pyspark.pipelines.graph_element_registry import graph_element_registration_context
        from pyspark.pipelines.spark_connect_graph_element_registry import SparkConnectGraphElementRegistry
        from pyspark.pipelines.spark_connect_pipeline import create_dataflow_graph, start_run
        from pyspark.sql.connect import proto

        c = self.client
        graph = create_dataflow_graph(c, default_catalog=None, default_database=database, sql_conf={})
        with graph_element_registration_context(SparkConnectGraphElementRegistry(c, graph)):

            @dp.temporary_view
            def t() -> Any:
                return c.sql(f"""
                    WITH last AS (SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY k ORDER BY seq DESC)
                                                 AS rn FROM parquet.`{root}/changes`) WHERE rn = 1)
                    SELECT k, g, v FROM parquet.`{root}/base` b WHERE NOT EXISTS (SELECT 1 FROM last WHERE last.k = b.k)
                    UNION ALL SELECT k, g, v FROM last WHERE op <> 'D'""")

            @dp.materialized_view
            def agg() -> Any:
                return c.sql(AGG)

            @dp.materialized_view
            def joined() -> Any:
                return c.sql(JOIN.replace("JOIN d", f"JOIN parquet.`{root}/d` d"))

        messages = []
        for r in start_run(c, graph, full_refresh=None, full_refresh_all=False, refresh=None, dry=False,
                           storage=(root / "storage").as_uri()):
            if "pipeline_event_result" in r:
                messages.append(r["pipeline_event_result"].event.message)
        cmd = proto.Command()
        cmd.pipeline_command.drop_dataflow_graph.CopyFrom(
            proto.PipelineCommand.DropDataflowGraph(dataflow_graph_id=graph))
        c.client.execute_command(cmd)
        if not messages or "COMPLETED" not in messages[-1]:
            raise RuntimeError(f"pipeline run did not complete: {messages[-3:]}")


def sdp_missing() -> str:
    """Why SDP cannot run in this environment, or ''."""
    try:
        import pyspark.sql.connect.session  # noqa: F401 - checks the Connect client's dependencies
    except ImportError as e:
        return f"not run: Spark Connect's client needs pyspark[pipelines] ({str(e).splitlines()[0]})"
    return ""


def run_pipelines(pl: Pipelines, n: int, changes: list[Change], check: Checker) -> Outcome:
    root = fresh_dir(f"peers-sdp-{n}")
    sp = spark()
    sp.range(n).selectExpr(*BASE_COLS).write.parquet(str(root / "base"))
    sp.range(NAMED).selectExpr("CAST(id AS INT) AS g", "concat('name', id) AS name").write.parquet(str(root / "d"))
    (root / "changes").mkdir(parents=True)
    pq.write_table(_table([], ["k", "g", "v", "op", "seq"]), root / "changes" / "empty.parquet")
    db = f"peers_sdp_{n}"
    sp.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")
    sp.sql(f"CREATE DATABASE {db} LOCATION '{root / 'db'}'")  # its MVs' files stay out of the working dir
    out = Outcome()
    # The initial computation takes the warm-up change with it: every refresh is the same full recompute.
    pq.write_table(changes[0].log(), root / "changes" / f"change-{changes[0].seq}.parquet")
    pl.refresh(root, db)
    for ch in changes[1:]:
        t0 = time.perf_counter()
        pq.write_table(ch.log(), root / "changes" / f"change-{ch.seq}.parquet")
        pl.refresh(root, db)
        out.fresh.append(time.perf_counter() - t0)
    out.agg_exact = check.exact("agg", check.counted(parquet(root / "db" / "agg"), "agg"))
    out.join_exact = check.exact("join", check.counted(parquet(root / "db" / "joined"), "join"))
    return out


# --- the run ------------------------------------------------------------------------------------------
def throughput_batches(first_key: int) -> list[pa.Table]:
    rng = np.random.default_rng(17)
    return [pa.table({"k": pa.array(np.arange(first_key + i * RATE, first_key + (i + 1) * RATE, dtype=np.int64)),
                      "g": pa.array(rng.integers(0, GROUPS, RATE, dtype=np.int32)),
                      "v": pa.array(rng.integers(0, 1_000_000, RATE, dtype=np.int64))}) for i in range(TP_SECONDS)]


@contextmanager
def guarded(results: dict[str, Outcome], name: str) -> Iterator[None]:
    """A peer that fails records why in its row instead of ending the whole run."""
    try:
        yield
    except Exception as e:
        results[name] = Outcome(skipped=f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")


def main() -> str:
    missing = sdp_missing()
    pipelines: Pipelines | None = None
    by_size: dict[int, dict[str, Outcome]] = {}
    try:
        for i, n in enumerate(sorted(SIZES)):
            truth, rnd = Truth(n), random.Random(n)
            changes = [truth.change(seq, rnd) for seq in range(1, ROUNDS + 2)]
            check = truth.checker()
            tp = throughput_batches(truth.next_key) if i == 0 and TP_SECONDS > 0 else None
            res: dict[str, Outcome] = {}
            by_size[n] = res
            with guarded(res, SW):
                res[SW] = run_sparkwave(n, changes, check, tp)
            with guarded(res, SS):
                res[SS], plain = run_streaming(n, changes, check, tp, append_only=i == 0)
                if plain is not None:
                    res[SS_APPEND] = plain
            if missing:
                res[SDP] = Outcome(skipped=missing)
                continue
            with guarded(res, SDP):
                pipelines = pipelines or Pipelines()
                res[SDP] = run_pipelines(pipelines, n, changes, check)
    finally:
        if pipelines is not None:
            pipelines.close()
    return report("Peers: sparkwave, Structured Streaming, Declarative Pipelines", lines(by_size))


def lines(by_size: dict[int, dict[str, Outcome]]) -> list[str]:
    def ratio(x: float | None, base: float | None, fmt: Callable[[float], str]) -> tuple[str, str]:
        if x is None:
            return "-", "-"
        return fmt(x), f"{x / base:.2f}x" if base else "-"

    out = [f"A 1k-row change ({UPDATES} updates moving rows between groups, {INSERTS} inserts, {DELETES} "
           f"deletes) until both `{AGG}` and `{JOIN}` hold it; median of {ROUNDS} changes after a warm-up one. "
           "sparkwave: DELETE + upsert + flush(). Structured Streaming: signed change rows with before-images "
           "into a file source, RocksDB state, 1 s trigger (so up to 1 s of waiting is part of its figure). "
           "Declarative Pipelines: one `spark-pipelines run` (graph defined and run, no JVM start) that "
           "recomputes both materialized views. Ratio: time / sparkwave's (higher is slower).", "",
           "| rows in t | system | change visible in both results (s, median) | vs sparkwave |", "|---|---|---|---|"]
    def fresh(o: Outcome, res: dict[str, Outcome]) -> str:
        base = median(res[SW].fresh) if SW in res and res[SW].fresh else None
        return " | ".join(ratio(median(o.fresh) if o.fresh else None, base, lambda x: f"{x:.2f}"))

    out += _per_system(by_size, (SW, SS, SDP), fresh)
    first = next(iter(by_size.values()), {})
    sw_tp = first[SW].tp if SW in first and first[SW].tp else None
    out += ["", f"Appends of new keys offered at {RATE:,} rows/s for {TP_SECONDS} s into the "
            f"{next(iter(by_size), 0):,}-row table, both results maintained; sustained = rows / time until the "
            "last is in both results. Ratio: rows/s / sparkwave's (lower is slower).", "",
            "| system | sustained rows/s | lag after the last offered row (s) | vs sparkwave |", "|---|---|---|---|"]
    for name in (SW, SS):
        o = first.get(name)
        if o is None or o.tp is None:
            out.append(f"| {name} | {o.skipped if o and o.skipped else 'not measured'} | - | - |")
            continue
        out.append(f"| {name} | {o.tp[0]:,.0f} | {o.tp[1]:.2f} | "
                   f"{o.tp[0] / sw_tp[0] if sw_tp else 0:.2f}x |")
    out.append(f"| {SDP} | not measured: no continuous mode for materialized views; every refresh recomputes "
               "all rows (see above) | - | - |")
    out += ["", "After the changes, each result against DuckDB on the true table (exact multiset equality). "
            "Structured Streaming's append-only reading gets the feed's new rows only, as an upsert topic gives "
            "them (run at the smallest size).", "",
            "| rows in t | system | aggregate exact | join exact |", "|---|---|---|---|"]
    out += _per_system(by_size, (SW, SS, SS_APPEND, SDP),
                       lambda o, _: f"{_yes(o.agg_exact)} | {_yes(o.join_exact)}")
    return out


def _per_system(by_size: dict[int, dict[str, Outcome]], names: tuple[str, ...],
                cells: Callable[[Outcome, dict[str, Outcome]], str]) -> list[str]:
    """One table row per size and system that ran (`cells` gives its two figures), or why it did not."""
    rows = []
    for n, res in by_size.items():
        for name in names:
            o = res.get(name)
            if o is not None:
                rows.append(f"| {n:,} | {name} | {o.skipped} | - |" if o.skipped else
                            f"| {n:,} | {name} | {cells(o, res)} |")
    return rows


def _yes(b: bool | None) -> str:
    return "-" if b is None else "yes" if b else "no"


if __name__ == "__main__":
    main()
