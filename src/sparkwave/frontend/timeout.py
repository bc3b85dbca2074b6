"""`SET statement_timeout = <ms>`: the Spark jobs a statement starts from the caller's thread carry a
job tag of their own, and a watcher thread cancels the jobs of that tag once the statement has run
longer than the timeout (and every job it starts after that, until it returns). Only the
statement's jobs: the barrier loop, creating jobs and sinks run in threads of their own, untagged."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from sparkwave.core import spark_features
from sparkwave.core.errors import QueryCanceledError

CANCEL_EVERY_S = 0.1  # past the deadline, how soon a job the statement starts next is cancelled too


@contextmanager
def statement_deadline(spark: SparkSession, timeout_ms: int) -> Iterator[None]:
    """Run the body's Spark jobs under `timeout_ms` (0: none); past it, the cancelled job's error
    (or sparkwave's wrapping of it) becomes PostgreSQL's "canceling statement due to statement
    timeout"; any other error (a value that does not fit, say) is raised as it is."""
    if timeout_ms <= 0:
        yield
        return
    tag = f"sparkwave-statement-{uuid.uuid4().hex}"
    done, expired = threading.Event(), threading.Event()

    def watch() -> None:
        if done.wait(timeout_ms / 1000):
            return
        expired.set()
        spark_features.interrupt_tag(spark, tag)
        while not done.wait(CANCEL_EVERY_S):
            spark_features.interrupt_tag(spark, tag)

    spark_features.join_tag(spark, tag)
    watcher = threading.Thread(target=watch, name="sparkwave-statement-timeout", daemon=True)
    watcher.start()
    try:
        yield
    except Exception as e:
        if expired.is_set() and _cancelled(e):
            raise QueryCanceledError(f"canceling statement due to statement timeout ({timeout_ms} ms; "
                                     "SET statement_timeout = 0 for none)") from None
        raise
    finally:
        done.set()
        watcher.join()
        spark_features.leave_tag(spark, tag)


def _cancelled(err: BaseException | None) -> bool:
    """Whether `err`, or an error it was raised from, is Spark's for a cancelled job."""
    while err is not None:
        if "cancel" in str(err).lower():
            return True
        err = err.__cause__ or err.__context__
    return False
