"""SHOW JOBS' next key of a CDC backfill, from the table's splits alone: integers as they are, a
uuid (declared varchar) from its two parts, and a key read in one chunk (a uuid beside a timestamp:
one split a column) shown as its splits, never an error."""

from __future__ import annotations

from sparkwave.connectors.postgres_cdc_backfill import uuid_parts
from sparkwave.connectors.postgres_cdc_position import text_splits
from sparkwave.core.catalog import Relation
from sparkwave.core.schema import Column, Schema, parse_type
from sparkwave.meta.cdc_progress import _at_key, _key_values


def _rel(*columns: tuple[str, str], key: tuple[str, ...]) -> Relation:
    return Relation("t", "table", Schema(tuple(Column(n, parse_type(t)) for n, t in columns), key), {}, 0, "created")


def test_integer_uuid_and_one_chunk_keys() -> None:
    u = "80000000-0000-0000-7fff-ffffffffffff"
    hi, lo = uuid_parts(u)
    assert _key_values(_rel(("k", "bigint"), ("v", "int"), key=("k",)), {"backfill": 7}) == [7]
    assert _key_values(_rel(("id", "varchar"), key=("id",)), {"backfill": hi, "backfill.1": lo}) == [u]
    assert _key_values(_rel(("a", "int"), ("id", "varchar"), key=("a", "id")),
                       {"backfill": 3, "backfill.1": hi, "backfill.2": lo}) == [3, u]
    assert _key_values(_rel(("id", "varchar"), ("ts", "timestamptz"), key=("id", "ts")),
                       {"backfill": 0, "backfill.1": 0}) == [0, 0]
    assert _key_values(_rel(("id", "varchar"), ("n", "int"), key=("id", "n")), {"backfill": 0}) == [0, 0]


def test_a_key_postgresql_orders_is_shown_as_the_last_key_read() -> None:
    rel = _rel(("name", "varchar"), ("v", "int"), key=("name",))
    assert _at_key(rel, text_splits(())) == "from the first key"
    assert _at_key(rel, text_splits(("O'Brien",))) == "after name 'O''Brien'"
    both = _rel(("name", "varchar"), ("n", "decimal(10,2)"), key=("name", "n"))
    assert _at_key(both, text_splits(("a", "1.50"))) == "after (name, n) ('a', '1.50')"
    assert _at_key(_rel(("k", "bigint"), key=("k",)), {"backfill": 7}) == "from k 7"
    assert "do not hold a key" in _at_key(rel, {"backfill": 0, "backfill.t0": 3, "backfill.t1": 1})
