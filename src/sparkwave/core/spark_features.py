"""What sparkwave asks of its SparkSession beyond DataFrames, on a classic session and on a Spark Connect
one (`SparkSession.builder.remote("sc://...")`). Everything else sparkwave does with Spark goes through
APIs both offer (DataFrames, Arrow in and out, `spark.conf`, job tags, the Python data source API);
this module is the one place that knows a session's kind.

Feature by feature, classic | Spark Connect:
- cancel a statement: SparkContext job tags (`addJobTag`, `cancelJobsWithTag`) | session tags (`addTag`,
  `interruptTag`, matched by the server against every operation of the session, from any thread).
- cancel an epoch or a service's work: job groups, their future jobs too | session tags, interrupted again
  while the work runs (the callers repeat it already).
- running tasks interrupted on cancel: `setInterruptOnCancel(True)` | the server interrupts its operations.
- scheduler pools (FAIR; backfills below the main graph): the thread's `spark.scheduler.pool` | none: local
  properties do not reach the server, so backfills and epochs share its cores as its scheduler decides.
- default parallelism: `sparkContext.defaultParallelism` | the splits of `spark.range`'s plan (one
  analysis, no job, cached per session).
- a local relation's rows (small changes without a job): the optimized plan's `LocalRelation` and its size,
  rows by `collect()` | the optimized plan's text says whether; rows by `toArrow()`, which the server
  answers from a local scan without a job.
- an empty frame of a schema: an empty `LocalRelation` built in the JVM | `createDataFrame([], ddl)`.
- a frame's partition count (DML ids): `df.rdd.getNumPartitions()` | no RDDs: coalesced to a bound.
- a function per item on the executors: a DataFrame of the items through `mapInArrow`, on both.
- Spark's log level: `setLogLevel` | the server's own log4j settings.

A process holds one kind: PySpark's functions take the kind from the environment
(`SPARK_CONNECT_MODE_ENABLED`, set by the first `remote(...).getOrCreate()`), so a classic and a Connect
session do not mix in one interpreter (the bench runs each in a child process of its own)."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

if TYPE_CHECKING:
    from sparkwave.core.catalog.settings import SettingsMixin

log = logging.getLogger("sparkwave.spark")

# On Connect a frame has no RDD to count partitions of: `bounded_partitions` coalesces to at most this
# many (a no-op below it) and says so.
CONNECT_PARTITION_CAP = 256

_parallelism: dict[int, int] = {}
_parallelism_lock = threading.Lock()


def is_session(x: object) -> bool:
    """Whether `x` is a SparkSession of either kind (Connect's does not subclass the classic one)."""
    return isinstance(x, SparkSession) or type(x).__module__ == "pyspark.sql.connect.session"


def is_connect(spark: SparkSession) -> bool:
    """Whether `spark` is a Spark Connect client's session (no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def describe(spark: SparkSession) -> str:
    """Where the session's jobs run, for a log line: its master, or the Connect server's address."""
    if is_connect(spark):
        # host and port only: the URL's parameters may hold a token
        url = getattr(getattr(getattr(spark, "client", None), "_builder", None), "url", None)
        return f"Spark Connect at sc://{url.hostname}:{url.port}" if url is not None else "Spark Connect"
    return str(spark.sparkContext.master)


def classic_running() -> bool:
    """Whether this process already runs a classic SparkContext (a session sparkwave may join)."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def quiet(spark: SparkSession) -> None:
    """Spark's own log at ERROR; a Connect server's log is the server's to set."""
    if not is_connect(spark):
        spark.sparkContext.setLogLevel("ERROR")


# --- tags and groups: cancelling a statement's or an epoch's jobs ---------------------------------
# Classic Spark keeps its SparkContext's job tags and groups: `SparkSession.addTag`'s tags are mapped
# per thread there, so `interruptTag` from another thread (a watcher, a cancel request) finds nothing.
# Connect's tags are strings the server matches against every operation of the session, from any thread.

def join_tag(spark: SparkSession, tag: str) -> None:
    """This thread's next Spark jobs carry `tag`, so `interrupt_tag(tag)` (from any thread) stops
    them, their running tasks interrupted."""
    if is_connect(spark):
        spark.addTag(tag)
        return
    sc = spark.sparkContext
    sc.addJobTag(tag)
    sc.setInterruptOnCancel(True)


def leave_tag(spark: SparkSession, tag: str) -> None:
    if is_connect(spark):
        spark.removeTag(tag)
    else:
        spark.sparkContext.removeJobTag(tag)


def interrupt_tag(spark: SparkSession, tag: str) -> None:
    """Cancel the running jobs (classic) or operations (Connect) tagged `tag`. One started after it
    is not: callers that must stop those too call again while they run."""
    if is_connect(spark):
        spark.interruptTag(tag)
    else:
        spark.sparkContext.cancelJobsWithTag(tag)


def join_group(spark: SparkSession, group: str, *, pool: str, description: str, leave: str | None = None) -> None:
    """This thread's next jobs belong to `group` (no longer to `leave`), cancelled by `cancel_group`;
    on classic Spark they run in scheduler pool `pool` (a job group; Connect: a tag, no pool)."""
    if is_connect(spark):
        if leave is not None and leave != group:
            spark.removeTag(leave)
        spark.addTag(group)
        return
    sc = spark.sparkContext
    sc.setLocalProperty("spark.scheduler.pool", pool)
    sc.setJobGroup(group, description, interruptOnCancel=True)


def cancel_group(spark: SparkSession, group: str, *, future: bool = False) -> None:
    """Cancel `group`'s running jobs; with `future`, on classic Spark also the jobs its threads
    submit after this (Connect has no such cancel: callers repeat it while the group runs)."""
    if is_connect(spark):
        spark.interruptTag(group)
    elif future:
        sc: Any = spark.sparkContext
        sc._jsc.sc().cancelJobGroupAndFutureJobs(group)
    else:
        spark.sparkContext.cancelJobGroup(group)


def interrupt_all(spark: SparkSession) -> None:
    """Cancel every job of the session (a server shutting down)."""
    if is_connect(spark):
        spark.interruptAll()
    else:
        spark.sparkContext.cancelAllJobs()


def inheriting(spark: SparkSession) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator for a function run on another thread: it runs with the caller's tags (and, on
    classic Spark, local properties: its scheduler pool), so a cancel of the caller's stops it too.
    PySpark's `inheritable_thread_target` picks the kind from the environment, not the session."""
    if not is_connect(spark):
        from pyspark.util import inheritable_thread_target

        return inheritable_thread_target(spark)
    tags = spark.getTags()

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            added = tags - spark.getTags()  # (a thread's own tags stay)
            for t in added:
                spark.addTag(t)
            try:
                return fn(*args, **kwargs)
            finally:
                for t in added:
                    spark.removeTag(t)
        return run
    return wrap


SESSION_SETTING = "connect_session"  # the catalog's record of the owner's Connect session id


def take_over_session(spark: SparkSession, catalog: SettingsMixin) -> list[str]:
    """Connect only, by a new owner before its recovery: interrupt every operation still running for
    the previous owner's server session (a SIGKILLed client's operations run on, on the server, until
    they end: a Spark job writing files recovery is about to sweep or rewrite), then record this
    session as the owner's. Returns the operations interrupted. Classic: nothing (the JVM died with
    its owner)."""
    if not is_connect(spark):
        return []
    client: Any = spark.client
    ours = str(client._session_id)
    previous = catalog.setting(SESSION_SETTING)
    interrupted: list[str] = []
    if previous and previous != ours:
        import copy

        from pyspark.sql.connect.client import ChannelBuilder, SparkConnectClient

        builder = copy.deepcopy(client._builder)
        builder.set(ChannelBuilder.PARAM_SESSION_ID, previous)
        old = SparkConnectClient(builder, user_id=client._user_id)
        try:
            interrupted = list(old.interrupt_all() or [])
        except Exception:  # the server restarted since: that session and its operations are gone
            log.info("the previous owner's Spark Connect session %s is gone", previous)
        finally:
            old.close()
    catalog.set_setting(SESSION_SETTING, ours)
    return interrupted


# --- plans and partitions --------------------------------------------------------------------------

def default_parallelism(spark: SparkSession) -> int:
    """The cores Spark gives a stage by default."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    with _parallelism_lock:
        known = _parallelism.get(id(spark))
    if known is None:
        # `spark.range` without a count takes the default parallelism: the plan says how many (no job)
        probe: Any = spark.range(0, 1)
        found = re.search(r"splits=Some\((\d+)\)", probe._explain_string(extended=False))
        known = int(found.group(1)) if found else 1
        with _parallelism_lock:
            _parallelism[id(spark)] = known
    return max(1, known)


def bounded_partitions(df: DataFrame) -> tuple[DataFrame, int]:
    """`df` and a bound on its partition count (what `monotonically_increasing_id()` reserves ids for)."""
    if not is_connect(df.sparkSession):
        return df, max(1, df.rdd.getNumPartitions())
    return df.coalesce(CONNECT_PARTITION_CAP), CONNECT_PARTITION_CAP


def local_relation_size(df: DataFrame) -> int | None:
    """The row count of `df`'s optimized plan if it is a local relation (rows the driver holds,
    evaluated without a job), else None. On Connect the plan's text says whether, not how many:
    -1 (the caller fetches the rows by `toArrow()`, which the server answers without a job)."""
    if is_connect(df.sparkSession):
        frame: Any = df
        text = frame._explain_string(extended=True)
        optimized = text.split("== Optimized Logical Plan ==", 1)[-1].lstrip()
        return -1 if optimized.startswith("LocalRelation ") else None
    classic: Any = df
    plan = classic._jdf.queryExecution().optimizedPlan()
    if plan.getClass().getSimpleName() != "LocalRelation":
        return None
    return int(plan.data().size())


def sql_over(spark: SparkSession, text: str | Callable[[], str], frames: dict[str, DataFrame]) -> DataFrame:
    """`spark.sql(text)` in which each name of `frames` reads that DataFrame, for this query alone, its
    errors of analysis raised here. `text` may be a function: it runs while the names are temp views,
    so that whatever it asks Spark about them (the types of a query's operands) is answered. Classic:
    the temp views are dropped once Spark has analysed the query (eagerly). Connect analyses lazily, at
    each action, so a dropped view would be missing then: the frames' plans go with the query's as well
    (what `spark.sql(text, name=df)` sends)."""
    try:
        for name, f in frames.items():
            f.createOrReplaceTempView(name)
        query = text() if callable(text) else text
        if not is_connect(spark):
            return spark.sql(query)
        from pyspark.sql.connect.dataframe import DataFrame as RemoteFrame
        from pyspark.sql.connect.plan import SQL, SubqueryAlias

        plans: dict[str, Any] = frames
        df = RemoteFrame(SQL(query, None, None, [SubqueryAlias(f._plan, name) for name, f in plans.items()]),
                         spark)  # type: ignore[arg-type]
        df.schema  # noqa: B018 (the query analysed now: a bad column is the statement's error, not a read's)
        return df
    finally:
        for name in frames:
            spark.catalog.dropTempView(name)


def empty_frame(spark: SparkSession, ddl: str) -> DataFrame:
    """No rows of the schema `ddl`, as an empty local relation the optimizer sees (a union or
    anti-join with it is pruned). Classic PySpark's `createDataFrame([], ddl)` makes a Python RDD
    instead: every job over it ran Python tasks for its empty partitions; so the relation is built in
    the JVM there. Connect's is a local relation already."""
    if is_connect(spark):
        return spark.createDataFrame([], ddl)
    session: Any = spark
    jvm = session._jvm
    assert jvm is not None
    schema = jvm.org.apache.spark.sql.types.StructType.fromDDL(ddl)
    return DataFrame(session._jsparkSession.createDataFrame(jvm.java.util.ArrayList(), schema), spark)


def run_each(spark: SparkSession, items: list[str], fn: Callable[[str], object]) -> None:
    """`fn(item)` for every item, one task per item on the executors, on both kinds of session: a
    DataFrame of the items run through `mapInArrow` (an RDD's `parallelize(...).foreach` is classic only)."""
    if not items:
        return

    def each(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        n = 0
        for batch in batches:
            for item in batch.column(0).to_pylist():
                fn(item)
                n += 1
        yield pa.RecordBatch.from_pydict({"n": [n]}, schema=pa.schema([("n", pa.int64())]))

    frame = spark.createDataFrame(pa.table({"item": pa.array(items, pa.string())}))
    frame.repartition(len(items)).mapInArrow(each, "n bigint").collect()
