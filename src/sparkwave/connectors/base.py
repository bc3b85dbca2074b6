"""What the epoch loop needs of a connector: splits, how far each may go, and the rows of an
offset range, generated deterministically so that a replayed epoch reads exactly the same rows."""

from __future__ import annotations

from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sparkwave.connectors.options import Options
from sparkwave.core.schema import Column, Schema

K = TypeVar("K", int, str)
ERROR, RAW = "_error", "_raw"  # a bad record's reason and payload, beside its (NULL) columns


class Connector:
    has_bad_records = False  # whether `read` can return rows with `ERROR` set
    holds_rows = False  # whether `read_arrow` gives the rows its plan already read onto the driver
    status: str | None = None  # why the source is not advancing, if it is not
    OPTIONS = Options("?")  # every option the connector takes, declared once
    rate_option = "rows_per_second"  # a generator's rows per second (a declared option)
    computed: frozenset[str] = frozenset()  # the table's generated columns, which the table's step computes

    def __init__(self, table: str, schema: Schema, options: dict[str, str]) -> None:
        self.table = table
        self.schema = schema
        self.options = options
        self.values = self.OPTIONS.check(self.where, options)

    @property
    def where(self) -> str:
        """The relation, as errors name it."""
        return f"table {self.table!r}"

    @staticmethod
    def extra_columns(options: dict[str, str]) -> list[Column]:
        """Columns the connector adds to the table's (message metadata, say)."""
        return []

    @staticmethod
    def table_columns(options: dict[str, str]) -> list[Column] | None:
        """The columns of a CREATE that declares none, where the connector can read them from its
        system (a Delta table's schema); None: they must be declared."""
        return None

    def initial_offsets(self) -> dict[str, int]:
        """Each split's first offset, decided at CREATE (default: 0 for every split)."""
        return {}

    def close(self) -> None:
        """Release what the connector holds (a client of an outside system)."""
        return None

    def release(self, startup: dict[str, int]) -> None:
        """What the relation holds in the outside system, given back at DROP (a replication slot);
        `startup`: the offsets its CREATE recorded (which may say what the CREATE made)."""
        return None

    def exclusive(self) -> list[str]:
        """What in the outside system only one relation may read (a replication slot), named: CREATE
        refuses a relation naming one another relation reads."""
        return []

    def in_background(self) -> Connector:
        """This connector, made for a creating job's reads, which must not slow the pipeline's
        (default: as is)."""
        return self

    def option(self, key: str, default: str | None = None) -> str | None:
        return self.options.get(key, default)

    def value(self, key: str) -> Any:
        """The typed value of a declared option, or its default (None without one)."""
        return self.OPTIONS.value(self.values, key)

    def int_option(self, key: str) -> int:
        value = self.value(key)
        assert isinstance(value, int), f"BUG: option {key} is not an integer option with a default"
        return value

    @property
    def rows_per_second(self) -> int | None:
        """A generator's own rate (None: a source that is not generated)."""
        return self.int_option(self.rate_option) if self.OPTIONS.find(self.rate_option) else None

    @property
    def rate_limit(self) -> int | None:
        """`source_rate_limit`: rows per second (0 pauses), None for unlimited."""
        value = self.value("source_rate_limit")
        return None if value is None else int(value)

    @property
    def splits(self) -> list[str]:
        return ["0"]

    def limit(self, split: str) -> int | None:
        """The offset at which a split is exhausted, if it is bounded."""
        return None

    def paused(self) -> bool:
        """Whether `source_rate_limit = 0` holds the source (and says so in `status`)."""
        if self.rate_limit == 0:
            self.status = "paused (source_rate_limit = 0)"
            return True
        if self.status == "paused (source_rate_limit = 0)":
            self.status = None
        return False

    def budget(self, elapsed_ms: float) -> int:
        """How many rows the next epoch takes at most: the generator's rate and `source_rate_limit`
        for the time elapsed (at least one row), never more than `max.rows.per.epoch`, however high
        the rate: an epoch's work stays bounded, so DROP and reopen never wait for a huge one."""
        budget = self.int_option("max.rows.per.epoch")
        for rate in (self.rows_per_second, self.rate_limit):
            if rate is not None:
                budget = min(budget, max(1, int(rate * elapsed_ms / 1000)))
        return budget

    def plan(self, committed: dict[str, int], elapsed_ms: float) -> dict[str, list[int]]:
        """The offset range `[start, end)` of each split the next epoch reads, from the committed
        offsets: a generated source produces `budget` rows, spread over its splits."""
        if self.paused():
            return {}
        budget = self.budget(elapsed_ms)
        starts = {split: committed.get(split, 0) for split in self.splits}
        backlog = {}
        for split, start in starts.items():
            limit = self.limit(split)
            backlog[split] = budget if limit is None else max(0, min(budget, limit - start))
        take = split_budget(budget, backlog, turn=sum(starts.values()))
        return {split: [starts[split], starts[split] + n] for split, n in take.items() if n > 0}

    def planned_rows(self, ranges: dict[str, list[int]]) -> int:
        """The rows `ranges` hold (an epoch's rows in): its offsets count rows, unless a connector says."""
        return sum(end - start for start, end in ranges.values())

    def read(self, spark: SparkSession, ranges: dict[str, list[int]]) -> DataFrame:
        """The rows of the planned ranges as intents: `rows` plus `_op` (an upsert). A connector
        that can meet bad records adds `_error` and `_raw` (kept out of the table, listed by
        `SHOW SOURCE ERRORS`)."""
        parts = [self.rows(spark, split, start, end) for split, (start, end) in ranges.items()]
        out = parts[0]
        for p in parts[1:]:
            out = out.unionByName(p)
        return out.withColumn("_op", F.lit(4).cast("tinyint"))

    def read_arrow(self, ranges: dict[str, list[int]]) -> pa.RecordBatch | None:
        """`read`'s intents as the Arrow batch the connector already holds on the driver (None: it holds
        none, and `read` is used): the table step then takes them without a round trip through Spark."""
        return None

    def absent_keys(self, ranges: dict[str, list[int]]) -> tuple[int, int] | pa.Array | None:
        """Keys of the table's single-column key of which the table holds no row before the epoch of
        `ranges` (a CDC backfill's chunk): a range `[lo, hi)` of an integer key, or the values. Their
        intents need no old-row lookup."""
        return None

    def positions(self, seq: pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
        """The split (as a string) and offset of each row `read` returned, from its `_seq`."""
        raise NotImplementedError

    def rows(self, spark: SparkSession, split: str, start: int, end: int) -> DataFrame:
        """The rows of offsets `[start, end)` of `split`: every column of the schema, plus `_seq`,
        which orders them within the epoch (what the default `read` unions)."""
        raise NotImplementedError


def split_budget(budget: int, backlog: dict[K, int], turn: int = 0) -> dict[K, int]:
    """How many of each split's `backlog` rows an epoch of `budget` rows takes: an equal share
    each, what a short split leaves spread over those with more, so an epoch takes its whole
    budget whenever the backlog holds it and never more. The rows that do not divide evenly go
    round the splits from the one `turn` picks (the plan passes how far the source has read):
    a budget smaller than the splits, a rate limit's, serves each in turn."""
    take = dict.fromkeys(backlog, 0)
    left = budget
    while left > 0 and (room := [p for p in sorted(backlog) if take[p] < backlog[p]]):
        each, extra = divmod(left, len(room))
        first = turn % len(room)
        for i, p in enumerate(room[first:] + room[:first]):
            got = min(each + (1 if i < extra else 0), backlog[p] - take[p])
            take[p] += got
            left -= got
    return take
