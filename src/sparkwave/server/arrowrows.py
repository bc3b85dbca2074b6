"""DataRow messages of a pyarrow.RecordBatch built with numpy, without a Python object per value,
for the columns whose wire bytes Arrow holds or numpy computes exactly: integers, floats, booleans,
dates, timestamps and timestamptz (any session zone) in text and binary, numerics in text, strings
and binary values (raw bytes). Text from Arrow's casts is taken only where it is PostgreSQL's
(floats in fixed notation, decimals without an exponent); the other values of such a column, and
every other column (intervals, arrays, jsonb, numeric binary), go through the per-value encoder,
and the rows are joined by Arrow all the same. The bytes are identical to `pgtypes.encode_batch`
on the same values (tests/unit/test_pgwire_arrow.py checks it)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkwave.server import pgtypes

SLICE_ROWS = 16_384  # rows assembled at once: bounds the index arrays (8 bytes per output byte)

# (n, w) uint8 rows of fixed width, or (data, starts, lens): row i's bytes are data[starts[i]:starts[i]+lens[i]]
Piece = np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray]

_EPOCH_2000_DAYS = 10_957  # 1970-01-01 to 2000-01-01, PostgreSQL's epoch
_EPOCH_2000_MICROS = _EPOCH_2000_DAYS * 86_400_000_000
_BINARY_NUMBERS = {pgtypes._q: ">i8", pgtypes._i: ">i4", pgtypes._h: ">i2", pgtypes._d: ">f8", pgtypes._f: ">f4"}


def encode_record_batch(encoders: Sequence[pgtypes.Encoder], batch: pa.RecordBatch) -> tuple[bytes, int]:
    """All DataRow messages of `batch` (columns in the order of `encoders`), and its row count."""
    n = batch.num_rows
    if len(batch.columns) != len(encoders):
        raise ValueError(f"a batch has {len(batch.columns)} columns where the result has {len(encoders)}")
    parts = []
    for start in range(0, n, SLICE_ROWS):
        part = batch.slice(start, SLICE_ROWS)
        parts.append(_assemble(part.num_rows, [p for enc, col in zip(encoders, part.columns, strict=True)
                                               for p in _pieces(enc, col)], len(encoders)))
    return b"".join(parts), n


def _nulls(col: pa.Array) -> np.ndarray | None:
    if col.null_count == 0:
        return None
    return np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def _prefix(lens: np.ndarray, nulls: np.ndarray | None) -> np.ndarray:
    """The 4-byte length words of a column (-1 for NULL) as (n, 4) bytes."""
    words = lens.astype(">i4")
    if nulls is not None:
        words[nulls] = -1
    return words.view(np.uint8).reshape(-1, 4)


def _var(col: pa.Array, nulls: np.ndarray | None) -> list[Piece]:
    """A string or binary array's own offsets and data: length words, then the bytes."""
    large = pa.types.is_large_string(col.type) or pa.types.is_large_binary(col.type)
    width = np.dtype(np.int64 if large else np.int32)
    _, off_buf, data_buf = col.buffers()[:3]
    offsets = np.frombuffer(off_buf, dtype=width)[col.offset:col.offset + len(col) + 1].astype(np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    lens = np.diff(offsets)
    if nulls is not None:
        lens[nulls] = 0
    return [_prefix(lens, nulls), (data, offsets[:-1], lens)]


def _fixed(values: np.ndarray, nulls: np.ndarray | None) -> list[Piece]:
    """Fixed-width values (already big-endian): NULLs take no bytes, so they are variable pieces."""
    n, width = len(values), values.dtype.itemsize
    raw = values.view(np.uint8)
    if nulls is None:
        return [_prefix(np.full(n, width, np.int64), None), raw.reshape(n, width)]
    return _var_rows(raw.reshape(n, width), np.full(n, width, np.int64), nulls)


def _pieces(enc: pgtypes.Encoder, col: pa.Array) -> list[Piece]:
    t = col.type
    nulls = _nulls(col)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if enc is pgtypes._int_text and pa.types.is_integer(t):
        return _var(pc.cast(col, pa.string()), nulls)
    if (enc is pgtypes._text and (pa.types.is_string(t) or pa.types.is_large_string(t))) or \
            (enc is bytes and (pa.types.is_binary(t) or pa.types.is_large_binary(t))):
        return _var(col, nulls)
    if enc in _BINARY_NUMBERS and (pa.types.is_integer(t) or pa.types.is_floating(t)):
        kind = _BINARY_NUMBERS[enc]
        values = col.fill_null(0).to_numpy(zero_copy_only=False)
        if kind[1] == "i" and not pa.types.is_integer(t):
            return _python(enc, col)
        return _fixed(values.astype(kind), nulls)
    if enc in (pgtypes._timestamp_binary, pgtypes._timestamptz_binary) and pa.types.is_timestamp(t):
        micros = pc.cast(col, pa.timestamp("us", tz=t.tz)).cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        return _fixed((micros - _EPOCH_2000_MICROS).astype(">i8"), nulls)
    if enc is pgtypes._date_binary and pa.types.is_date32(t):
        days = col.cast(pa.int32()).fill_null(0).to_numpy(zero_copy_only=False)
        return _fixed((days - _EPOCH_2000_DAYS).astype(">i4"), nulls)
    if (enc is pgtypes.float8_text and pa.types.is_float64(t)) or \
            (enc is pgtypes.float4_text and pa.types.is_float32(t)):
        return _var(_float_text(enc, col), nulls)
    if isinstance(enc, pgtypes.NumericText) and pa.types.is_decimal(t) and t.scale == enc.scale:
        strings = pc.cast(col, pa.string())  # the unscaled digits at the scale, but 1E-10 for small ones
        return _var(_patched(enc, col, strings, pc.match_substring(strings, "E")), nulls)
    text = _datetime_text(enc, col)
    if text is not None:
        return text
    if enc in (pgtypes._bool_text, pgtypes._bool_binary) and pa.types.is_boolean(t):
        flags = col.fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
        on, off = (ord("t"), ord("f")) if enc is pgtypes._bool_text else (1, 0)
        return _fixed(np.where(flags, on, off).astype(np.uint8), nulls)
    return _python(enc, col)


def _float_text(enc: pgtypes.Encoder, col: pa.Array) -> pa.Array:
    """float8out/float4out of a whole column. Arrow's cast prints the same shortest round-trip digits
    as Python's repr (numpy's for float32), and where it prints them in fixed notation and PostgreSQL
    does too (-4 <= exponent < 15, or < 6 for real) the text is the same; every other value (exponent
    forms, infinities, NaN) takes the per-value encoder."""
    single = enc is pgtypes.float4_text
    kind = np.float32 if single else np.float64
    strings = pc.cast(col, pa.string())
    magnitude = np.abs(col.fill_null(0).to_numpy(zero_copy_only=False).astype(kind, copy=False))
    plain = ((magnitude >= kind(1e-4)) & (magnitude < kind(1e6 if single else 1e15))) | (magnitude == 0)
    others = pc.or_(pc.match_substring(strings, "e"), pa.array(~plain))
    return _patched(enc, col, strings, others)


def _patched(enc: pgtypes.Encoder, col: pa.Array, strings: pa.Array, others: pa.Array) -> pa.Array:
    """`strings` with the values where `others` is true (NULLs aside) printed by the per-value encoder."""
    redo = np.asarray(others.fill_null(False).to_numpy(zero_copy_only=False), bool)
    if col.null_count:
        redo &= ~np.asarray(col.is_null().to_numpy(zero_copy_only=False), bool)
    if not redo.any():
        return strings
    fixes = [enc(v) for v in col.filter(pa.array(redo)).to_pylist()]
    return pc.replace_with_mask(strings, pa.array(redo), pa.array(fixes, pa.binary()).cast(pa.string()))


_DIGITS = np.frombuffer(b"0123456789", dtype=np.uint8)


def _digits(values: np.ndarray, width: int) -> np.ndarray:
    """(n, width) ASCII decimal digits of non-negative integers, zero-padded."""
    powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    return _DIGITS[(values[:, None] // powers) % 10]


def _datetime_text(enc: pgtypes.Encoder, col: pa.Array) -> list[Piece] | None:
    """date, timestamp and timestamptz text by integer arithmetic (years 1-9999, the range the
    per-value encoders take: any other value is left to them: None)."""
    t = col.type
    if enc is pgtypes._date_text and pa.types.is_date32(t):
        days = col.cast(pa.int32()).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        micros, suffix = np.clip(days, -10 ** 6, 10 ** 7) * 86_400_000_000, b""
    elif pa.types.is_timestamp(t) and t.unit in ("s", "ms", "us") and (
            (enc is pgtypes._timestamp_text and t.tz is None)
            or isinstance(enc, pgtypes.TimestamptzText)):
        micros = col.cast(pa.timestamp("us", tz=t.tz)).cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        suffix = b"" if enc is pgtypes._timestamp_text else b"+00"
    else:
        return None
    if len(micros) and (micros.min() < _MIN_MICROS or micros.max() > _MAX_MICROS):
        return None
    nulls = _nulls(col)
    n = len(micros)
    if isinstance(enc, pgtypes.TimestamptzText) and enc.zone is not UTC:
        zoned = _zone_offsets(enc.zone, micros)
        if zoned is None:
            return None
        offsets, texts = zoned
        micros = micros + offsets * 1_000_000  # the local wall clock, which must stay in years 1-9999 too
        if n and (micros.min() < _MIN_MICROS or micros.max() > _MAX_MICROS):
            return None
        suffixes, suffix_lens = texts
    else:
        suffixes = np.frombuffer(suffix, dtype=np.uint8)[None, :].repeat(n, axis=0)
        suffix_lens = np.full(n, len(suffix), dtype=np.int64)
    days, clock = np.divmod(micros, 86_400_000_000)
    year, month, day = _civil(days)
    width = 10 if enc is pgtypes._date_text else 26 + suffixes.shape[1]
    out = np.empty((n, width), dtype=np.uint8)
    out[:, 0:4], out[:, 5:7], out[:, 8:10] = _digits(year, 4), _digits(month, 2), _digits(day, 2)
    out[:, [4, 7]] = ord("-")
    if width == 10:
        return _var_rows(out, np.full(n, 10), nulls)
    secs, frac = np.divmod(clock, 1_000_000)
    out[:, 10], out[:, [13, 16]], out[:, 19] = ord(" "), ord(":"), ord(".")
    out[:, 11:13], out[:, 14:16], out[:, 17:19] = _digits(secs // 3600, 2), _digits(secs // 60 % 60, 2), \
        _digits(secs % 60, 2)
    out[:, 20:26] = _digits(frac, 6)
    zeros = np.zeros(n, dtype=np.int64)  # trailing zeros of the fraction, which PostgreSQL leaves out
    for k in range(1, 7):
        zeros += (frac % 10 ** k == 0)
    lens = np.where(frac == 0, 19, 26 - zeros)
    rows = np.arange(n)
    for i in range(suffixes.shape[1]):  # bytes past a row's own suffix are cut by its length
        out[rows, lens + i] = suffixes[:, i]
    return _var_rows(out, lens + suffix_lens, nulls)


_YEARS_PER_BATCH = 40  # a batch with more years than this whose zone offsets are not known yet: per value
# (a year's offsets cost ~10 ms of zoneinfo calls: 8,760 hourly probes)
_HOUR = 3_600_000_000


def _zone_offsets(zone: tzinfo, micros: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]] | None:
    """The UTC offset (seconds) of every instant in `zone`, from each year's transitions as zoneinfo
    gives them, and the offsets' texts as (n, 9) bytes and lengths; None when zoneinfo cannot say
    (an instant whose local time leaves years 1-9999) or the batch spans too many new years."""
    if not len(micros):
        return np.zeros(0, np.int64), (np.zeros((0, 9), np.uint8), np.zeros(0, np.int64))
    years = np.unique(_civil(micros // 86_400_000_000)[0])
    new = [y for y in years.tolist() if (zone, y) not in _year_cache]
    if len(new) > _YEARS_PER_BATCH:  # learn some now, so that later batches of a long span are vectorised
        for y in new[:_YEARS_PER_BATCH]:
            _year_transitions(zone, y)
        return None
    tables = [_year_transitions(zone, y) for y in years.tolist()]
    if any(t is None for t in tables):
        return None
    starts = np.concatenate([t[0] for t in tables if t is not None])
    offsets = np.concatenate([t[1] for t in tables if t is not None])[np.searchsorted(starts, micros, "right") - 1]
    distinct, which = np.unique(offsets, return_inverse=True)
    texts = [pgtypes._offset_text(int(o)).encode() for o in distinct.tolist()]
    table = np.zeros((len(texts), 9), dtype=np.uint8)
    for i, text in enumerate(texts):
        table[i, :len(text)] = np.frombuffer(text, dtype=np.uint8)
    return offsets, (table[which], np.array([len(x) for x in texts], dtype=np.int64)[which])


_year_cache: dict[tuple[tzinfo, int], tuple[np.ndarray, np.ndarray] | None] = {}


def _year_transitions(zone: tzinfo, year: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(instants in UTC micros, offsets in seconds from each): the year's first instant and every change
    of offset in it, found by probing each hour and bisecting to the second (tzdb changes offsets at
    whole seconds, never twice within an hour)."""
    key = (zone, year)
    if key in _year_cache:
        return _year_cache[key]
    if len(_year_cache) > 4096:
        _year_cache.clear()
    table = _year_cache[key] = _probe_year(zone, year)
    return table


def _offset_at(zone: tzinfo, second: int) -> int:
    off = (_EPOCH + timedelta(seconds=second)).astimezone(zone).utcoffset()
    return int(off.total_seconds()) if off is not None else 0


def _probe_year(zone: tzinfo, year: int) -> tuple[np.ndarray, np.ndarray] | None:
    begin = int((datetime(year, 1, 1, tzinfo=UTC) - _EPOCH).total_seconds())
    end = begin + (date(year, 12, 31) - date(year, 1, 1)).days * 86400 + 86400
    try:
        probes = list(range(begin, end, 3600)) + [end - 1]
        offsets = [_offset_at(zone, p) for p in probes]
        starts, values = [begin], [offsets[0]]
        for i in range(len(probes) - 1):
            lo, hi, a, b = probes[i], probes[i + 1], offsets[i], offsets[i + 1]
            if a == b:
                continue
            while hi - lo > 1:  # offset(lo) == a, offset(hi) == b: the change is at hi
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if _offset_at(zone, mid) == a else (lo, mid)
            starts.append(hi)
            values.append(b)
    except (OverflowError, ValueError):
        return None
    return np.array(starts, dtype=np.int64) * 1_000_000, np.array(values, dtype=np.int64)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


_MIN_MICROS = -62_135_596_800_000_000  # 0001-01-01
_MAX_MICROS = 253_402_300_799_999_999  # 9999-12-31 23:59:59.999999


def _civil(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Year, month, day of days since 1970-01-01 (proleptic Gregorian; H. Hinnant's civil_from_days)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = np.where(mp < 10, mp + 3, mp - 9)
    return yoe + era * 400 + (month <= 2), month, day


def _var_rows(out: np.ndarray, lens: np.ndarray, nulls: np.ndarray | None) -> list[Piece]:
    """Rows of a (n, w) matrix, each its first lens[i] bytes (none for a NULL), as one piece of data."""
    lens = lens.astype(np.int64)
    if nulls is not None:
        lens[nulls] = 0
    data = out[np.arange(out.shape[1]) < lens[:, None]]
    return [_prefix(lens, nulls), (data, np.cumsum(lens) - lens, lens)]


def _python(enc: pgtypes.Encoder, col: pa.Array) -> list[Piece]:
    values: list[Any] = col.to_pylist()
    if pa.types.is_map(col.type):  # Arrow gives a map as a list of pairs
        values = [None if v is None else dict(v) for v in values]
    framed = pgtypes._framed_column(enc, values)
    data = np.frombuffer(b"".join(framed), dtype=np.uint8)
    lens = np.fromiter(map(len, framed), dtype=np.int64, count=len(framed))
    return [(data, np.cumsum(lens) - lens, lens)]


def _assemble(n: int, pieces: list[Piece], ncols: int) -> bytes:
    """The rows: each piece as an Arrow binary column, joined row by row by Arrow (no NULLs, so the
    joined column's data buffer is the messages back to back)."""
    if n == 0:
        return b""
    row_len = np.full(n, 7, dtype=np.int64)
    for p in pieces:
        row_len += p.shape[1] if isinstance(p, np.ndarray) else p[2]
    header = np.empty((n, 7), dtype=np.uint8)
    header[:, 0] = ord("D")
    header[:, 1:5] = (row_len - 1).astype(">i4").view(np.uint8).reshape(n, 4)
    header[:, 5:7] = np.array([ncols], dtype=">i2").view(np.uint8)
    joined = pc.binary_join_element_wise(*map(_binary, [header, *pieces]), _EMPTY)
    data = joined.buffers()[2]  # a fresh array: offset 0, its first value at byte 0
    return data.slice(0, int(row_len.sum())).to_pybytes()


_EMPTY = pa.scalar(b"", pa.large_binary())


def _binary(piece: Piece) -> pa.Array:
    """A piece as a large_binary Arrow array without NULLs."""
    if isinstance(piece, np.ndarray):
        n, width = piece.shape
        rows = pa.py_buffer(np.ascontiguousarray(piece))
        return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), n, [None, rows]).cast(pa.large_binary())
    data, starts, lens = piece
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    if len(lens) and not np.array_equal(starts - starts[0], offsets[:-1]):  # gaps between values (NULLs' bytes)
        data = data[np.repeat(starts - offsets[:-1], lens) + np.arange(offsets[-1], dtype=np.int64)]
    elif len(lens):
        offsets += starts[0]
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(lens), [None, pa.py_buffer(offsets),
                                                                           pa.py_buffer(np.ascontiguousarray(data))])
