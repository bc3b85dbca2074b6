"""What a sink needs of its target (PostgreSQL, Kafka, Delta Lake): a check at CREATE, atomic
deliveries, and, where the target can keep it, the sink's progress beside the data.

A delivery is a change `| _op | columns... |` netted per key over one or more epochs (ops as in
`core/chunk.py`: +I 1, -D 2, -U 3, +U 4) together with the position it brings the sink to. A
target that is `exactly_once` commits the position in the same transaction as the rows and
returns it from `progress()` after a crash, so a delivery the target already holds is skipped;
the others are at least once."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparkwave.connectors.options import Options, text
from sparkwave.core.chunk import Op
from sparkwave.core.errors import SqlError
from sparkwave.core.schema import Column

UPSERT, APPEND_ONLY, DEBEZIUM = "upsert", "append-only", "debezium"
# Checked, each with its own message, by CREATE SINK (frontend/sink_ddl.py).
COMMON_OPTIONS = Options("sink", *[text(k) for k in ("connector", "type", "primary_key", "force_append_only",
                                                     "snapshot", "sink_decouple", "sink_rate_limit", "format",
                                                     "encode")])


@dataclass(frozen=True, order=True)
class Position:
    """How far a sink has delivered: the snapshot at `epoch` up to vnode `vnode` (a sink backfill
    in progress), or everything up to `epoch` once `vnode` is `VNODES`. Ordered."""

    epoch: int
    vnode: int


@dataclass(frozen=True)
class SinkSpec:
    """What a target is told of its sink."""

    name: str
    sink_id: str  # unique per CREATE SINK: the key of the sink's progress in the target
    columns: tuple[Column, ...]  # the visible columns delivered
    key: tuple[str, ...]  # the upsert key (visible columns); empty for an append-only sink
    mode: str  # UPSERT | APPEND_ONLY | DEBEZIUM
    options: dict[str, str]

    def error(self, message: str) -> SqlError:
        return SqlError(f"sink {self.name!r}: {message}")

    def option(self, key: str, default: str | None = None) -> str | None:
        return self.options.get(key, default)

    def required(self, key: str, what: str) -> str:
        value = self.options.get(key)
        if not value:
            raise self.error(f"the {self.options.get('connector')} sink needs {key} = '...' ({what})")
        return value

    def check_options(self, spec: Options) -> dict[str, Any]:
        """The typed values of the sink's options, all of them the target's (`spec`) or common."""
        return (spec + COMMON_OPTIONS).check(f"sink {self.name!r}", self.options)


class SinkTarget:
    """One sink's target. `check()` runs at CREATE and on every (re)connection."""

    exactly_once = False

    def __init__(self, spec: SinkSpec) -> None:
        self.spec = spec
        self.note: str | None = None  # the first value the target could not take as it was, and what it did

    def check(self) -> None:
        """Reach the target and check (or create) what receives the rows; SqlError if it cannot."""

    def progress(self) -> Position | None:
        """The position the target holds with its data (exactly-once targets), else None."""
        return None

    def write(self, change: pa.Table, to: Position) -> None:
        """Deliver `change` (`| _op | columns |`, net per key) and move the sink to `to`, atomically."""
        raise NotImplementedError

    def cancel(self) -> None:
        """Interrupt a delivery in flight, from another thread (DROP SINK, close)."""

    def close(self) -> None:
        return None


def deletes_and_upserts(change: pa.Table, mode: str, key: tuple[str, ...] = ()) -> tuple[pa.Table, pa.Table]:
    """The rows whose key goes (-D, -U) and the rows to write (+I, +U). An append-only sink writes
    inserts only (forced append-only: +U too, and no deletes). Given the sink's `key`, the rows to
    write hold one row per key, the last: a user's `primary_key` that is not unique in the MV makes
    the target keep one row per key (RisingWave's rule) instead of duplicates or a MERGE that fails."""
    op = change["_op"]
    is_new = pc.is_in(op, pa.array([int(Op.INSERT), int(Op.UPDATE_INSERT)], op.type))
    if mode == APPEND_ONLY:
        return change.slice(0, 0), change.filter(is_new)
    new = change.filter(is_new)
    if key and new.num_rows > 1:
        last = (new.select(list(key)).append_column("_at", pa.array(range(new.num_rows), pa.int64()))
                .group_by(list(key), use_threads=False).aggregate([("_at", "max")])["_at_max"])
        if len(last) < new.num_rows:
            new = new.take(pc.take(last, pc.sort_indices(last)))  # in delivery order
    return change.filter(pc.invert(is_new)), new


def json_value(v: Any) -> Any:
    """A Python value as JSON can carry it: dates and timestamps in ISO 8601, decimals as strings
    (exact), bytea in base64, as RisingWave's JSON encoder does by default."""
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return str(v)
