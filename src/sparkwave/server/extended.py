"""The extended query protocol: prepared statements (Parse), portals (Bind), Describe, Execute
with a row limit (PortalSuspended, resumed by the next Execute) and Close, over one Client."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import Any, Protocol

from sparkwave.server import pgparams, pgtypes, results
from sparkwave.server import protocol as proto
from sparkwave.server.backend import Client, Outcome, Prepared, ServerError

_BLANK = re.compile(r"^[\s;]*$")
_COPY = re.compile(r"^\s*copy\b", re.IGNORECASE)
# named statements / portals one connection may hold (drivers cache ~100-256): each costs memory,
# and a client Parsing names in a loop must not exhaust the server's
MAX_STATEMENTS = 10_000
MAX_PORTALS = 10_000


def is_blank(sql: str) -> bool:
    return bool(_BLANK.match(sql))


def refuse_copy(sql: str) -> None:
    """COPY needs the copy sub-protocol, which the server does not speak."""
    if _COPY.match(sql):
        raise ServerError("0A000", "COPY is not supported by sparkwave serve; use INSERT or SELECT")


class Wire(Protocol):
    """What the extended protocol needs of its connection."""

    client: Client

    def send(self, data: bytes) -> None: ...

    def write_now(self, data: bytes) -> None: ...

    def zone(self) -> tzinfo: ...

    def after_statement(self) -> None: ...


@dataclass
class Statement:
    prepared: Prepared
    param_oids: list[int]  # as described to the client: its own OID where it gave one, else ours
    empty: bool
    descriptions: dict[tuple[int, ...], bytes] = field(default_factory=dict)  # RowDescription per result formats

    def row_description(self, formats: Sequence[int]) -> bytes:
        """The RowDescription of the statement's fields in `formats` (a driver asks at every Execute)."""
        assert self.prepared.fields is not None
        key = tuple(formats)
        if (found := self.descriptions.get(key)) is None:
            found = results.row_description(self.prepared.fields, formats)
            if len(self.descriptions) < 4:  # a client may bind a wide statement in any mix of formats
                self.descriptions[key] = found
        return found


@dataclass
class Portal:
    statement: Statement
    params: list[Any]
    formats: list[int]
    outcome: Outcome | None = None
    stream: results.RowStream | None = None
    finished: bool = False
    notices_sent: int = 0

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
        elif self.outcome is not None:
            self.outcome.close()
        self.finished = True


class Extended:
    """One connection's named and unnamed statements and portals."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.statements: dict[str, Statement] = {}
        self.portals: dict[str, Portal] = {}

    # -- Parse / Bind -----------------------------------------------------------------------

    def parse(self, payload: bytes) -> None:
        p = proto.Payload(payload, "Parse")
        name, sql = p.cstr(), p.cstr()
        oids = [p.int32() for _ in range(max(p.int16(), 0))]
        p.end()
        if name and name in self.statements:
            raise ServerError("42P05", f'prepared statement "{name}" already exists')
        if name and len(self.statements) >= MAX_STATEMENTS:
            raise ServerError("54000", f"too many prepared statements: a connection holds at most {MAX_STATEMENTS:,} "
                                       f'(close some before preparing "{name}")')
        if is_blank(sql):
            statement = Statement(Prepared(sql, [], None), [], True)
        else:
            refuse_copy(sql)
            prepared = self.wire.client.prepare(sql, oids)
            declared = [oids[i] if i < len(oids) else 0 for i in range(len(prepared.param_types))]
            # the client's own type where it gave one (an unknown one is read as text; in binary refused)
            described = [o or pgtypes.pg_type(t).oid for o, t in zip(declared, prepared.param_types, strict=True)]
            statement = Statement(prepared, described, False)
        if not name:
            self._drop_statement("")
        self.statements[name] = statement
        self.wire.send(proto.parse_complete())

    def bind(self, payload: bytes) -> None:
        p = proto.Payload(payload, "Bind")
        portal_name, stmt_name = p.cstr(), p.cstr()
        param_formats = [p.int16() for _ in range(max(p.int16(), 0))]
        raw: list[bytes | None] = []
        for _ in range(max(p.int16(), 0)):
            n = p.int32()
            raw.append(None if n == -1 else p.take(n))
        codes = [p.int16() for _ in range(max(p.int16(), 0))]
        p.end()
        statement = self._statement(stmt_name)
        if portal_name and portal_name in self.portals:
            raise ServerError("42P03", f'cursor "{portal_name}" already exists')
        if portal_name and len(self.portals) >= MAX_PORTALS:
            raise ServerError("54000", f"too many portals: a connection holds at most {MAX_PORTALS:,} (close some "
                                       f'before binding "{portal_name}")')
        needed = len(statement.param_oids)
        if len(raw) != needed:
            raise ServerError("08P01", f'bind message supplies {len(raw)} parameters, but prepared statement '
                              f'"{stmt_name}" requires {needed}')
        if len(param_formats) not in (0, 1, len(raw)):
            raise ServerError("08P01", f"bind message has {len(param_formats)} parameter formats but "
                              f"{len(raw)} parameters")
        if len(param_formats) != len(raw):
            param_formats = [param_formats[0] if param_formats else 0] * len(raw)
        zone = self.wire.zone()
        params = [None if v is None else pgparams.decode_param(oid, fmt, v, zone)
                  for oid, fmt, v in zip(statement.param_oids, param_formats, raw, strict=True)]
        out_formats = results.result_formats(codes, statement.prepared.fields)
        if not portal_name:
            self._drop_portal("")
        self.portals[portal_name] = Portal(statement, params, out_formats)
        self.wire.send(proto.bind_complete())

    # -- Describe / Execute / Close -----------------------------------------------------------

    def describe(self, payload: bytes) -> None:
        p = proto.Payload(payload, "Describe")
        kind, name = p.byte(), p.cstr()
        p.end()
        if kind == b"S":
            statement = self._statement(name)
            self.wire.send(proto.parameter_description(statement.param_oids))
            fields = statement.prepared.fields
            self.wire.send(results.row_description(fields) if fields is not None else proto.no_data())
        elif kind == b"P":
            portal = self._portal(name)
            fields = portal.statement.prepared.fields
            self.wire.send(portal.statement.row_description(portal.formats) if fields is not None
                           else proto.no_data())
        else:
            raise proto.ProtocolViolation(f"invalid DESCRIBE message subtype {kind!r}")

    def execute(self, payload: bytes) -> None:
        p = proto.Payload(payload, "Execute")
        name, limit = p.cstr(), p.int32()
        p.end()
        portal = self._portal(name)
        if portal.statement.empty:
            self.wire.send(proto.empty_query_response())
            return
        if portal.finished:
            if portal.outcome is not None and portal.outcome.fields is not None:
                self.wire.send(proto.command_complete(results.complete_tag(portal.outcome, 0)))
                return
            raise ServerError("55000", f'portal "{name}" cannot be run again')
        if portal.outcome is None:
            outcome = self.wire.client.execute(portal.statement.prepared, portal.params)
            try:
                stream = (results.RowStream(outcome, self._formats(portal, outcome), self.wire.zone())
                          if outcome.fields is not None else None)
            except BaseException:
                outcome.close()
                portal.finished = True
                raise
            portal.outcome, portal.stream = outcome, stream
        outcome = portal.outcome
        self._notices(portal, outcome)
        if portal.stream is None:
            portal.finished = True
            self.wire.send(proto.command_complete(outcome.tag))
            self.wire.after_statement()
            return
        try:
            sent = portal.stream.send(self.wire.send if outcome.at_hand else self.wire.write_now, limit)
        except BaseException:
            portal.close()
            raise
        self._notices(portal, outcome)
        if portal.stream.done:
            portal.finished = True
            portal.stream.close()
            self.wire.send(proto.command_complete(results.complete_tag(outcome, sent)))
            self.wire.after_statement()
        else:
            self.wire.send(proto.portal_suspended())

    def close(self, payload: bytes) -> None:
        p = proto.Payload(payload, "Close")
        kind, name = p.byte(), p.cstr()
        p.end()
        if kind == b"S":
            self._drop_statement(name)
        elif kind == b"P":
            self._drop_portal(name)
        else:
            raise proto.ProtocolViolation(f"invalid CLOSE message subtype {kind!r}")
        self.wire.send(proto.close_complete())

    # -- lifetime -----------------------------------------------------------------------------

    def end_of_transaction(self) -> None:
        """Portals live until their transaction ends (at Sync in autocommit)."""
        for name in list(self.portals):
            self._drop_portal(name)

    def drop_unnamed(self) -> None:
        """A simple Query drops the unnamed statement and portal, as PostgreSQL does."""
        self._drop_statement("")
        self._drop_portal("")

    def close_all(self) -> None:
        self.end_of_transaction()
        self.statements.clear()

    def _formats(self, portal: Portal, outcome: Outcome) -> list[int]:
        assert outcome.fields is not None
        n = len(outcome.fields)
        if len(portal.formats) == n:
            return portal.formats
        if portal.statement.prepared.fields is None and not any(portal.formats):
            return [0] * n
        raise ServerError("XX000", f"the statement returned {n} columns where {len(portal.formats)} were described")

    def _notices(self, portal: Portal, outcome: Outcome) -> None:
        for text in outcome.notices[portal.notices_sent:]:
            self.wire.send(proto.notice_response(text))
        portal.notices_sent = len(outcome.notices)

    def _statement(self, name: str) -> Statement:
        statement = self.statements.get(name)
        if statement is None:
            raise ServerError("26000", f'prepared statement "{name}" does not exist')
        return statement

    def _portal(self, name: str) -> Portal:
        portal = self.portals.get(name)
        if portal is None:
            raise ServerError("34000", f'portal "{name}" does not exist')
        return portal

    def _drop_statement(self, name: str) -> None:
        statement = self.statements.pop(name, None)
        if statement is not None:
            for pname, portal in list(self.portals.items()):
                if portal.statement is statement:
                    self._drop_portal(pname)

    def _drop_portal(self, name: str) -> None:
        portal = self.portals.pop(name, None)
        if portal is not None:
            portal.close()

