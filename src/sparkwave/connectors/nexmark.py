"""The Nexmark connector: the person / auction / bid streams of the standard streaming benchmark,
generated deterministically from a seed (`nexmark.table.type`, `nexmark.seed`,
`nexmark.rows.per.second`, `nexmark.min.event.gap.in.ns`).

Events are numbered globally; of every 50, one is a person, three are auctions and 46 are bids,
as in the Nexmark generator. A table's offset counts its own kind of event, and event `n`'s time is
the base time plus `n` event gaps, so all three tables describe one consistent event stream."""

from __future__ import annotations

import functools

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sparkwave.connectors.base import Connector
from sparkwave.connectors.options import MAX_GENERATOR_RATE, Options, choice, integer, max_rows_per_epoch, rate_limit
from sparkwave.core.errors import SqlError
from sparkwave.core.local_frames import offsets
from sparkwave.core.schema import Schema

FIRST_ID = 1000
BASE_TIME_S = 1_436_918_400  # 2015-07-15 00:00:00 UTC, Nexmark's base time
PROPORTION = {"person": (0, 1), "auction": (1, 3), "bid": (4, 46)}  # (first slot, slots per 50 events)

COLUMNS = {
    "person": {"id": "bigint", "name": "varchar", "email_address": "varchar", "credit_card": "varchar",
               "city": "varchar", "state": "varchar", "date_time": "timestamp", "extra": "varchar"},
    "auction": {"id": "bigint", "item_name": "varchar", "description": "varchar", "initial_bid": "bigint",
                "reserve": "bigint", "date_time": "timestamp", "expires": "timestamp", "seller": "bigint",
                "category": "bigint", "extra": "varchar"},
    "bid": {"auction": "bigint", "bidder": "bigint", "price": "bigint", "channel": "varchar", "url": "varchar",
            "date_time": "timestamp", "extra": "varchar"},
}

_FIRST = ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"]
_LAST = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"]
_CITY = ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent"]
_STATE = ["AZ", "CA", "ID", "OR", "WA", "WY"]
_CHANNEL = ["Google", "Facebook", "Baidu", "Apple"]


def _pick(options: list[str], h: SparkColumn) -> SparkColumn:
    return F.element_at(F.array(*[F.lit(o) for o in options]), (F.pmod(h, F.lit(len(options))) + 1).cast("int"))


class Nexmark(Connector):
    rate_option = "nexmark.rows.per.second"
    OPTIONS = Options(
        "nexmark",
        choice("connector", "nexmark"),
        choice("nexmark.table.type", *COLUMNS),
        integer("nexmark.rows.per.second", 1, MAX_GENERATOR_RATE, 1000),
        integer("nexmark.seed", -(2**63), 2**63 - 1, 0),
        integer("nexmark.min.event.gap.in.ns", 1, 10**9, 100_000),
        rate_limit("source_rate_limit"),
        max_rows_per_epoch(),
    )

    def __init__(self, table: str, schema: Schema, options: dict[str, str]) -> None:
        super().__init__(table, schema, options)
        kind = self.value("nexmark.table.type")
        if kind is None:
            raise SqlError(f"table {table!r}: the nexmark connector needs nexmark.table.type = 'person' | "
                           "'auction' | 'bid'")
        self.kind = kind
        for c in schema.visible:
            if c.name not in COLUMNS[kind]:
                raise SqlError(f"table {table!r}: column {c.name!r} is not a Nexmark {kind} column; "
                               f"available: {', '.join(COLUMNS[kind])}")
        self.seed = self.int_option("nexmark.seed")
        self.gap_ns = self.int_option("nexmark.min.event.gap.in.ns")

    def rows(self, spark: SparkSession, split: str, start: int, end: int) -> DataFrame:
        return offsets(spark, start, end).select(*self._event_number).select(*self._select)

    @functools.cached_property
    def _event_number(self) -> list[SparkColumn]:
        """`_offset` and the event's global number `_n`, from the offsets' `id`."""
        first, per = PROPORTION[self.kind]
        i = F.col("id")
        return [i.alias("_offset"), (F.floor(i / per) * 50 + first + F.pmod(i, F.lit(per))).alias("_n")]

    @functools.cached_property
    def _select(self) -> list[SparkColumn]:
        """The rows' columns from `_offset` and `_n`, built once (each is several Py4J calls)."""
        values = self._columns()
        return [*[(F.col("_offset") if c.name == "_row_id" else values[c.name]).cast(c.type.spark).alias(c.name)
                  for c in self.schema.columns], F.col("_offset").alias("_seq")]

    def _h(self, field: str) -> SparkColumn:
        return F.abs(F.xxhash64(F.lit(self.seed), F.lit(field), F.col("_n")))

    def _columns(self) -> dict[str, SparkColumn]:
        n = F.col("_n")
        ts = F.timestamp_micros((F.lit(BASE_TIME_S * 1_000_000) + n * self.gap_ns / 1000).cast("bigint"))
        persons = F.floor(n / 50) + 1
        auctions = F.floor(n / 50) * 3 + F.least(F.pmod(n, F.lit(50)), F.lit(3))
        auctions = F.greatest(auctions, F.lit(1))
        if self.kind == "person":
            name = F.concat_ws(" ", _pick(_FIRST, self._h("first")), _pick(_LAST, self._h("last")))
            return {
                "id": F.lit(FIRST_ID) + F.floor(n / 50), "name": name,
                "email_address": F.concat(F.substring(F.sha2(n.cast("string"), 256), 1, 7), F.lit("@example.com")),
                "credit_card": F.format_string("%04d %04d %04d %04d", *[F.pmod(self._h(f"cc{i}"), F.lit(10000))
                                                                     for i in range(4)]),
                "city": _pick(_CITY, self._h("city")), "state": _pick(_STATE, self._h("state")),
                "date_time": ts, "extra": F.lit(""),
            }
        if self.kind == "auction":
            initial = F.lit(1) + F.pmod(self._h("initial"), F.lit(1000))
            return {
                "id": F.lit(FIRST_ID) + F.floor(n / 50) * 3 + F.pmod(n, F.lit(50)) - 1,
                "item_name": F.concat(F.lit("item-"), F.pmod(self._h("item"), F.lit(10000)).cast("string")),
                "description": F.concat(F.lit("desc-"), F.pmod(self._h("desc"), F.lit(10000)).cast("string")),
                "initial_bid": initial, "reserve": initial + F.pmod(self._h("reserve"), F.lit(1000)),
                "date_time": ts,
                "expires": ts + F.make_dt_interval(F.lit(0), F.lit(0), F.lit(0),
                                                   (F.pmod(self._h("expires"), F.lit(20)) + 1).cast("decimal(18,6)")),
                "seller": F.lit(FIRST_ID) + F.pmod(self._h("seller"), persons),
                "category": F.lit(10) + F.pmod(self._h("category"), F.lit(5)), "extra": F.lit(""),
            }
        return {
            "auction": F.lit(FIRST_ID) + F.pmod(self._h("auction"), auctions),
            "bidder": F.lit(FIRST_ID) + F.pmod(self._h("bidder"), persons),
            "price": F.lit(1) + F.pmod(self._h("price"), F.lit(100_000)),
            "channel": _pick(_CHANNEL, self._h("channel")),
            "url": F.concat(F.lit("https://www.nexmark.com/"), F.substring(F.sha2(n.cast("string"), 256), 1, 5),
                            F.lit("/item.htm?query=1")),
            "date_time": ts, "extra": F.lit(""),
        }
