"""The PostgreSQL frontend/backend protocol v3 as bytes: reading the startup packet and typed
messages with hard limits, parsing their payloads, and building every backend message.

Limits are checked on the length word before a byte of the body is read, so a client claiming a
2 GB message costs nothing but the ErrorResponse it gets back."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sparkwave.core.limits import MAX_STATEMENT_BYTES

PROTOCOL_3_0 = 196608  # 3 << 16
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
MAX_STARTUP_BYTES = 10_000  # PostgreSQL's own MAX_STARTUP_PACKET_LENGTH
# a Bind carries the statement's parameters, each at most MAX_VALUE_BYTES; a Parse the statement text
MAX_MESSAGE_BYTES = MAX_STATEMENT_BYTES + 1024 * 1024
_RECV = 256 * 1024

_I = struct.Struct("!i")
_II = struct.Struct("!ii")
_H = struct.Struct("!h")
_HEADER = struct.Struct("!ci")
pack_i = _I.pack
NULL_VALUE = pack_i(-1)  # a DataRow's or Bind's NULL


class ProtocolViolation(Exception):
    """What the client sent is not the protocol: answered with 08P01 and the connection closed."""

    code = "08P01"


class ClientGone(Exception):
    """The peer closed the connection (or it was shut down under us)."""


@dataclass(frozen=True)
class Startup:
    version: int
    params: dict[str, str]


@dataclass(frozen=True)
class CancelRequest:
    pid: int
    secret: int


@dataclass(frozen=True)
class EncryptionRequest:
    """SSLRequest or GSSENCRequest: answered 'N' (we speak plain TCP)."""

    code: int


class Reader:
    """Buffered reads from a socket, message by message."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = bytearray()
        # time.monotonic() by which the reads must be done (startup: a socket timeout alone bounds each
        # recv, and a client sending a byte a second would hold its slot forever)
        self.deadline: float | None = None

    def _fill(self, n: int) -> None:
        while len(self._buf) < n:
            if self.deadline is not None:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("the read's deadline passed")
                self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(max(_RECV, min(n - len(self._buf), 16 * _RECV)))
            except (ConnectionError, OSError) as e:
                if isinstance(e, TimeoutError):
                    raise
                raise ClientGone(str(e)) from e
            if not chunk:
                raise ClientGone("the client closed the connection")
            self._buf += chunk

    def read_exact(self, n: int) -> bytes:
        self._fill(n)
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def buffered(self) -> bool:
        """Whether a further message's bytes already arrived (no need to flush before reading it)."""
        return bool(self._buf)

    def read_startup(self) -> Startup | CancelRequest | EncryptionRequest:
        (length,) = _I.unpack(self.read_exact(4))
        if length < 8 or length > MAX_STARTUP_BYTES:
            raise ProtocolViolation(f"invalid length of startup packet: {length}")
        body = self.read_exact(length - 4)
        (code,) = _I.unpack_from(body)
        if code in (SSL_REQUEST, GSSENC_REQUEST):
            if length != 8:
                raise ProtocolViolation(f"invalid length of encryption request packet: {length}")
            return EncryptionRequest(code)
        if code == CANCEL_REQUEST:
            if length != 16:
                raise ProtocolViolation(f"invalid length of cancel request packet: {length}")
            pid, secret = _II.unpack_from(body, 4)
            return CancelRequest(pid, secret)
        return Startup(code, _startup_params(body[4:]) if code >> 16 == 3 else {})

    def read_message(self, max_bytes: int = MAX_MESSAGE_BYTES) -> tuple[bytes, bytes]:
        """(type byte, payload) of the next typed message."""
        kind, length = _HEADER.unpack(self.read_exact(5))
        if length < 4:
            raise ProtocolViolation(f"invalid message length {length} for message type {kind!r}")
        if length - 4 > max_bytes:
            raise ProtocolViolation(f"message of type {kind!r} too long: {length} bytes (the limit is {max_bytes})")
        return kind, self.read_exact(length - 4)


def _startup_params(data: bytes) -> dict[str, str]:
    if not data.endswith(b"\x00"):
        raise ProtocolViolation("invalid startup packet layout: expected terminator as last byte")
    parts = data[:-1].split(b"\x00")
    if parts and parts[-1] == b"":
        parts.pop()
    if len(parts) % 2:
        raise ProtocolViolation("invalid startup packet layout: a parameter name without a value")
    try:
        texts = [p.decode() for p in parts]
    except UnicodeDecodeError as e:
        raise ProtocolViolation("invalid startup packet: a parameter is not UTF-8") from e
    return dict(zip(texts[::2], texts[1::2], strict=True))


class Payload:
    """A cursor over one message's payload; reading past its end is a protocol violation."""

    __slots__ = ("data", "pos", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what = data, 0, what

    def _need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolViolation(f"invalid {self.what} message format")

    def int16(self) -> int:
        self._need(2)
        (v,) = _H.unpack_from(self.data, self.pos)
        self.pos += 2
        return int(v)

    def int32(self) -> int:
        self._need(4)
        (v,) = _I.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(v)

    def byte(self) -> bytes:
        self._need(1)
        self.pos += 1
        return self.data[self.pos - 1:self.pos]

    def take(self, n: int) -> bytes:
        self._need(n)
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def cstr(self) -> str:
        end = self.data.find(b"\x00", self.pos)
        if end < 0:
            raise ProtocolViolation(f"invalid string in {self.what} message")
        raw = self.data[self.pos:end]
        self.pos = end + 1
        try:
            return raw.decode()
        except UnicodeDecodeError as e:
            raise ProtocolViolation(f"invalid UTF-8 in {self.what} message") from e

    def rest(self) -> bytes:
        out = self.data[self.pos:]
        self.pos = len(self.data)
        return out

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ProtocolViolation(f"invalid {self.what} message format: trailing bytes")


# ---- backend messages -------------------------------------------------------------------------

def message(kind: bytes, body: bytes = b"") -> bytes:
    return kind + pack_i(len(body) + 4) + body


def _cstr(s: str) -> bytes:
    return s.replace("\x00", "").encode() + b"\x00"


def authentication_ok() -> bytes:
    return message(b"R", pack_i(0))


def authentication_sasl(mechanisms: Iterable[str]) -> bytes:
    return message(b"R", pack_i(10) + b"".join(_cstr(m) for m in mechanisms) + b"\x00")


def authentication_sasl_continue(data: bytes) -> bytes:
    return message(b"R", pack_i(11) + data)


def authentication_sasl_final(data: bytes) -> bytes:
    return message(b"R", pack_i(12) + data)


def parameter_status(name: str, value: str) -> bytes:
    return message(b"S", _cstr(name) + _cstr(value))


def backend_key_data(pid: int, secret: int) -> bytes:
    return message(b"K", _II.pack(pid, secret))


def negotiate_protocol_version(minor: int, unrecognized: Sequence[str]) -> bytes:
    return message(b"v", _II.pack(minor, len(unrecognized)) + b"".join(_cstr(o) for o in unrecognized))


def ready_for_query(status: str) -> bytes:
    return message(b"Z", status.encode())


@dataclass(frozen=True)
class Column:
    """A RowDescription entry."""

    name: str
    type_oid: int
    typlen: int
    typmod: int
    format: int = 0


_COL = struct.Struct("!ihihih")


def row_description(columns: Sequence[Column]) -> bytes:
    body = [_H.pack(len(columns))]
    for c in columns:
        body.append(_cstr(c.name))
        body.append(_COL.pack(0, 0, c.type_oid, c.typlen, c.typmod, c.format))
    return message(b"T", b"".join(body))


def command_complete(tag: str) -> bytes:
    return message(b"C", _cstr(tag))


def empty_query_response() -> bytes:
    return message(b"I")


def _fields(severity: str, code: str, msg: str, *, detail: str | None, hint: str | None,
            position: int | None) -> bytes:
    parts = [b"S" + _cstr(severity), b"V" + _cstr(severity), b"C" + _cstr(code), b"M" + _cstr(msg)]
    if detail:
        parts.append(b"D" + _cstr(detail))
    if hint:
        parts.append(b"H" + _cstr(hint))
    if position:
        parts.append(b"P" + _cstr(str(position)))
    return b"".join(parts) + b"\x00"


def error_response(code: str, msg: str, *, severity: str = "ERROR", detail: str | None = None,
                   hint: str | None = None, position: int | None = None) -> bytes:
    return message(b"E", _fields(severity, code, msg, detail=detail, hint=hint, position=position))


def notice_response(msg: str, *, code: str = "00000", severity: str = "NOTICE", detail: str | None = None,
                    hint: str | None = None) -> bytes:
    return message(b"N", _fields(severity, code, msg, detail=detail, hint=hint, position=None))


def parse_complete() -> bytes:
    return message(b"1")


def bind_complete() -> bytes:
    return message(b"2")


def close_complete() -> bytes:
    return message(b"3")


def no_data() -> bytes:
    return message(b"n")


def parameter_description(oids: Sequence[int]) -> bytes:
    return message(b"t", _H.pack(len(oids)) + b"".join(pack_i(o) for o in oids))


def portal_suspended() -> bytes:
    return message(b"s")
