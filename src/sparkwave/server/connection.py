"""One client connection's life on its socket: startup, authentication, the session's parameters,
then the simple and extended query protocols until Terminate, disconnect or server shutdown.

Errors keep the connection usable: a ServerError goes to the client with its fields, anything
else as XX000 (traceback logged); only a protocol violation (08P01) or a FATAL ends it."""

from __future__ import annotations

import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable
from datetime import tzinfo
from typing import Protocol

from sparkwave.core.errors import SparkwaveError
from sparkwave.server import protocol as proto
from sparkwave.server.auth import Authenticator
from sparkwave.server.backend import Backend, Client, Outcome, ServerError
from sparkwave.server.errors import to_server_error
from sparkwave.server.extended import Extended, is_blank, refuse_copy
from sparkwave.server.pgtypes import session_zone
from sparkwave.server.results import RowStream, complete_tag, row_description

log = logging.getLogger("sparkwave.server")

_MAX_ENCRYPTION_REQUESTS = 2  # an SSLRequest and a GSSENCRequest, each answered 'N'
_LINGER_SECONDS = 1.0
# replies queued while more of the client's pipelined messages are buffered are sent past this size:
# a client that sends without reading meets TCP's backpressure, not the server's memory
_MAX_QUEUED_BYTES = 1 << 20


class Host(Protocol):
    """What a connection needs of its listener."""

    backend: Backend
    authenticator: Authenticator
    startup_timeout: float

    def admit(self, conn: Connection) -> ServerError | None: ...

    def cancel(self, pid: int, secret: int) -> None: ...

    def forget(self, conn: Connection) -> None: ...


class Connection:
    """Runs in its own thread (`serve`); `cancel` and `request_stop` come from others."""

    def __init__(self, sock: socket.socket, peer: str, host: Host, pid: int) -> None:
        self.sock, self.peer, self.host = sock, peer, host
        self.pid, self.secret = pid, secrets.randbits(31)
        self.reader = proto.Reader(sock)
        self.client: Client = None  # type: ignore[assignment]  # set once the session is open
        self.user = ""
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._sent_params: dict[str, str] = {}
        self._zone: tzinfo = session_zone("UTC")
        self._stop = threading.Event()
        self._extended = Extended(self)
        self._skipping = False  # after an error in an extended-protocol message, until Sync
        self._client_lock = threading.Lock()

    # -- output ---------------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        self._out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes > _MAX_QUEUED_BYTES:  # pipelined Describes of a wide statement: bytes out per byte in
            self.flush()

    def flush(self) -> None:
        if self._out:
            data = b"".join(self._out)
            self._out.clear()
            self._out_bytes = 0
            self._sendall(data)

    def write_now(self, data: bytes) -> None:
        """A batch of rows: sent with whatever is queued before it, right away."""
        if self._out:
            self._out.append(data)
            data = b"".join(self._out)
            self._out.clear()
            self._out_bytes = 0
        self._sendall(data)

    def _sendall(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise proto.ClientGone(str(e)) from e

    def zone(self) -> tzinfo:
        return self._zone

    # -- from other threads ---------------------------------------------------------------------

    def cancel(self) -> None:
        with self._client_lock:
            client = self.client
        if client is not None:
            client.cancel()

    def request_stop(self) -> None:
        """Server shutdown: the connection ends with 57P01 at its next message boundary."""
        self._stop.set()
        try:
            self.sock.shutdown(socket.SHUT_RD)  # wakes a read blocked waiting for the next message
        except OSError:
            pass

    def force_close(self) -> None:
        self._stop.set()
        self.cancel()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- the connection's thread ----------------------------------------------------------------

    def serve(self) -> None:
        try:
            if self._startup():
                self._loop()
        except proto.ClientGone:
            if self._stop.is_set():
                self._fatal("57P01", "terminating connection due to administrator command")
        except proto.ProtocolViolation as e:
            self._fatal(e.code, str(e))
        except TimeoutError:
            self._fatal("08006", "timeout waiting for the startup packet or authentication")
        except Exception as e:  # a refusal at startup (ServerError), or a failure of ours
            err = to_server_error(e)
            if not isinstance(e, ServerError | SparkwaveError):
                log.exception("connection %d from %s failed", self.pid, self.peer)
            self._fatal(err.code, err.message, detail=err.detail, hint=err.hint)
        finally:
            self._cleanup()

    def _fatal(self, code: str, message: str, **fields: str | None) -> None:
        self._out.clear()
        self._out_bytes = 0
        try:
            self._sendall(proto.error_response(code, message, severity="FATAL", **fields))  # type: ignore[arg-type]
        except proto.ClientGone:
            return
        self._linger()

    def _linger(self) -> None:
        """Closing with unread bytes from the client would reset the connection, and a reset may
        destroy the error just sent before the client reads it: read and drop a bounded amount first."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
            self.sock.settimeout(_LINGER_SECONDS)
            for _ in range(16):
                if not self.sock.recv(65536):
                    break
        except OSError:
            pass

    def _cleanup(self) -> None:
        try:
            self._extended.close_all()
        except Exception:
            log.exception("closing the portals of connection %d", self.pid)
        with self._client_lock:
            client, self.client = self.client, None  # type: ignore[assignment]
        if client is not None:
            try:
                client.close()
            except Exception:
                log.exception("closing the session of connection %d", self.pid)
        try:
            self.sock.close()
        finally:
            self.host.forget(self)

    def _startup(self) -> bool:
        self.sock.settimeout(self.host.startup_timeout)
        self.reader.deadline = time.monotonic() + self.host.startup_timeout
        for _ in range(_MAX_ENCRYPTION_REQUESTS + 1):
            packet = self.reader.read_startup()
            if isinstance(packet, proto.EncryptionRequest):
                self._sendall(b"N")
                continue
            if isinstance(packet, proto.CancelRequest):
                self.host.cancel(packet.pid, packet.secret)
                return False
            return self._open(packet)
        raise proto.ProtocolViolation("too many encryption requests before the startup packet")

    def _open(self, startup: proto.Startup) -> bool:
        major, minor = startup.version >> 16, startup.version & 0xFFFF
        if major != 3:
            raise ServerError("0A000", f"unsupported frontend protocol {major}.{minor}: server supports 3.0 to 3.0")
        params = dict(startup.params)
        unknown = sorted(k for k in params if k.startswith("_pq_."))
        if minor > 0 or unknown:
            self.send(proto.negotiate_protocol_version(0, unknown))
            for k in unknown:
                del params[k]
        user = params.pop("user", "")
        if not user:
            raise ServerError("28000", "no PostgreSQL user name specified in startup packet")
        self.user = user
        database = params.pop("database", "") or user
        refusal = self.host.admit(self)
        if refusal is not None:
            raise refusal
        self.flush()
        self.host.authenticator.authenticate(user, self.peer, self.send_now, self.reader)
        self.reader.deadline = None
        client = self.host.backend.open(user, database, params)
        with self._client_lock:
            self.client = client
        if self._stop.is_set():
            raise proto.ClientGone("server shutting down")
        self.sock.settimeout(None)
        self._send_parameters()
        self.send(proto.backend_key_data(self.pid, self.secret))
        self.send(proto.ready_for_query(self._status()))
        self.flush()
        return True

    def send_now(self, data: bytes) -> None:
        self.send(data)
        self.flush()

    def _send_parameters(self) -> None:
        params = self.client.parameters()
        for k, v in params.items():
            if self._sent_params.get(k) != v:
                self.send(proto.parameter_status(k, v))
        self._sent_params = dict(params)
        self._zone = session_zone(params.get("TimeZone", "UTC"))

    def after_statement(self) -> None:
        """A SET may have changed a reported parameter: report it, as PostgreSQL does."""
        self._send_parameters()

    def _status(self) -> str:
        status = getattr(self.client, "transaction_status", None)
        if status is None:
            return "I"
        try:
            value = status()
        except Exception:
            log.exception("transaction_status() of connection %d failed", self.pid)
            return "I"
        return value if value in ("I", "T", "E") else "I"

    def _loop(self) -> None:
        handlers: dict[bytes, Callable[[bytes], None]] = {
            b"P": self._extended.parse, b"B": self._extended.bind, b"D": self._extended.describe,
            b"E": self._extended.execute, b"C": self._extended.close,
        }
        while True:
            if self._stop.is_set():
                raise proto.ClientGone("server shutting down")
            if not self.reader.buffered():
                self.flush()
            kind, payload = self.reader.read_message()
            if kind == b"X":
                self.flush()
                return
            if kind == b"S":
                self._sync()
                continue
            if self._skipping:
                continue
            if kind == b"Q":
                self._query(payload)
            elif kind in handlers:
                self._guard(handlers[kind], payload)
            elif kind == b"H":
                self.flush()
            elif kind == b"F":
                self._error(ServerError("0A000", "function calls (the FunctionCall message) are not supported"))
                self.send(proto.ready_for_query(self._status()))
            elif kind in (b"d", b"c", b"f"):
                continue  # COPY data outside a COPY: ignored, as PostgreSQL does
            else:
                raise proto.ProtocolViolation(f"invalid frontend message type {kind[0]}")

    def _guard(self, handler: Callable[[bytes], None], payload: bytes) -> None:
        """An extended-protocol message: an error skips the rest up to Sync."""
        try:
            handler(payload)
        except (proto.ClientGone, proto.ProtocolViolation):
            raise
        except Exception as e:
            self._error(e)
            self._skipping = True

    def _sync(self) -> None:
        self._skipping = False
        status = self._status()
        if status == "I":
            self._extended.end_of_transaction()
        self.send(proto.ready_for_query(status))
        self.flush()

    def _error(self, e: BaseException, sql: str = "") -> None:
        err = to_server_error(e, sql)
        if err.code == "XX000" and not isinstance(e, ServerError | SparkwaveError):
            log.error("internal error in connection %d (%s)", self.pid, self.user, exc_info=e)
        self.send(proto.error_response(err.code, err.message, severity=err.severity or "ERROR", detail=err.detail,
                                       hint=err.hint, position=err.position))

    def _query(self, payload: bytes) -> None:
        p = proto.Payload(payload, "Query")
        sql = p.cstr()
        p.end()
        self._extended.drop_unnamed()
        try:
            if is_blank(sql):
                self.send(proto.empty_query_response())
            else:
                refuse_copy(sql)
                self._run(sql)
        except (proto.ClientGone, proto.ProtocolViolation):
            raise
        except Exception as e:
            self._error(e, sql)
        try:
            self._send_parameters()
        except Exception as e:
            self._error(e)
        self.send(proto.ready_for_query(self._status()))

    def _run(self, sql: str) -> None:
        outcomes = self.client.run(sql)
        any_outcome = False
        try:
            for outcome in outcomes:
                any_outcome = True
                for text in outcome.notices:
                    self.send(proto.notice_response(text))
                if outcome.fields is None:
                    outcome.close()
                    self.send(proto.command_complete(outcome.tag))
                else:
                    self._stream(outcome)
                self._send_parameters()
        finally:
            close = getattr(outcomes, "close", None)
            if close is not None:
                close()
        if not any_outcome:
            self.send(proto.empty_query_response())

    def _stream(self, outcome: Outcome) -> None:
        assert outcome.fields is not None
        stream = RowStream(outcome, [0] * len(outcome.fields), self._zone)
        noticed = len(outcome.notices)
        try:
            self.send(row_description(outcome.fields))
            sent = stream.send(self.send if outcome.at_hand else self.write_now)
            for text in outcome.notices[noticed:]:  # raised while the rows were produced
                self.send(proto.notice_response(text))
            self.send(proto.command_complete(complete_tag(outcome, sent)))
        finally:
            stream.close()
