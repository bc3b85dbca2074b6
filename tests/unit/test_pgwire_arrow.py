"""`server/arrowrows.py` against the per-value encoders of `server/pgtypes.py`: the DataRow bytes of a
pyarrow.RecordBatch must be those of its rows, byte for byte, for every type, NULLs, random float bit
patterns, timestamps across the whole supported range, in text and binary. No Spark session, no server."""

from __future__ import annotations

import random
import struct
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import types as T

from sparkwave.server import pgtypes
from sparkwave.server.arrowrows import encode_record_batch


def _rows(batch: pa.RecordBatch) -> list[tuple[Any, ...]]:
    return [tuple(dict(v) if isinstance(v, list) and v and isinstance(v[0], tuple) else v for v in r.values())
            for r in batch.to_pylist()]  # Arrow gives a map as a list of pairs


def _assert_same(cols: list[tuple[pa.Array, T.DataType]], zone: str = "UTC") -> None:
    batch = pa.RecordBatch.from_arrays([c for c, _ in cols], names=[f"c{i}" for i in range(len(cols))])
    n = batch.num_rows
    for part in (batch, batch.slice(3, max(n - 5, 0)), batch.slice(max(n - 1, 0), 1)):
        rows = _rows(part)
        for fmt in (0, 1):
            encoders = [pgtypes.column_encoder(t, fmt, pgtypes.session_zone(zone)) for _, t in cols]
            got, count = encode_record_batch(encoders, part)
            want, want_count = pgtypes.encode_batch(encoders, rows)
            if got != want:  # name the first differing value rather than two megabytes
                for (c, t), enc in zip(cols, encoders, strict=True):
                    one = pa.RecordBatch.from_arrays([part.column(cols.index((c, t)))], names=["c"])
                    assert encode_record_batch([enc], one) == pgtypes.encode_batch([enc], _rows(one)), (t, fmt, zone)
            assert (got, count) == (want, want_count)


def _float_bits(rng: random.Random, n: int, single: bool) -> list[float | None]:
    out: list[float | None] = []
    special = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-4, 1e15, 1e6, 5e-324, 1.7976931348623157e308,
               2.0 ** 53, 2.0 ** 24, 9.999999999999999e14, 123456789012345.0, 1e-5, 0.1, 1.0]
    for _ in range(n):
        r = rng.random()
        if r < 0.1:
            out.append(None)
        elif r < 0.15:
            out.append(rng.choice(special[:9] if single else special))
        elif r < 0.55:  # any bit pattern
            out.append(struct.unpack("<f", struct.pack("<I", rng.getrandbits(32)))[0] if single
                       else struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0])
        else:  # ordinary magnitudes around both notations' borders
            v = rng.uniform(-1, 1) * 10.0 ** rng.randint(-8, 18)
            out.append(round(v, rng.randint(0, 6)) if rng.random() < 0.3 else v)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_floats_as_the_per_value_encoders(seed: int) -> None:
    rng = random.Random(seed)
    n = 20_000
    doubles, singles = _float_bits(rng, n, False), _float_bits(rng, n, True)
    _assert_same([(pa.array(doubles, pa.float64()), T.DoubleType()),
                  (pa.array(np.array([np.nan if v is None else v for v in singles], np.float32),
                            mask=np.array([v is None for v in singles])), T.FloatType())])


def test_floats_without_nulls_and_all_plain() -> None:
    rng = np.random.default_rng(3)
    _assert_same([(pa.array(rng.random(50_000)), T.DoubleType()),
                  (pa.array(rng.normal(0, 1e3, 50_000).astype(np.float32)), T.FloatType())])


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata", "America/New_York"])
def test_dates_and_timestamps_as_the_per_value_encoders(zone: str) -> None:
    rng = random.Random(zone)
    n = 20_000
    lo, hi = -62_135_596_800_000_000, 253_402_300_799_999_999
    if zone != "UTC":  # the per-value encoder's datetime cannot leave years 1-9999 in another zone
        lo, hi = lo + 86_400_000_000, hi - 86_400_000_000

    def micros() -> int | None:
        r = rng.random()
        if r < 0.1:
            return None
        if r < 0.2:
            return rng.choice([lo, hi, 0, -1, 1, 951_782_400_000_000, -2_203_891_200_000_000])
        if r < 0.4:  # whole seconds, whole milliseconds
            return rng.randrange(lo // 10 ** 6, hi // 10 ** 6) * 10 ** 6 + rng.choice([0, rng.randrange(1000) * 1000])
        return rng.randrange(lo, hi + 1)

    ts = [micros() for _ in range(n)]
    days = [None if rng.random() < 0.1 else rng.randrange(-719_162, 2_932_897) for _ in range(n)]
    _assert_same([
        (pa.array(ts, pa.int64()).cast(pa.timestamp("us", tz="UTC")), T.TimestampType()),
        (pa.array(ts, pa.int64()).cast(pa.timestamp("us")), T.TimestampType()),
        (pa.array(ts, pa.int64()).cast(pa.timestamp("us")), T.TimestampNTZType()),
        (pa.array([None if v is None else v // 10 ** 6 for v in ts], pa.int64()).cast(pa.timestamp("s")),
         T.TimestampNTZType()),
        (pa.array([None if v is None else v // 1000 for v in ts], pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
         T.TimestampType()),
        (pa.array(days, pa.int32()).cast(pa.date32()), T.DateType()),
    ], zone)


def test_every_type_with_nulls() -> None:
    rng = random.Random(44)
    n = 3000

    def maybe(v: Any) -> Any:
        return None if rng.random() < 0.2 else v

    _assert_same([
        (pa.array([maybe(rng.randrange(-2 ** 63, 2 ** 63)) for _ in range(n)], pa.int64()), T.LongType()),
        (pa.array([maybe(rng.randrange(-2 ** 15, 2 ** 15)) for _ in range(n)], pa.int16()), T.ShortType()),
        (pa.array([maybe(rng.random() < 0.5) for _ in range(n)], pa.bool_()), T.BooleanType()),
        (pa.array([maybe(rng.uniform(-1e3, 1e3)) for _ in range(n)], pa.float64()), T.DoubleType()),
        (pa.array([maybe("x" * rng.randrange(0, 20) + "é") for _ in range(n)], pa.string()), T.StringType()),
        (pa.array([maybe(bytes([rng.randrange(256)]) * rng.randrange(0, 5)) for _ in range(n)], pa.binary()),
         T.BinaryType()),
        (pa.array([maybe(Decimal(rng.randrange(-10 ** 12, 10 ** 12)).scaleb(-4)) for _ in range(n)],
                  pa.decimal128(18, 4)), T.DecimalType(18, 4)),
        (pa.array([maybe(date(1, 1, 1) + timedelta(days=rng.randrange(3_000_000))) for _ in range(n)], pa.date32()),
         T.DateType()),
        (pa.array([maybe(datetime(1, 1, 1) + timedelta(microseconds=rng.randrange(3 * 10 ** 17))) for _ in range(n)],
                  pa.timestamp("us", tz="UTC")), T.TimestampType()),
        (pa.array([maybe(timedelta(microseconds=rng.randrange(-10 ** 12, 10 ** 12))) for _ in range(n)],
                  pa.duration("us")), T.DayTimeIntervalType()),
        (pa.array([maybe([rng.random(), None]) for _ in range(n)], pa.list_(pa.float64())),
         T.ArrayType(T.DoubleType())),
        (pa.array([maybe([("k", rng.randrange(9))]) for _ in range(n)], pa.map_(pa.string(), pa.int64())),
         T.MapType(T.StringType(), T.LongType())),
    ])


def test_all_null_and_empty_columns() -> None:
    types = [(pa.float64(), T.DoubleType()), (pa.float32(), T.FloatType()), (pa.date32(), T.DateType()),
             (pa.timestamp("us", tz="UTC"), T.TimestampType()), (pa.timestamp("us"), T.TimestampNTZType())]
    _assert_same([(pa.nulls(10, a), t) for a, t in types])
    _assert_same([(pa.array([], a), t) for a, t in types])


def test_decimals_as_the_per_value_encoder() -> None:
    """Arrow prints small values of a large scale as 1E-10: those take the per-value encoder."""
    rng = random.Random(38)
    n = 5000

    def column(precision: int, scale: int) -> tuple[pa.Array, T.DataType]:
        values = [None if rng.random() < 0.1 else
                  Decimal(rng.choice([0, 1, -1, rng.randrange(-10 ** precision + 1, 10 ** precision)])
                          // 10 ** rng.randrange(precision)).scaleb(-scale) for _ in range(n)]
        return pa.array(values, pa.decimal128(precision, scale)), T.DecimalType(precision, scale)

    _assert_same([column(38, 10), column(3, 3), column(5, 0), column(38, 0), column(38, 38), column(10, 2)])


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata", "Australia/Lord_Howe", "Europe/Dublin",
                                  "Pacific/Apia", "America/St_Johns", "Africa/Casablanca", "Europe/Moscow"])
def test_timestamptz_in_a_zone_around_its_transitions(zone: str) -> None:
    """Another session zone: instants on, just before and just after each change of offset (DST,
    LMT, zone redefinitions) in 30 years between 1850 and 2060, and random instants in those years."""
    from sparkwave.server import arrowrows

    rng = random.Random(zone)
    tz = pgtypes.session_zone(zone)
    ts: list[int | None] = []
    for year in rng.sample(range(1850, 2061), 30):
        table = arrowrows._year_transitions(tz, year)
        assert table is not None
        for start in table[0].tolist():
            ts += [start + d for d in (-1_000_000, -1, 0, 1, 999_999, 1_000_000, 3_600_000_000)]
        begin = int((datetime(year, 1, 1, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) * 10 ** 6
        ts += [begin + rng.randrange(365 * 86_400_000_000) for _ in range(200)] + [None]
    col = pa.array(ts, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    assert arrowrows._datetime_text(pgtypes.column_encoder(T.TimestampType(), 0, tz), col) is not None  # no fallback
    _assert_same([(col, T.TimestampType()), (pa.array(ts, pa.int64()).cast(pa.timestamp("us")), T.TimestampType())],
                 zone)
