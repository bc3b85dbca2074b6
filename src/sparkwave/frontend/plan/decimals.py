"""Exact decimal `sum` and `avg`: the Spark SQL that splits an argument into parts whose sums are
exact, and the SQL that makes the total from the parts' sums."""

from __future__ import annotations

import re


def decimal_scale(type_name: str) -> int | None:
    m = re.fullmatch(r"decimal\(\d+,(\d+)\)", type_name)
    return int(m.group(1)) if m else None


def decimal_parts(arg: str, scale: int) -> tuple[str, str]:
    """The two parts a decimal `sum` / `avg` adds up per row, so that it is exact and the same both
    ways it is evaluated. Added as decimal(38, s), a sum is not: Spark's gives NULL once a partial
    sum leaves decimal(38, s), depending on the order of the rows, and Arrow's wraps around. So an
    argument `x` (`u` unscaled, |u| < 10^38) adds the quotient and remainder of `u` by 10^20 (`DIV`
    and `%` truncate: |q| < 10^18, |r| < 10^20) as integers, whose sums are exact in decimal(38, 0)
    for up to 10^18 rows, retractions included."""
    b = pow10(20 - scale)  # 10^20 of x's last digit
    shift = f"{pow10(scale)}" if scale < 38 else f"{pow10(37)} * 10"  # 10^38 is no decimal(38) literal
    return (f"CAST(({arg}) DIV {b} AS DECIMAL(18,0))", f"CAST((({arg}) % {b}) * {shift} AS DECIMAL(20,0))")


def decimal_sum(hi: str, lo: str, scale: int) -> str:
    """The sum from the sums `hi`, `lo` (Spark SQL) of `decimal_parts`: decimal(38, scale), NULL if it does not fit
    (a value that cannot be stored is NULL, as everywhere in an MV). With the remainders' carry moved
    to the quotients (h, r: |r| < 10^20), h * 10^20 + r is computed as (h - sign h) * 10^20 +
    (r + sign h * 10^20), whose first term fits whenever the total does: an overflow (NULL through
    `try_`) means that the total does not fit. Spark cannot add two decimal(38, s) above scale 6
    without dropping a digit, so the unscaled total becomes the decimal through its text."""
    b = pow10(20)
    h = f"({hi} + ({lo} DIV {b}))"
    sign = f"(CASE WHEN {h} > 0 THEN 1 WHEN {h} < 0 THEN -1 ELSE 0 END)"
    unscaled = f"try_add(try_multiply({h} - {sign}, {b}), ({lo} % {b}) + {sign} * {b})"
    return f"CAST(CONCAT(CAST({unscaled} AS STRING), 'E-{scale}') AS DECIMAL(38,{scale}))"


def decimal_avg(hi: str, lo: str, count: str, scale: int) -> str:
    """The average (double) from the sums of `decimal_parts` and the count of values."""
    return f"(CAST({hi} AS DOUBLE) * 1.0E20 + CAST({lo} AS DOUBLE)) / 1.0E{scale} / {count}"


def exact_aggregate(fn: str, arg: str, scale: int) -> str:
    """`sum(arg)` or `avg(arg)` of a decimal(38, scale) argument in one SELECT (an ad-hoc query), exact
    as an MV's (`decimal_parts`), instead of Spark's order-dependent NULL."""
    hi, lo = decimal_parts(arg, scale)
    if fn == "sum":
        return decimal_sum(f"sum({hi})", f"sum({lo})", scale)
    return decimal_avg(f"sum({hi})", f"sum({lo})", f"count({hi})", scale)


def pow10(e: int) -> str:
    """10^e as an exact Spark decimal literal."""
    return ("1" + "0" * e if e >= 0 else "0." + "0" * (-e - 1) + "1") + "BD"
