"""Connector-fed tables: datagen per-field specs and deterministic Nexmark streams."""

from __future__ import annotations

from tests.oracle import multiset, rows_of


def test_datagen_sequence_and_random_fields_within_bounds(session):
    session.sql("CREATE TABLE g (id int, v int, s varchar, PRIMARY KEY (id)) WITH (connector = 'datagen', "
                "fields.id.kind = 'sequence', fields.id.start = '1', fields.id.end = '25', "
                "fields.v.kind = 'random', fields.v.min = '5', fields.v.max = '9', fields.v.seed = '3', "
                "fields.s.length = '4', datagen.rows.per.second = '10')")
    session.sql("CREATE MATERIALIZED VIEW big AS SELECT id, v FROM g WHERE v >= 8")
    for _ in range(5):
        session.flush()
    rows = rows_of(session.table("g"))
    offset = session.catalog.source_offsets("g")["0"]
    assert sorted(r[0] for r in rows) == list(range(1, offset + 1))
    assert all(5 <= r[1] <= 9 and len(r[2]) == 4 for r in rows)
    assert multiset(rows_of(session.table("big"))) == multiset([(r[0], r[1]) for r in rows if r[1] >= 8])
    while offset < 25:  # the sequence's end bounds the source
        session.flush()
        offset = session.catalog.source_offsets("g")["0"]
    session.flush()
    assert session.catalog.source_offsets("g")["0"] == 25 and session.table("g").count() == 25


def test_nexmark_is_deterministic_and_consistent(session, spark):
    from sparkwave.connectors.nexmark import Nexmark

    session.sql("CREATE TABLE bid (auction bigint, bidder bigint, price bigint, channel varchar, "
                "date_time timestamp) WITH (connector = 'nexmark', nexmark.table.type = 'bid', "
                "nexmark.rows.per.second = '500')")
    session.sql("CREATE MATERIALIZED VIEW pricey AS SELECT auction, price FROM bid WHERE price > 50000")
    session.flush()
    session.flush()
    rel = session.catalog.relation("bid")
    n = session.catalog.source_offsets("bid")["0"]
    assert n > 0
    gen = Nexmark("bid", rel.schema, rel.definition["connector"])
    expected = rows_of(gen.rows(spark, "0", 0, n).drop("_seq", "_row_id"))
    assert multiset(rows_of(session.table("bid"))) == multiset(expected)
    assert all(r[0] >= 1000 and r[1] >= 1000 and 1 <= r[2] <= 100_000 for r in expected)
    assert multiset(rows_of(session.table("pricey"))) == multiset([(r[0], r[2]) for r in expected if r[2] > 50000])
