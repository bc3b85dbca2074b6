"""An Outcome's rows on the wire: RowDescription from its fields, DataRow batches streamed as the
backend yields them (one socket write per batch, never the whole result in memory), and the
CommandComplete tag; with a row limit (Execute's), the rest waits for the next Execute."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import tzinfo
from typing import Any

from sparkwave.server import pgtypes
from sparkwave.server import protocol as proto
from sparkwave.server.backend import Field, Outcome, ServerError


def columns(fields: Sequence[Field], formats: Sequence[int]) -> list[proto.Column]:
    out = []
    for f, fmt in zip(fields, formats, strict=True):
        t = pgtypes.pg_type(f.type)
        out.append(proto.Column(f.name, t.oid, t.typlen, t.typmod, fmt))
    return out


def row_description(fields: Sequence[Field], formats: Sequence[int] | None = None) -> bytes:
    return proto.row_description(columns(fields, formats if formats is not None else [0] * len(fields)))


def result_formats(codes: Sequence[int], fields: Sequence[Field] | None) -> list[int]:
    """Bind's result format codes (none: all text; one: for every column; else one per column),
    checked against the columns and the binary encoders there are."""
    n = len(fields) if fields is not None else 0
    if any(c not in (0, 1) for c in codes):
        raise ServerError("22023", f"unsupported format code: {next(c for c in codes if c not in (0, 1))}")
    if len(codes) == 0:
        formats = [0] * n
    elif len(codes) == 1:
        formats = [codes[0]] * n
    elif len(codes) == n:
        formats = list(codes)
    else:
        raise ServerError("08P01", f"bind message has {len(codes)} result formats but query has {n} columns")
    for f, fmt in zip(fields or [], formats, strict=True):
        if fmt == 1 and pgtypes.binary_encoder(f.type) is None:
            raise ServerError("0A000", f'binary output of column "{f.name}" of type {pgtypes.pg_type(f.type).name} '
                              "is not supported; ask for it in text format")
    return formats


def complete_tag(outcome: Outcome, rows: int) -> str:
    if outcome.fields is None:
        return outcome.tag
    if outcome.tag in ("", "SELECT"):
        return f"SELECT {rows}"
    if outcome.tag in UNCOUNTED:
        return outcome.tag
    return f"{outcome.tag} {rows}"


UNCOUNTED = frozenset({"EXPLAIN"})  # row-returning statements PostgreSQL tags without a count


class RowStream:
    """The rows still to send of one outcome (a portal's, or a simple query's)."""

    def __init__(self, outcome: Outcome, formats: Sequence[int], zone: tzinfo) -> None:
        if outcome.fields is None:
            raise ValueError("an outcome without fields has no rows")
        if len(formats) != len(outcome.fields):
            raise ServerError("XX000", f"the statement returned {len(outcome.fields)} columns where "
                              f"{len(formats)} were described")
        self.outcome = outcome
        self.fields = outcome.fields
        try:
            self.encoders = [pgtypes.column_encoder(f.type, fmt, zone)
                             for f, fmt in zip(self.fields, formats, strict=True)]
        except pgtypes.UnsupportedFormat as e:
            raise ServerError("0A000", str(e)) from e
        self._batches: Iterator[Any] = iter(outcome.batches)
        self._pending: Any = None
        self.done = False

    def send(self, write: Callable[[bytes], None], limit: int = 0) -> int:
        """Writes up to `limit` rows (0: all); returns how many. `done` tells whether it ended."""
        sent = 0
        while not self.done and (limit <= 0 or sent < limit):
            batch = self._pending
            self._pending = None
            if batch is None:
                batch = next(self._batches, None)
                if batch is None:
                    self.done = True
                    break
            size = len(batch)
            if size == 0:
                continue
            if 0 < limit < sent + size:
                take = limit - sent
                if hasattr(batch, "num_rows"):
                    batch, self._pending = batch.slice(0, take), batch.slice(take)
                else:
                    batch, self._pending = batch[:take], batch[take:]
            try:
                data, n = pgtypes.encode_batch(self.encoders, batch)
            except (TypeError, ValueError, AttributeError, OverflowError) as e:
                raise ServerError("XX000", f"could not send a row of the result: {e}") from e
            write(data)
            sent += n
        return sent

    def close(self) -> None:
        self.done = True
        self._pending = None
        self.outcome.close()
