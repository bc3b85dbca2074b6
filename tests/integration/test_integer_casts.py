"""A cast to an integer type whose value does not fit is NULL (RisingWave's non-strict answer for
PostgreSQL's "smallint out of range"), never Spark's wrapped value (100000 as smallint is -31072),
in an MV (small epochs in Arrow, big ones in Spark) and in a query alike."""

from __future__ import annotations

import pytest

CASTS = ("CAST(k * 1000 AS smallint) AS s, CAST(k * 100000000 AS int) AS i, CAST(k * 1000.4 AS smallint) AS d, "
         "CAST(k * 1e9 AS int) AS f, CAST(CAST(k * 100000 AS varchar) AS smallint) AS t")
WANT = {1: (1000, 100000000, 1000, 1000000000, None), 2: (2000, 200000000, 2001, 2000000000, None),
        100: (None, None, None, None, None)}


@pytest.mark.parametrize("big", [False, True], ids=["arrow", "spark"])
def test_an_integer_cast_out_of_range_is_null(session, big: bool) -> None:
    s = session
    if big:
        s.sql("SET big_epoch_rows = 0")
    s.sql("CREATE TABLE n (k int PRIMARY KEY)")
    s.sql(f"CREATE MATERIALIZED VIEW casts AS SELECT k, {CASTS} FROM n")
    s.sql("INSERT INTO n VALUES (1), (2), (100)")
    s.flush()
    got = {r["k"]: tuple(r[c] for c in "sidft") for r in s.table("casts").collect()}
    assert got == WANT
    queried = s.sql(f"SELECT k, {CASTS} FROM n")
    assert queried is not None
    assert {r["k"]: tuple(r[c] for c in "sidft") for r in queried.collect()} == WANT
