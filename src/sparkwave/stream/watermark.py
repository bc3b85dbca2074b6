"""Watermarks: a relation's declaration (`WATERMARK FOR col AS col - INTERVAL ...`), how an
operator's output column derives its watermark from its upstreams' (`derive`, planner metadata
stored with the operators that use it), and its value in an epoch (`Derivation.value`).

A relation's watermark W(e) is committed with epoch e (`core/catalog/watermarks.py`); every row that
reaches an MV after epoch e has its watermarked column at or above W(e), because the table's step
drops the rows below the watermark before the epoch (`stream/watermark_filter.py`). So an operator
whose input column derives from W may delete the state of values below `Derivation.value`. Values
are integers: microseconds since 1970-01-01 UTC for timestamps (Arrow's and Spark's storage), the
value itself for integer columns."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from sparkwave.stream.expressions import column_ref
from sparkwave.stream.operator import Operator

MICROS = 1_000_000
TermKind = Literal["column", "tumble_start", "tumble_end", "hop_start", "hop_end"]


@dataclass(frozen=True)
class Declared:
    """A relation's `WATERMARK FOR column AS column - delay` (delay in the column's units)."""

    column: str
    delay: int
    sql: str = ""

    @staticmethod
    def of(definition: Mapping[str, Any]) -> Declared | None:
        d = definition.get("watermark")
        return None if not d else Declared(d["column"], int(d["delay"]), d.get("sql", ""))

    def to_json(self) -> dict[str, Any]:
        return {"column": self.column, "delay": self.delay, "sql": self.sql}


@dataclass(frozen=True)
class Term:
    """One upstream relation's watermark W, mapped onto a column: W itself, or the bound it puts on
    the TUMBLE/HOP windows of the rows still to come (sizes in microseconds)."""

    kind: TermKind
    relation: str
    size: int = 0
    slide: int = 0

    def value(self, w: int) -> int:
        if self.kind == "column":
            return w
        if self.kind.startswith("tumble"):
            start = (w // self.size) * self.size
        else:  # the first hop window a row at or above W can be in: the first start above W - size
            start = ((w - self.size) // self.slide) * self.slide + self.slide
        return start if self.kind.endswith("start") else start + self.size

    def to_json(self) -> list[Any]:
        return [self.kind, self.relation, self.size, self.slide]


@dataclass(frozen=True)
class Derivation:
    """A column's watermark: the least of its terms' values (one term but for join keys)."""

    terms: tuple[Term, ...]

    def value(self, watermarks: Mapping[str, int | None]) -> int | None:
        """The column's watermark in an epoch, from its upstreams' (None until each has one)."""
        values = [watermarks.get(t.relation) for t in self.terms]
        if not values or any(v is None for v in values):
            return None
        return min(t.value(v) for t, v in zip(self.terms, values, strict=True) if v is not None)

    @property
    def relations(self) -> list[str]:
        return list(dict.fromkeys(t.relation for t in self.terms))

    def to_json(self) -> list[list[Any]]:
        return [t.to_json() for t in self.terms]

    @staticmethod
    def from_json(d: list[list[Any]]) -> Derivation:
        return Derivation(tuple(Term(k, r, int(s), int(sl)) for k, r, s, sl in d))

    def describe(self) -> str:
        """In words, for EXPLAIN and DESCRIBE."""
        return " and ".join(f"{t.relation}'s watermark" if t.kind == "column" else
                            f"the {t.kind.replace('_', ' ')} of {t.relation}'s watermark" for t in self.terms)


def as_ints(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """A watermarked column's values as the integers watermarks are (microseconds for timestamps)."""
    t = column.type
    if pa.types.is_timestamp(t):
        if t.unit != "us":
            column = pc.cast(column, pa.timestamp("us", t.tz))
        return pc.cast(column, pa.int64())
    if pa.types.is_date(t):
        return pc.multiply(pc.cast(pc.cast(column, pa.date32()), pa.int64()), 86_400_000_000)
    return pc.cast(column, pa.int64())


DeclaredOf = Callable[[str], "Declared | None"]


def derive(op: Operator, declared: DeclaredOf) -> dict[str, Derivation]:
    """The output columns of `op` that carry a watermark, each with how it derives from its
    upstreams' (RisingWave's propagation rules: passed-through columns, windows of a watermarked
    time column, group columns, an inner equi-join's keys)."""
    rule = _RULES.get(op.op)
    return rule(op, declared) if rule is not None else {}


def _passed(exprs: list[tuple[str, Any]], below: dict[str, Derivation]) -> dict[str, Derivation]:
    out = {}
    for name, e in exprs:
        ref = column_ref(str(e))
        if ref is not None and ref in below:
            out[name] = below[ref]
    return out


def _scan(op: Any, declared: DeclaredOf) -> dict[str, Derivation]:
    d = declared(op.relation)
    if d is None:
        return {}
    below = {d.column: Derivation((Term("column", op.relation),))}
    w = op.window
    if w is not None and w.time == d.column:
        size, slide = w.size * MICROS, (w.slide or 0) * MICROS
        kind = "tumble" if w.kind == "tumble" else "hop"
        below["window_start"] = Derivation((Term(f"{kind}_start", op.relation, size, slide),))  # type: ignore[arg-type]
        below["window_end"] = Derivation((Term(f"{kind}_end", op.relation, size, slide),))  # type: ignore[arg-type]
    return _passed(op.exprs, below)


def _project(op: Any, declared: DeclaredOf) -> dict[str, Derivation]:
    return _passed(op.exprs, derive(op.input, declared))


def _aggregate(op: Any, declared: DeclaredOf) -> dict[str, Derivation]:
    below = derive(op.input, declared)
    return {g: below[g] for g in op.group if g in below}


def _share(op: Any, declared: DeclaredOf) -> dict[str, Derivation]:
    return derive(op.input, declared)


def _join(op: Any, declared: DeclaredOf) -> dict[str, Derivation]:
    if op.join_type != "inner":
        return {}
    left, right = derive(op.left, declared), derive(op.right, declared)
    out = {}
    names = set(op.names)
    for lk, rk in zip(op.left_keys, op.right_keys, strict=True):
        if lk in left and rk in right:
            both = Derivation(left[lk].terms + right[rk].terms)
            out.update({k: both for k in (lk, rk) if k in names})
    return out


def _eowc(op: Any, declared: DeclaredOf) -> dict[str, Derivation]:
    return derive(op.input, declared)


def _over(op: Any, declared: DeclaredOf) -> dict[str, Derivation]:
    """Window functions: their partition columns (a partition below the watermark gets no row again;
    the ORDER BY column does not carry it: a later row can change an earlier row's outputs)."""
    below = derive(op.input, declared)
    return {p: below[p] for p in op.partition if p in below}


def _project_set(op: Any, declared: DeclaredOf) -> dict[str, Derivation]:
    """A set-returning projection: the input columns it passes on as they are."""
    below = derive(op.input, declared)
    return {n: below[n] for n in op.passed if n in below}


_RULES: dict[str, Callable[[Any, DeclaredOf], dict[str, Derivation]]] = {
    "scan": _scan, "project": _project, "agg": _aggregate, "share": _share, "join": _join, "eowc": _eowc,
    "over": _over, "project_set": _project_set,
}
