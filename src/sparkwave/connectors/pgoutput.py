"""A decoder of PostgreSQL's `pgoutput` logical replication messages (protocol version 1), as
`pg_logical_slot_peek_binary_changes` returns them, one message per row.

Why our own: psycopg 3 has no replication protocol and no decoder of these messages, and the
format is small and stable (PostgreSQL's "Logical Replication Message Formats"): a type byte, then
big-endian integers, NUL-terminated strings and tuple data. Values arrive in PostgreSQL's text
output form (proto 1 has no binary mode), which `postgres_cdc_values.py` parses per column type.

Messages are grouped into transactions (`Txn`): Begin carries the commit's LSN and the xid, Commit
the LSN just past the commit record (`end_lsn`), where the next transaction's position starts."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

UNCHANGED = object()  # a TOASTed value an UPDATE did not change ('u'): pgoutput does not send it


class PgoutputError(ValueError):
    """A message this decoder cannot read (names the message type and why)."""


@dataclass(frozen=True)
class RelationInfo:
    """A Relation message: the upstream table's columns as the WAL describes them."""

    oid: int
    namespace: str
    name: str
    replica_identity: str
    columns: tuple[tuple[str, int, int, bool], ...]  # (name, type oid, typmod, part of the key)


@dataclass
class Change:
    """One row change: kind 'I', 'U' or 'D'; `new` and `old` are text values per column (None:
    NULL; `UNCHANGED`: a TOASTed value not sent), `old` only where the replica identity sends it."""

    kind: str
    relation: RelationInfo | None  # as described when the change was decoded (None: never described)
    new: list[object] | None = None
    old: list[object] | None = None


@dataclass
class Txn:
    """One upstream transaction: its xid, the LSN of its commit record and just past it, and its
    row changes in WAL order, and the published tables it truncated. A Relation message
    comes once per decoding session, before the relation's first change, and again when it changed:
    each change carries the description current when it was decoded; `described` lists those sent
    within this transaction."""

    xid: int
    commit_lsn: int
    end_lsn: int = 0
    changes: list[Change] = field(default_factory=list)
    described: list[RelationInfo] = field(default_factory=list)  # the Relation messages within it
    truncated: list[RelationInfo | None] = field(default_factory=list)  # the relations a TRUNCATE emptied


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 1

    def _take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise PgoutputError(f"message {self.data[:1]!r} ends early ({len(self.data)} bytes)")
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return int(value)

    def int8(self) -> int:
        return self._take(">b")

    def int16(self) -> int:
        return self._take(">h")

    def int32(self) -> int:
        return self._take(">i")

    def uint32(self) -> int:
        return self._take(">I")

    def int64(self) -> int:
        return self._take(">q")

    def byte(self) -> str:
        if self.at >= len(self.data):
            raise PgoutputError(f"message {self.data[:1]!r} ends early ({len(self.data)} bytes)")
        self.at += 1
        return chr(self.data[self.at - 1])

    def string(self) -> str:
        end = self.data.find(b"\0", self.at)
        if end < 0:
            raise PgoutputError(f"message {self.data[:1]!r}: a string without its terminating NUL")
        text = self.data[self.at:end].decode("utf-8")
        self.at = end + 1
        return text

    def tuple_data(self) -> list[object]:
        values: list[object] = []
        for _ in range(self.int16()):
            kind = self.byte()
            if kind == "n":
                values.append(None)
            elif kind == "u":
                values.append(UNCHANGED)
            elif kind == "t":
                n = self.int32()
                if n < 0 or self.at + n > len(self.data):
                    raise PgoutputError(f"message {self.data[:1]!r}: a value of {n} bytes past its end")
                values.append(self.data[self.at:self.at + n].decode("utf-8"))
                self.at += n
            else:
                raise PgoutputError(f"message {self.data[:1]!r}: tuple value kind {kind!r} (binary values "
                                    "need protocol version 2, not asked for)")
        return values


class Decoder:
    """Decodes a slot's messages, in order, into transactions. Relation messages are kept across
    transactions (pgoutput sends one before a relation's first change in a decoding session, and
    again when it changed)."""

    def __init__(self) -> None:
        self.relations: dict[int, RelationInfo] = {}
        self.txn: Txn | None = None

    def feed(self, data: bytes) -> Txn | None:
        """Decodes one message; returns the transaction its Commit completes, else None."""
        if not data:
            raise PgoutputError("an empty message")
        r, kind = _Reader(data), chr(data[0])
        if kind == "B":
            final_lsn, _, xid = r.int64(), r.int64(), r.uint32()
            self.txn = Txn(xid, final_lsn)
            return None
        if kind == "R":
            oid, namespace, name, identity = r.uint32(), r.string(), r.string(), chr(r.int8() & 0xFF)
            cols = []
            for _ in range(r.int16()):
                flags, col, type_oid, typmod = r.int8(), r.string(), r.uint32(), r.int32()
                cols.append((col, type_oid, typmod, bool(flags & 1)))
            info = RelationInfo(oid, namespace, name, identity, tuple(cols))
            self.relations[oid] = info
            self._current().described.append(info)
            return None
        if kind in "IUD":
            self._current().changes.append(self._change(kind, r, self.relations))
            return None
        if kind == "T":
            count, _ = r.int32(), r.int8()
            self._current().truncated.extend(self.relations.get(r.uint32()) for _ in range(count))
            return None
        if kind == "C":
            _, commit_lsn, end_lsn = r.int8(), r.int64(), r.int64()
            txn, self.txn = self._current(), None
            if commit_lsn != txn.commit_lsn:
                raise PgoutputError(f"Commit at {commit_lsn} does not match its Begin's {txn.commit_lsn}")
            txn.end_lsn = end_lsn
            return txn
        if kind in "OYM":  # origin, type, logical message: nothing a table's rows depend on
            return None
        raise PgoutputError(f"unknown message type {kind!r}")

    def _current(self) -> Txn:
        if self.txn is None:
            raise PgoutputError("a change outside a transaction (no Begin before it)")
        return self.txn

    @staticmethod
    def _change(kind: str, r: _Reader, relations: dict[int, RelationInfo]) -> Change:
        change = Change(kind, relations.get(r.uint32()))
        part = r.byte()
        if kind == "I":
            if part != "N":
                raise PgoutputError(f"Insert: expected 'N', got {part!r}")
            change.new = r.tuple_data()
        elif kind == "U":
            if part in "KO":
                change.old = r.tuple_data()
                part = r.byte()
            if part != "N":
                raise PgoutputError(f"Update: expected 'N', got {part!r}")
            change.new = r.tuple_data()
        else:
            if part not in "KO":
                raise PgoutputError(f"Delete: expected 'K' or 'O', got {part!r}")
            change.old = r.tuple_data()
        return change
