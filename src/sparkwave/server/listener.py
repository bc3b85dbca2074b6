"""The TCP server: one thread per connection, a bound on connections, the cancel-key registry,
and an orderly stop (57P01 to every live connection at its next message boundary)."""

from __future__ import annotations

import hmac
import logging
import secrets
import socket
import threading
import time

from sparkwave.server import protocol as proto
from sparkwave.server.auth import Authenticator, is_loopback_host
from sparkwave.server.backend import Backend, ServerError
from sparkwave.server.connection import Connection

log = logging.getLogger("sparkwave.server")

STARTUP_TIMEOUT = 20.0  # seconds a new connection may take to start up and authenticate
STARTUP_SLACK = 16  # sockets beyond max_connections still read (a cancel request needs one)


class Listener:
    """`Listener(backend, host, port, password=None, max_connections=100)`, then `start()`;
    `address` is the bound (host, port) (the real port when port=0); `stop(timeout)` ends it."""

    def __init__(self, backend: Backend, host: str = "127.0.0.1", port: int = 4566, password: str | None = None,
                 max_connections: int = 100, startup_timeout: float = STARTUP_TIMEOUT) -> None:
        if password is None and not is_loopback_host(host):
            raise ValueError(f"refusing to listen on {host!r} without a password: a server reachable from other "
                             "machines needs one (set a password, or listen on 127.0.0.1)")
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, not {max_connections}")
        self.backend = backend
        self.authenticator = Authenticator(password)
        self.host, self.port = host, port
        self.max_connections = max_connections
        self.startup_timeout = startup_timeout
        self._lock = threading.Condition()
        self._sockets: dict[int, tuple[Connection, threading.Thread]] = {}  # every accepted connection
        self._sessions: dict[int, Connection] = {}  # admitted ones (past startup): the cancel registry
        self._next_pid = secrets.randbelow(1 << 20) + 1000
        self._server: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._stopping = False
        self.accepted = 0  # connections accepted since start

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> Listener:
        if self._server is not None or self._stopping:
            raise RuntimeError("a listener starts once")
        infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, addr = infos[0]
        server = socket.socket(family, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind(addr)
            server.listen(128)
        except OSError:
            server.close()
            raise
        self._server = server
        self._accept_thread = threading.Thread(target=self._accept_loop, name="sparkwave-listener", daemon=True)
        self._accept_thread.start()
        return self

    @property
    def address(self) -> tuple[str, int]:
        if self._server is None:
            raise RuntimeError("the listener is not started")
        host, port = self._server.getsockname()[:2]
        return str(host), int(port)

    def stop(self, timeout: float = 10.0) -> None:
        """Stops accepting, asks every connection to end (57P01 at its next message boundary), waits
        up to `timeout` seconds, then cancels and closes the ones still busy."""
        self._stopping = True
        server, self._server = self._server, None
        if server is not None:
            try:
                server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
            except OSError:
                pass
            server.close()
        if self._accept_thread is not None:
            self._accept_thread.join(timeout)
        with self._lock:
            live = list(self._sockets.values())
        for conn, _ in live:
            conn.request_stop()
        deadline = time.monotonic() + timeout
        for _, thread in live:
            thread.join(max(0.0, deadline - time.monotonic()))
        for conn, thread in live:
            if thread.is_alive():
                conn.force_close()
        for _, thread in live:  # a cancelled statement ends promptly; one that ignores cancel is left behind
            thread.join(max(timeout, 5.0))

    def __enter__(self) -> Listener:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- counters -------------------------------------------------------------------------------

    @property
    def live_connections(self) -> int:
        """Connections past startup (sessions), the number max_connections bounds."""
        with self._lock:
            return len(self._sessions)

    @property
    def open_sockets(self) -> int:
        """Every accepted connection not yet closed, in startup or not."""
        with self._lock:
            return len(self._sockets)

    def wait_idle(self, timeout: float, at_most: int = 0) -> bool:
        """Waits until at most `at_most` connections are open; False if more still are after
        `timeout` seconds."""
        with self._lock:
            return self._lock.wait_for(lambda: len(self._sockets) <= at_most, timeout)

    # -- the accept thread and the connections' calls ------------------------------------------------

    def _accept_loop(self) -> None:
        server = self._server
        while server is not None and not self._stopping:
            try:
                sock, addr = server.accept()
            except OSError as e:
                if self._stopping:
                    return
                log.warning("accept failed: %s", e)
                time.sleep(0.05)  # EMFILE and the like: let connections end before the next try
                continue
            self._handle(sock, str(addr[0]))

    def _handle(self, sock: socket.socket, peer: str) -> None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)  # finds peers that vanished
        except OSError:
            pass
        with self._lock:
            crowded = len(self._sockets) >= self.max_connections + STARTUP_SLACK or self._stopping
            if not crowded:
                self.accepted += 1
                pid = self._next_pid
                self._next_pid = self._next_pid + 1 if self._next_pid < (1 << 31) - 1 else 1000
                conn = Connection(sock, peer, self, pid)
                thread = threading.Thread(target=conn.serve, name=f"sparkwave-conn-{pid}", daemon=True)
                self._sockets[pid] = (conn, thread)
        if crowded:
            refusal = (proto.error_response("57P03", "the database system is shutting down", severity="FATAL")
                       if self._stopping else
                       proto.error_response("53300", "sorry, too many clients already", severity="FATAL"))
            try:
                sock.settimeout(1.0)
                sock.sendall(refusal)
            except OSError:
                pass
            sock.close()
            return
        thread.start()

    def admit(self, conn: Connection) -> ServerError | None:
        with self._lock:
            if self._stopping:
                return ServerError("57P03", "the database system is shutting down", severity="FATAL")
            if len(self._sessions) >= self.max_connections:
                return ServerError("53300", "sorry, too many clients already", severity="FATAL")
            self._sessions[conn.pid] = conn
            return None

    def cancel(self, pid: int, secret: int) -> None:
        """A CancelRequest: the right key cancels that session's statement; a wrong one does nothing."""
        with self._lock:
            conn = self._sessions.get(pid)
        if conn is None:
            return
        if hmac.compare_digest(conn.secret.to_bytes(4, "big", signed=True), secret.to_bytes(4, "big", signed=True)):
            try:
                conn.cancel()
            except Exception:
                log.exception("cancelling the statement of connection %d", pid)

    def forget(self, conn: Connection) -> None:
        with self._lock:
            self._sockets.pop(conn.pid, None)
            self._sessions.pop(conn.pid, None)
            self._lock.notify_all()
