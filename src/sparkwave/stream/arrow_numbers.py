"""Spark's numeric semantics over Arrow arrays, where Arrow's own kernels differ: comparisons that
order NaN (equal to itself, above every number), integer operations that give NULL instead of
raising (TRY_ADD on overflow, DIV and % by zero) and Java's truncating division, and exact
decimals (Spark's result types for + - *, and CAST with HALF_UP rounding and NULL on overflow).
Decimals are computed on their unscaled integers: numpy int64 when every value is known to fit in
18 digits, Python integers otherwise (exact at any precision)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MAX_PRECISION = 38
_LONG_DIGITS = 18
_INT_DECIMALS = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 20}  # Spark's DecimalType.forType


@dataclass(frozen=True)
class DecimalType:
    precision: int
    scale: int

    @property
    def name(self) -> str:
        return f"decimal({self.precision},{self.scale})"

    @property
    def arrow(self) -> pa.DataType:
        return pa.decimal128(self.precision, self.scale)

    @staticmethod
    def parse(name: str) -> DecimalType:
        m = re.fullmatch(r"decimal\((\d+),(\d+)\)", name)
        assert m, f"BUG: {name!r} is not a decimal type"
        return DecimalType(int(m.group(1)), int(m.group(2)))


def decimal_type(d: Decimal) -> DecimalType | None:
    """A decimal literal's Spark type (Java's BigDecimal precision and scale), None past 38 digits."""
    sign, digits, exponent = d.as_tuple()
    assert isinstance(exponent, int), f"BUG: decimal literal {d} is not finite"
    scale = max(-exponent, 0)
    precision = max(len(digits) + max(exponent, 0), scale, 1)
    return DecimalType(precision, scale) if precision <= MAX_PRECISION else None


# --- comparisons ---------------------------------------------------------------------------------
def spark_compare(op: str, a: pa.Array, b: pa.Array, floats: bool) -> pa.Array:
    """`a op b` as Spark compares (op: eq ne lt le gt ge); floats order NaN above all, equal to NaN."""
    plain = {"eq": pc.equal, "ne": pc.not_equal, "lt": pc.less, "le": pc.less_equal, "gt": pc.greater,
             "ge": pc.greater_equal}
    if not floats:
        return plain[op](a, b)
    na, nb = pc.is_nan(a), pc.is_nan(b)
    eq = pc.or_(pc.equal(a, b), pc.and_(na, nb))
    gt = pc.or_(pc.greater(a, b), pc.and_(na, pc.invert(nb)))
    lt = pc.or_(pc.less(a, b), pc.and_(pc.invert(na), nb))
    return {"eq": eq, "ne": pc.invert(eq), "lt": lt, "le": pc.or_(lt, eq), "gt": gt, "ge": pc.or_(gt, eq)}[op]


# --- integers ------------------------------------------------------------------------------------
def _np(a: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """An integer array's values (NULL as 0) as int64, and its validity."""
    valid = np.asarray(a.is_valid().to_numpy(zero_copy_only=False), bool)
    values = np.asarray(a.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False), np.int64)
    return values, valid


def _back(values: np.ndarray, valid: np.ndarray, t: pa.DataType) -> pa.Array:
    return pa.array(values, pa.int64(), mask=~valid).cast(t, safe=False)


def try_int_op(kind: str, x: pa.Array, y: pa.Array, bits: int) -> pa.Array:
    """TRY_ADD / TRY_SUBTRACT / TRY_MULTIPLY of int (bits 31) or bigint (63): NULL on overflow."""
    a, va = _np(x)
    b, vb = _np(y)
    valid = va & vb
    with np.errstate(over="ignore"):
        if kind == "add":
            r = a + b
            over = ((a ^ r) & (b ^ r)) < 0
        elif kind == "subtract":
            r = a - b
            over = ((a ^ b) & (a ^ r)) < 0
        else:
            r = a * b
            safe_a = np.where(a == 0, 1, a)
            over = (a != 0) & ((np.where((a == -1) & (b == np.iinfo(np.int64).min), 0, r // safe_a) != b)
                                | ((a == -1) & (b == np.iinfo(np.int64).min)))
    if bits < 63:  # the operands were widened: the 64-bit result is exact, the range is the type's
        over = (r < -(2**bits)) | (r >= 2**bits)
    return _back(r, valid & ~over, x.type)


def int_division(x: pa.Array, y: pa.Array) -> pa.Array:
    """Spark's `a DIV b` over bigints: truncated toward zero, NULL for a zero divisor, MIN DIV -1
    wrapping to MIN as Java's does."""
    a, va = _np(x)
    b, vb = _np(y)
    valid = va & vb & (b != 0)
    minus_one = b == -1
    d = np.where((b == 0) | minus_one, 1, b)
    with np.errstate(over="ignore"):
        q = a // d
        q = np.where((q * d != a) & ((a < 0) != (d < 0)), q + 1, q)
        q = np.where(minus_one, -a, q)  # -MIN wraps to MIN
    return _back(q, valid, pa.int64())


def int_remainder(x: pa.Array, y: pa.Array, floats: bool) -> pa.Array:
    """Spark's `a % b`: the sign of the dividend (Java's remainder; fmod for floats), NULL for a
    zero divisor."""
    zero = pc.fill_null(pc.equal(y, 0), False)
    if floats:
        a = np.asarray(x.fill_null(0).to_numpy(zero_copy_only=False))
        b = np.asarray(y.fill_null(1).to_numpy(zero_copy_only=False))
        with np.errstate(all="ignore"):
            r = np.fmod(a, b)
        mask = np.asarray(pc.or_(pc.or_(pc.is_null(x), pc.is_null(y)), zero).to_numpy(zero_copy_only=False), bool)
        return pa.array(r, x.type, mask=mask)
    a, va = _np(x)
    b, vb = _np(y)
    d = np.where((b == 0) | (b == -1), 1, b)
    r = np.where(b == -1, 0, np.fmod(a, d))
    return _back(r, va & vb & (b != 0), x.type)


# --- decimals ------------------------------------------------------------------------------------
def operand_type(t: str, literal: object) -> DecimalType:
    """The decimal type Spark gives an operand of decimal arithmetic: its own, an integer
    literal's fewest digits (`literalPickMinimumPrecision`), an integer column's type's digits."""
    if t.startswith("decimal"):
        return DecimalType.parse(t)
    if isinstance(literal, int):
        return DecimalType(max(len(str(abs(literal))), 1), 0)
    return DecimalType(_INT_DECIMALS[t], 0)


def unscaled(a: pa.Array) -> tuple[list[int] | np.ndarray, np.ndarray]:
    """An integer or decimal array's unscaled values (NULL as 0): int64 when they fit 18 digits,
    else Python integers; and its validity."""
    valid = np.asarray(a.is_valid().to_numpy(zero_copy_only=False), bool)
    t = a.type
    if pa.types.is_integer(t):
        return np.asarray(a.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False), np.int64), valid
    assert pa.types.is_decimal128(t), f"BUG: unscaled values of {t}"
    words = np.frombuffer(a.buffers()[1], np.int64, 2 * (len(a) + a.offset)).reshape(-1, 2)[a.offset:]
    if t.precision <= _LONG_DIGITS or bool(np.all(words[:, 1] == words[:, 0] >> 63)):  # each value fits a long
        return np.where(valid, words[:, 0], 0), valid
    return [(int(hi) << 64) | (int(lo) & 0xFFFFFFFFFFFFFFFF) if ok else 0
            for (lo, hi), ok in zip(words.tolist(), valid.tolist(), strict=True)], valid


def from_unscaled(values: list[int] | np.ndarray, valid: np.ndarray, t: DecimalType) -> pa.Array:
    """Unscaled values (that fit `t`) as a decimal128 array."""
    n = len(valid)
    if isinstance(values, np.ndarray):
        v = np.where(valid, values, 0).astype(np.int64)
        words = np.stack([v, v >> 63], axis=1)
    else:
        words = np.array([[(x & 0xFFFFFFFFFFFFFFFF) - (1 << 64 if x & (1 << 63) else 0), x >> 64] if ok else [0, 0]
                          for x, ok in zip(values, valid.tolist(), strict=True)], np.int64).reshape(n, 2)
    validity = pa.array(valid).buffers()[1] if not valid.all() else None
    return pa.Array.from_buffers(t.arrow, n, [validity, pa.py_buffer(np.ascontiguousarray(words).tobytes())],
                                 null_count=int(n - valid.sum()))


def _fits(values: np.ndarray, factor: int) -> bool:
    """Whether every value times `factor` fits a long (checked in Python integers)."""
    if not len(values):
        return True
    return max(abs(int(values.max())), abs(int(values.min()))) * factor < 2**63


def _rescale(values: list[int] | np.ndarray, by: int) -> list[int] | np.ndarray:
    return values * 10**by if isinstance(values, np.ndarray) else [v * 10**by for v in values]


def cast_decimal(a: pa.Array, t: DecimalType) -> pa.Array:
    """CAST of an integer or decimal array to `t`: HALF_UP to its scale, NULL where it overflows."""
    src_scale = a.type.scale if pa.types.is_decimal(a.type) else 0
    values, valid = unscaled(a)
    if isinstance(values, np.ndarray) and not _fits(values, 10 ** max(t.scale - src_scale, 0)):
        values = values.tolist()
    if t.scale >= src_scale:
        out = _rescale(values, t.scale - src_scale)
    elif isinstance(values, np.ndarray):
        unit = 10 ** (src_scale - t.scale)
        q, rem = np.divmod(np.abs(values), unit)
        out = np.sign(values) * (q + (2 * rem >= unit))
    else:
        unit = 10 ** (src_scale - t.scale)
        out = [(1 if v >= 0 else -1) * (abs(v) // unit + (2 * (abs(v) % unit) >= unit)) for v in values]
    bound = 10**t.precision
    fits = np.abs(out) < bound if isinstance(out, np.ndarray) else np.array([abs(v) < bound for v in out], bool)
    return from_unscaled(out, valid & fits, t)


def _exact_in_longs(kind: str, x: np.ndarray, y: np.ndarray, ta: DecimalType, tb: DecimalType,
                    out: DecimalType) -> bool:
    """Whether `x kind y` (unscaled, rescaled to `out`'s scale for + -) stays within a long."""
    if not len(x):
        return True
    mx, my = (max(abs(int(v.max())), abs(int(v.min()))) for v in (x, y))
    if kind == "multiply":
        return mx * my < 2**63
    return mx * 10 ** (out.scale - ta.scale) + my * 10 ** (out.scale - tb.scale) < 2**63


def decimal_binary(kind: str, a: Any, b: Any, make: Callable[..., Any]) -> Any:
    """`a + b`, `a - b` or `a * b` where one operand is a decimal (the other an integer or decimal),
    with Spark's result type, exact; refused (`arrow_eval.Refused`) where Spark would adjust the
    type past 38 digits or an operand is not an integer or decimal."""
    from sparkwave.stream.arrow_eval import INTS, Refused

    for c in (a, b):
        if not (c.type.startswith("decimal") or c.type in INTS):
            raise Refused(f"decimal arithmetic with {c.type}")
    ta, tb = operand_type(a.type, a.constant if a.is_literal else None), \
        operand_type(b.type, b.constant if b.is_literal else None)
    if kind == "multiply":
        out = DecimalType(ta.precision + tb.precision + 1, ta.scale + tb.scale)
    else:
        scale = max(ta.scale, tb.scale)
        out = DecimalType(max(ta.precision - ta.scale, tb.precision - tb.scale) + scale + 1, scale)
    if out.precision > MAX_PRECISION:
        raise Refused(f"decimal {kind} of {ta.name} and {tb.name}: Spark reduces the scale")
    fa, fb = a.fn, b.fn

    def fn(r: Any) -> pa.Array:
        x, vx = unscaled(fa(r))
        y, vy = unscaled(fb(r))
        longs = isinstance(x, np.ndarray) and isinstance(y, np.ndarray)
        wide = not (longs and _exact_in_longs(kind, x, y, ta, tb, out))  # type: ignore[arg-type]
        sign = -1 if kind == "subtract" else 1
        if wide:  # Python integers: exact at any precision
            xs = _rescale([int(p) for p in x], out.scale - ta.scale if kind != "multiply" else 0)
            ys = _rescale([int(q) for q in y], out.scale - tb.scale if kind != "multiply" else 0)
            v: list[int] | np.ndarray = [p * q for p, q in zip(xs, ys, strict=True)] if kind == "multiply" else \
                [p + sign * q for p, q in zip(xs, ys, strict=True)]
        else:
            assert isinstance(x, np.ndarray) and isinstance(y, np.ndarray)
            v = x * y if kind == "multiply" else \
                x * 10 ** (out.scale - ta.scale) + sign * (y * 10 ** (out.scale - tb.scale))
        return from_unscaled(v, vx & vy, out)
    return make(out.name, fn)
