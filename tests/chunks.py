"""Literal Z-sets and an in-memory state store, for Spark-free tests of the stateful Arrow operators.

`zset` reads change sets written like RisingWave's `StreamChunk::from_pretty`, so that a test states
its inputs and expected outputs as text; `MemoryStates` stands in for `StateIO` (no catalog, no
Parquet) with the same visibility rule: lookups see the state as of the last `commit()`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa

from sparkwave.core.schema import Schema

W = "_w"
Row = tuple[Any, ...]


def _value(token: str, t: pa.DataType) -> Any:
    """One token as a Python value of Arrow type `t` (`.` is NULL)."""
    if token == ".":
        return None
    if pa.types.is_integer(t):
        return int(token)
    if pa.types.is_floating(t):
        return float(token)
    if pa.types.is_decimal(t):
        return Decimal(token)
    if pa.types.is_boolean(t):
        return token.lower() in ("t", "true")
    if pa.types.is_date(t):
        return date.fromisoformat(token)
    if pa.types.is_timestamp(t):
        return datetime.fromisoformat(token)
    return token


def zset(text: str, schema: pa.Schema) -> pa.Table:
    """Parse lines `+ 1 4 x` / `- 2 5 .` (weight, then one token per column of `schema`) into a
    table with the schema's columns plus `_w` int64."""
    fields = [f for f in schema if f.name != W]
    rows = []
    for line in text.strip().splitlines():
        sign, *tokens = line.split()
        assert sign in ("+", "-") and len(tokens) == len(fields), f"malformed Z-set line {line!r}"
        rows.append({**{f.name: _value(tok, f.type) for f, tok in zip(fields, tokens, strict=True)},
                     W: 1 if sign == "+" else -1})
    return pa.Table.from_pylist(rows, schema=pa.schema([*fields, pa.field(W, pa.int64())]))


def as_counter(t: pa.Table) -> Counter[Row]:
    """A Z-set as a multiset: row (without `_w`, in column order) -> summed weight, zeros dropped."""
    cols = [c for c in t.column_names if c != W]
    out: Counter[Row] = Counter()
    for r in t.to_pylist():
        out[tuple(r[c] for c in cols)] += r[W]
    return Counter({k: w for k, w in out.items() if w})


def add(acc: Counter[Row], delta: Counter[Row]) -> Counter[Row]:
    """Sum two Z-sets keeping negative weights (Counter's `+` would drop them and hide a bad retraction)."""
    out = Counter(acc)
    for k, w in delta.items():
        out[k] += w
    return Counter({k: w for k, w in out.items() if w})


@dataclass
class MemoryStates:
    """The operators' `States` in memory (`StateIO` keeps them on disk): per state table, its rows by
    key. `stage` only buffers; the changes become visible to `lookup` at `commit()`, as the real
    store reads the previous epoch.

    It also checks that staged changes are consistent (what `consolidate` assumes of them): per key at
    most one -1 row, equal to the committed row, and a +1 row for a key that exists only after its -1;
    and that a state table is staged at most once per epoch (the real store keeps only the last file)."""

    schemas: dict[str, Schema]
    rows: dict[str, dict[Row, dict[str, Any]]] = field(default_factory=dict)
    pending: dict[str, dict[Row, dict[str, Any] | None]] = field(default_factory=dict)

    def lookup(self, suffix: str, by: list[str], keys: pa.Table) -> pa.Table:
        """Committed rows whose `by` columns equal a row of `keys` (NULL matches NULL)."""
        wanted = {tuple(r[c] for c in by) for r in keys.select(by).to_pylist()}
        found = [r for r in self.rows.get(suffix, {}).values() if tuple(r[c] for c in by) in wanted]
        return pa.Table.from_pylist(found, schema=self.schemas[suffix].arrow())

    def between(self, suffix: str, column: str, ranges: list[tuple[int, int]]) -> pa.Table:
        """Committed rows whose timestamp `column` (microseconds since 1970, UTC) lies in a closed range."""
        epoch = datetime(1970, 1, 1, tzinfo=UTC)

        def micros(v: datetime) -> int:
            return ((v if v.tzinfo else v.replace(tzinfo=UTC)) - epoch) // timedelta(microseconds=1)

        found = [r for r in self.rows.get(suffix, {}).values()
                 if r[column] is not None and any(lo <= micros(r[column]) <= hi for lo, hi in ranges)]
        return pa.Table.from_pylist(found, schema=self.schemas[suffix].arrow())

    def stage(self, suffix: str, changes: pa.Table) -> None:
        """Buffer a Z-set of state rows: -1 removes the old row of a key, +1 sets its new row."""
        if changes.num_rows == 0:
            return
        assert suffix not in self.pending, f"state {suffix} staged twice in one epoch"
        schema = self.schemas[suffix]
        target = pa.schema([*schema.arrow(), pa.field(W, pa.int64())])
        current = self.rows.get(suffix, {})
        out: dict[Row, dict[str, Any] | None] = {}
        seen: Counter[tuple[Row, int]] = Counter()
        for r in sorted(changes.select(target.names).cast(target).to_pylist(), key=lambda r: r[W] > 0):
            w = r.pop(W)
            key = tuple(r[k] for k in schema.key)
            seen[key, w] += 1
            assert seen[key, w] == 1 and w in (1, -1), f"{suffix}: several rows or weight {w} for key {key}"
            if w < 0:
                assert current.get(key) == r, f"{suffix}: retracted {r}, but the state holds {current.get(key)}"
                out[key] = None
            else:
                assert key not in current or key in out, f"{suffix}: inserted {r} over {current[key]}"
                out[key] = r
        self.pending[suffix] = out

    def commit(self) -> None:
        """End the epoch: staged changes become the state later lookups read."""
        for suffix, changes in self.pending.items():
            table = self.rows.setdefault(suffix, {})
            for key, r in changes.items():
                if r is None:
                    table.pop(key, None)
                else:
                    table[key] = r
        self.pending.clear()

    def contents(self, suffix: str) -> Counter[Row]:
        """A state table's committed rows as a multiset (for asserting on state directly)."""
        names = self.schemas[suffix].names
        return Counter(tuple(r[c] for c in names) for r in self.rows.get(suffix, {}).values())
