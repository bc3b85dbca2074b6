"""Spark's `xxhash64` of rows, in numpy: the vnode of a key (`core/chunk.py: vnode_expr`) computed on
the driver without Spark, with Spark's exact bits.

Spark's `XxHash64(cols, seed=42)` folds the columns left to right, each non-NULL value hashed with
the running hash as its seed (a NULL leaves it as it is). Values are hashed by type
(`HashExpression.computeHash`): boolean as the int 1/0; smallint, int and date as a 4-byte int;
bigint and timestamps (microseconds) as an 8-byte long; real as its float bits and double as its
double bits, -0.0 as 0 and every NaN as Java's canonical NaN; a decimal of precision <= 18 as its
unscaled long, a wider one as the big-endian two's-complement bytes of its unscaled value
(`BigInteger.toByteArray`); a string as its UTF-8 bytes and binary as its bytes. The byte hash is
the standard XXH64 (`XXH64.hashUnsafeBytes`).

numpy rather than the `xxhash` package (not a dependency, and its C hash takes one value per
Python call: 2,500 keys cost more in calls than in hashing): fixed-width values hash as one
vectorised pass per column; variable-length ones per group of equal byte length, each a matrix of
bytes hashed column-block by column-block, so a batch costs a few numpy passes per distinct length."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["SEED", "hash_columns", "vnodes"]

SEED = 42
_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
_U = np.uint64


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << _U(r)) | (x >> _U(64 - r))


def _fmix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> _U(33))
    h = h * _P2
    h = h ^ (h >> _U(29))
    h = h * _P3
    return h ^ (h >> _U(32))


def _round(acc: np.ndarray | np.uint64, lane: np.ndarray) -> np.ndarray:
    return _rotl(acc + lane * _P2, 31) * _P1


def hash_int(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """`XXH64.hashInt`: `values` as 4-byte ints (any integer dtype, taken mod 2^32)."""
    h = seed + _P5 + _U(4)
    h = h ^ ((values.astype(np.int64).astype(np.uint64) & _U(0xFFFFFFFF)) * _P1)
    return _fmix(_rotl(h, 23) * _P2 + _P3)


def hash_long(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """`XXH64.hashLong`: `values` as 8-byte longs."""
    h = seed + _P5 + _U(8)
    h = h ^ (_rotl(values.astype(np.int64).view(np.uint64) * _P2, 31) * _P1)
    return _fmix(_rotl(h, 27) * _P1 + _P4)


def hash_bytes(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """`XXH64.hashUnsafeBytes` of `data[starts[i]:starts[i]+lengths[i]]` for each row i."""
    out = np.empty(len(starts), np.uint64)
    for length in np.unique(lengths):
        rows = np.nonzero(lengths == length)[0]
        mat = data[starts[rows][:, None] + np.arange(int(length))[None, :]] if length else \
            np.zeros((len(rows), 0), np.uint8)
        out[rows] = _hash_equal_lengths(mat, seed[rows])
    return out


def _words(mat: np.ndarray, at: int, width: int) -> np.ndarray:
    """The little-endian `width`-byte words of each row of `mat` at byte `at`, as uint64."""
    block = np.ascontiguousarray(mat[:, at:at + width])
    return block.view(np.uint64 if width == 8 else np.uint32).reshape(-1).astype(np.uint64)


def _hash_equal_lengths(mat: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """XXH64 of each row of `mat` (rows of one byte length)."""
    n, length = mat.shape
    at = 0
    if length >= 32:
        v1, v2, v3, v4 = seed + _P1 + _P2, seed + _P2, seed.copy(), seed - _P1
        while at <= length - 32:
            v1 = _round(v1, _words(mat, at, 8))
            v2 = _round(v2, _words(mat, at + 8, 8))
            v3 = _round(v3, _words(mat, at + 16, 8))
            v4 = _round(v4, _words(mat, at + 24, 8))
            at += 32
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        for v in (v1, v2, v3, v4):
            h = (h ^ _round(_U(0), v)) * _P1 + _P4
    else:
        h = seed + _P5
    h = h + _U(length)
    while at + 8 <= length:
        h = _rotl(h ^ _round(_U(0), _words(mat, at, 8)), 27) * _P1 + _P4
        at += 8
    if at + 4 <= length:
        h = _rotl(h ^ (_words(mat, at, 4) * _P1), 23) * _P2 + _P3
        at += 4
    while at < length:
        h = _rotl(h ^ (mat[:, at].astype(np.uint64) * _P5), 11) * _P1
        at += 1
    return _fmix(h)


def _java_bytes(v: int) -> bytes:
    """`BigInteger.toByteArray`: the minimal big-endian two's-complement bytes."""
    return v.to_bytes(((v if v >= 0 else ~v).bit_length() // 8) + 1, "big", signed=True)


def _fold_bytes(chunks: list[bytes | None], seed: np.ndarray) -> np.ndarray:
    """`seed` folded with each row's bytes (None: NULL, unchanged)."""
    valid = np.array([c is not None for c in chunks], bool)
    present = [c for c in chunks if c is not None]
    lengths = np.array([len(c) for c in present], np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if present else lengths
    data = np.frombuffer(b"".join(present), np.uint8)
    out = seed.copy()
    out[valid] = hash_bytes(data, starts, lengths, seed[valid])
    return out


def _fold_utf8(arr: pa.Array, seed: np.ndarray) -> np.ndarray:
    """`seed` folded with a string or binary column's bytes, read from Arrow's buffers."""
    arr = arr.cast(pa.large_binary())
    offsets = np.frombuffer(arr.buffers()[1], np.int64, len(arr) + 1, arr.offset * 8)
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool)
    out = seed.copy()
    starts, lengths = offsets[:-1][valid], np.diff(offsets)[valid]
    out[valid] = hash_bytes(data, starts, lengths, seed[valid])
    return out


def _fold(arr: pa.Array, seed: np.ndarray) -> np.ndarray:
    """`seed` folded with one column's values, as Spark hashes its type."""
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return _fold_utf8(arr, seed)
    if pa.types.is_decimal(t):
        if t.precision > 18:
            words = np.frombuffer(arr.buffers()[1], np.int64, 2 * (len(arr) + arr.offset)).reshape(-1, 2)
            valid = arr.is_valid().to_pylist()
            return _fold_bytes([_java_bytes((int(hi) << 64) | (int(lo) & 0xFFFFFFFFFFFFFFFF)) if ok else None
                                for (lo, hi), ok in zip(words[arr.offset:].tolist(), valid, strict=True)], seed)
        hashed = hash_long(_low_words(arr), seed)
    elif pa.types.is_boolean(t):
        hashed = hash_int(np.asarray(arr.fill_null(False).to_numpy(zero_copy_only=False), np.int64), seed)
    elif pa.types.is_integer(t) and t.bit_width <= 32:
        hashed = hash_int(_ints(arr.cast(pa.int64())), seed)
    elif pa.types.is_date32(t):
        hashed = hash_int(_ints(arr.view(pa.int32())).astype(np.int64), seed)
    elif pa.types.is_int64(t) or pa.types.is_timestamp(t) and t.unit == "us":
        hashed = hash_long(_ints(arr.view(pa.int64())), seed)
    elif pa.types.is_float32(t):
        f = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False), np.float32)
        bits = np.where(np.isnan(f), np.int32(0x7FC00000), np.where(f == 0, np.float32(0), f).view(np.int32))
        hashed = hash_int(bits.astype(np.int64), seed)
    elif pa.types.is_float64(t):
        d = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False), np.float64)
        bits = np.where(np.isnan(d), np.int64(0x7FF8000000000000), np.where(d == 0, 0.0, d).view(np.int64))
        hashed = hash_long(bits, seed)
    else:
        raise TypeError(f"no Spark xxhash64 of type {t}")
    valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool)
    return np.where(valid, hashed, seed)


def _ints(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False))


def _low_words(arr: pa.Array) -> np.ndarray:
    """A decimal128 column's unscaled values as int64 (exact for precision <= 18: the low word)."""
    words = np.frombuffer(arr.buffers()[1], np.int64, 2 * (len(arr) + arr.offset))
    return words.reshape(-1, 2)[arr.offset:, 0].copy()


def hash_columns(columns: list[pa.Array], n: int) -> np.ndarray:
    """Spark's `xxhash64(columns...)` of each of the `n` rows, as int64."""
    seed = np.full(n, SEED, np.uint64)
    for arr in columns:
        seed = _fold(arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr, seed)
    return seed.view(np.int64)


def vnodes(columns: list[pa.Array], n: int, count: int) -> pa.Array:
    """`CAST(pmod(xxhash64(columns...), count) AS SMALLINT)` of each row."""
    return pa.array(np.mod(hash_columns(columns, n), count).astype(np.int16))  # numpy's mod is Java's pmod

