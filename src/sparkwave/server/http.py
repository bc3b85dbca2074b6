"""The HTTP server of `sparkwave serve --http-port` (default 5691): the dashboard (one page, its
script and stylesheet, `static/`), the JSON it polls (`/api/overview`, `/api/relations/<name>`),
its job buttons (`POST /api/jobs/<id>/pause|resume|cancel`), Prometheus' `/metrics` and `/health`.

It binds where the PostgreSQL protocol binds and admits whom it admits (`server/auth.py`): with no
password, loopback peers only (and a loopback Host header, so a DNS-rebound page cannot read it);
with one, HTTP Basic checked against the protocol's own SCRAM verifier, for every route but
/health. A POST must carry `CSRF_HEADER` (a page elsewhere cannot send a custom header without a
CORS preflight, which this server never answers) and, if it has an Origin, this server's.

What a client can make it hold is bounded: `MAX_CONNECTIONS` connections, each closed
`REQUEST_DEADLINE_S` after it opened whatever it is doing, a body of `MAX_BODY_BYTES`. Nothing a
client sends reaches a stack trace: a handler's exception is a 500 with one line, logged here.

Why the standard library's ThreadingHTTPServer: the traffic is a browser's poll a second, the
handlers call the Session's blocking API (as the protocol's connection threads do), and it adds no
dependency and no event loop beside the listener's threads."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import html
import json
import logging
import math
import re
import socket
import threading
import time
from datetime import date, datetime
from decimal import Decimal
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import unquote, urlsplit

from sparkwave.core.names import is_name
from sparkwave.server.auth import Authenticator, is_loopback_address

DEFAULT_PORT = 5691
MAX_BODY_BYTES = 4096  # the API's POSTs carry no body; a small one is read and ignored
MAX_CONNECTIONS = 64
REQUEST_TIMEOUT_S = 10.0  # for each read or write of a request's bytes
REQUEST_DEADLINE_S = 30.0  # for a whole connection, however slowly it trickles
OVERVIEW_TTL_S = 0.5  # /api/overview is computed at most this often, however many pages poll it
PAGE_CONCURRENCY = 2  # relation pages computed at once (a page's sample may be a Spark job)
WAIT_S = REQUEST_TIMEOUT_S  # for a computation under way (the overview, a page's turn): then 503, not a queue
CSRF_HEADER = "X-Sparkwave-Request"
STATIC = {"dashboard.js": "text/javascript; charset=utf-8", "dashboard.css": "text/css; charset=utf-8",
          "index.html": "text/html; charset=utf-8"}
SECURITY_HEADERS = (
    ("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
)
LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")

log = logging.getLogger("sparkwave.http")


class HttpError(Exception):
    """A request refused with `status`; `message` is shown to the client."""

    def __init__(self, status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def jsonable(value: Any) -> Any:
    """The JSON form of what `frontend/overview.py` returns: dataclasses as objects, times as ISO
    text, enums by value, a float that is not finite as null (JSON has no NaN)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if value is None or isinstance(value, str | int | bool):
        return value
    return str(value)


class Api:
    """What the routes ask of the Session: the overview (cached for `OVERVIEW_TTL_S`), a relation's
    page, the job buttons, /metrics and /health."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self._lock = threading.Lock()  # the paused jobs' limits
        self._overview_lock = threading.Lock()  # one computation at a time; the others take its result
        self._overview: tuple[float, bytes] | None = None
        self._paused_from: dict[int, int | None] = {}  # job id -> its rate limit before Pause
        self._pages = threading.BoundedSemaphore(PAGE_CONCURRENCY)
        self.wait_s = WAIT_S

    def health(self) -> dict[str, Any]:
        try:
            return {"status": "ok", "committed_epoch": self.session.committed_epoch,
                    "pipeline_error": self.session.pipeline_error}
        except Exception as e:  # the catalog closed under a stop
            return {"status": "stopping", "error": str(e)}

    def overview(self) -> bytes:
        """Every section of the dashboard as one JSON document; a section that fails is
        `{"error": ...}` and the others still show. While one is computed, the others wait for it at
        most `wait_s`, then take the last one (a thread waiting on a lock outlives its deadline)."""
        if not self._overview_lock.acquire(timeout=self.wait_s):
            if (last := self._overview) is not None:
                return last[1]
            raise HttpError(503, "the overview is still being computed; try again")
        try:
            return self._overview_body()
        finally:
            self._overview_lock.release()

    def _overview_body(self) -> bytes:
        if self._overview is not None and time.monotonic() - self._overview[0] < OVERVIEW_TTL_S:
            return self._overview[1]
        from sparkwave.frontend import overview

        body: dict[str, Any] = {"now": time.time(), **self.health()}
        for section in ("graph", "epochs", "jobs", "sources", "sinks"):
            try:
                body[section] = jsonable(getattr(overview, section)(self.session))
            except Exception as e:
                log.warning("overview %s failed", section, exc_info=True)
                body[section] = {"error": f"{type(e).__name__}: {e}"}
        data = json.dumps(body).encode()
        self._overview = (time.monotonic(), data)
        return data

    def relation_exists(self, name: str) -> bool:
        """A table, source or MV (a state table is shown on its MV's page, a sink on the graph)."""
        rel = self.session.catalog.relation(name) if is_name(name) else None
        return rel is not None and rel.kind != "state"

    def relation(self, name: str) -> dict[str, Any]:
        if not self.relation_exists(name):
            raise HttpError(404, f"no relation named {name!r}")
        from sparkwave.frontend import overview

        if not self._pages.acquire(timeout=self.wait_s):
            raise HttpError(503, f"{PAGE_CONCURRENCY} relation pages are being computed; try again")
        try:
            page = overview.relation_page(self.session, name)
        except overview.NotFound as e:  # dropped meanwhile
            raise HttpError(404, str(e)) from None
        finally:
            self._pages.release()
        return {"name": name, **_as_object(jsonable(page))}

    def metrics(self) -> tuple[bytes, str]:
        from sparkwave.frontend import metrics

        return metrics.render(self.session)

    def control(self, job_id: int, action: str) -> dict[str, Any]:
        """Pause (rate limit 0), resume (the limit before the pause, else none) or cancel a creating
        job, through the same statements a client would run."""
        job = next((j for j in self.session.jobs() if j.id == job_id), None)
        if job is None:
            raise HttpError(404, f"no job with id {job_id}")
        if not job.creating and job.kind != "sink":
            raise HttpError(409, f"job {job_id} ({job.name}) is not creating: it is {job.phase}")
        limit: int | None = None
        if action == "cancel":
            statement = f"CANCEL JOBS {job_id}"
        else:
            if job.kind not in ("materialized view", "sink"):
                raise HttpError(409, f"job {job_id} ({job.name}) is a {job.kind}'s: it has no rate limit to change")
            with self._lock:
                limit = 0 if action == "pause" else self._paused_from.get(job_id)
            setting = "SINK_RATE_LIMIT" if job.kind == "sink" else "BACKFILL_RATE_LIMIT"
            target = "SINK" if job.kind == "sink" else "MATERIALIZED VIEW"
            statement = f"ALTER {target} {job.name} SET {setting} = {'DEFAULT' if limit is None else limit}"
        from sparkwave.core.errors import SparkwaveError

        try:
            self.session.sql(statement)
        except SparkwaveError as e:
            raise HttpError(409, str(e)) from None
        with self._lock:  # remembered once the statement took effect
            if action == "pause" and job.rate_limit != 0:
                self._paused_from[job_id] = job.rate_limit
            elif action != "pause":
                self._paused_from.pop(job_id, None)
        self._overview = None  # the next poll shows the change
        return {"job": job_id, "action": action, "statement": statement}


def _as_object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {"page": value}


# --- routes --------------------------------------------------------------------------------------
_ROUTES: tuple[tuple[re.Pattern[str], tuple[str, ...], str], ...] = (
    (re.compile(r"/"), ("GET",), "page"),
    (re.compile(r"/relations/([^/]{1,200})"), ("GET",), "relation_page"),
    (re.compile(r"/api/overview"), ("GET",), "api_overview"),
    (re.compile(r"/api/relations/([^/]{1,200})"), ("GET",), "api_relation"),
    (re.compile(r"/api/jobs/([0-9]{1,18})/(pause|resume|cancel)"), ("POST",), "api_job"),
    (re.compile(r"/metrics"), ("GET",), "metrics"),
    (re.compile(r"/health"), ("GET",), "health"),
    (re.compile(r"/static/([A-Za-z0-9_.-]{1,64})"), ("GET",), "static"),
)


def route(path: str) -> tuple[str, tuple[str, ...], tuple[str, ...]] | None:
    """(handler, its methods, the path's groups), or None for a path no route has."""
    for pattern, methods, name in _ROUTES:
        m = pattern.fullmatch(path)
        if m:
            return name, methods, tuple(unquote(g, errors="strict") for g in m.groups())
    return None


def _asset(name: str) -> bytes:
    return resources.files("sparkwave.server").joinpath("static", name).read_bytes()


def _host_name(host: str) -> str:
    """A Host header's name or address, without its port (`[::1]:5691` -> `::1`, `[::1]` -> `::1`)."""
    host = host.strip().lower()
    if host.startswith("["):
        address, bracket, rest = host[1:].partition("]")
        return address if bracket and (not rest or rest[1:].isdigit() and rest[0] == ":") else host
    return host.rsplit(":", 1)[0]


def _error_page(status: int, message: str) -> bytes:
    """A page's error (a 404 for an unknown page or relation): the message escaped, no trace."""
    title = html.escape(f"{status} {HTTPStatus(status).phrase}")
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title} · sparkwave</title>'
            f'<link rel="stylesheet" href="/static/dashboard.css"></head><body><header><a class="brand" href="/">'
            f'sparkwave</a></header><main><section><h1>{title}</h1><p class="error">{html.escape(message)}</p>'
            f'<p><a href="/">Back to the dashboard</a></p></section></main></body></html>').encode()


class _Handler(BaseHTTPRequestHandler):
    server: HttpServer
    timeout = REQUEST_TIMEOUT_S
    server_version = "sparkwave"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        self._deadline = threading.Timer(self.server.deadline_s, self._drop)
        self._deadline.daemon = True
        self._deadline.start()

    def finish(self) -> None:
        self._deadline.cancel()
        try:
            super().finish()
        except OSError:
            pass

    def _drop(self) -> None:
        """The connection's deadline: its blocked read or write fails and its thread ends."""
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):  # any other method: 405, not http.server's 501
            return self._dispatch
        raise AttributeError(name)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self._dispatch()

    def do_HEAD(self) -> None:  # noqa: N802
        self._dispatch()

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        log.debug("%s %s", self.address_string(), format % args)

    # --- one request ---------------------------------------------------------------------------
    def _dispatch(self) -> None:
        self.close_connection = True
        path = urlsplit(self.path).path
        api = path.startswith("/api/") or path in ("/health", "/metrics")  # machines read JSON
        try:
            self._read_body()
            found = route(path)
            self._admit(found is not None and found[0] == "health")
            if found is None:
                raise HttpError(404, f"no page at {path}")
            name, methods, groups = found
            method = "GET" if self.command == "HEAD" else self.command
            if method not in methods:
                allow = ", ".join(methods + (("HEAD",) if "GET" in methods else ()))
                raise HttpError(405, f"{self.command} is not allowed on {path}; allowed: {allow}",
                                (("Allow", allow),))
            if method == "POST":
                self._same_origin()
            getattr(self, f"_route_{name}")(*groups)
        except HttpError as e:
            self._error(e, api)
        except (ConnectionError, TimeoutError):
            pass
        except UnicodeDecodeError:
            self._error(HttpError(400, "the path is not UTF-8"), api)
        except Exception as e:
            log.warning("%s %s failed", self.command, path, exc_info=True)
            first = (str(e).strip().splitlines() or [""])[0][:300]  # one line: never a trace
            self._error(HttpError(500, f"internal error: {type(e).__name__}: {first}"), api)

    def _read_body(self) -> None:
        if self.headers.get("Transfer-Encoding"):
            raise HttpError(411, "a request body needs a Content-Length (no chunked encoding)")
        raw = self.headers.get("Content-Length", "0").strip() or "0"
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:  # '²'.isdigit(), yet int('²') fails
            raise HttpError(400, f"invalid Content-Length {raw[:40]!r}")
        if int(raw) > MAX_BODY_BYTES:
            raise HttpError(413, f"the request body is {int(raw):,} bytes; at most {MAX_BODY_BYTES:,} are accepted")
        if int(raw):
            self.rfile.read(int(raw))

    def _admit(self, public: bool) -> None:
        """The protocol's rule: no password, loopback only; a password, HTTP Basic (not for /health)."""
        auth: Authenticator = self.server.auth
        if auth.password is None:
            if not is_loopback_address(self.client_address[0]):
                raise HttpError(403, "no password is configured, so only loopback clients are accepted")
            host = _host_name(self.headers.get("Host") or "localhost")
            if host not in LOOPBACK_NAMES and not is_loopback_address(host):
                raise HttpError(403, f"Host {host[:100]!r} is not a loopback name (no password is configured)")
            return
        if public:
            return
        scheme, _, value = (self.headers.get("Authorization") or "").partition(" ")
        password = None
        if scheme.lower() == "basic":
            try:
                password = base64.b64decode(value.strip(), validate=True).decode().partition(":")[2]
            except (binascii.Error, UnicodeDecodeError):
                password = None
        if password is None or not auth.verifies(password):
            raise HttpError(401, "authentication required: the server's password (any user name)",
                            (("WWW-Authenticate", 'Basic realm="sparkwave", charset="UTF-8"'),))

    def _same_origin(self) -> None:
        if self.headers.get(CSRF_HEADER) != "1":
            raise HttpError(403, f"a POST needs the header {CSRF_HEADER}: 1 (the dashboard sends it)")
        origin = self.headers.get("Origin")
        if origin and origin != "null" and urlsplit(origin).netloc != self.headers.get("Host"):
            raise HttpError(403, f"cross-origin POST from {origin[:100]!r} refused")
        if origin == "null":
            raise HttpError(403, "cross-origin POST from an opaque origin refused")

    # --- routes --------------------------------------------------------------------------------
    def _route_page(self) -> None:
        self._send(200, _asset("index.html"), STATIC["index.html"])

    def _route_relation_page(self, name: str) -> None:
        if not self.server.api.relation_exists(name):
            raise HttpError(404, f"no relation named {name!r}")
        self._send(200, _asset("index.html"), STATIC["index.html"])

    def _route_api_overview(self) -> None:
        self._send(200, self.server.api.overview(), "application/json")

    def _route_api_relation(self, name: str) -> None:
        self._json(200, self.server.api.relation(name))

    def _route_api_job(self, job_id: str, action: str) -> None:
        self._json(200, self.server.api.control(int(job_id), action))

    def _route_metrics(self) -> None:
        body, content_type = self.server.api.metrics()
        self._send(200, body, content_type)

    def _route_health(self) -> None:
        self._json(200, self.server.api.health())

    def _route_static(self, name: str) -> None:
        if name not in STATIC:
            raise HttpError(404, f"no file /static/{name}")
        self._send(200, _asset(name), STATIC[name])

    # --- replies -------------------------------------------------------------------------------
    def _json(self, status: int, body: Any) -> None:
        self._send(status, json.dumps(body).encode(), "application/json")

    def _error(self, e: HttpError, api: bool) -> None:
        if api:
            body, content_type = json.dumps({"error": e.message, "status": e.status}).encode(), "application/json"
        else:
            body, content_type = _error_page(e.status, e.message), "text/html; charset=utf-8"
        try:
            self._send(e.status, body, content_type, e.headers)
        except OSError:
            pass

    def _send(self, status: int, body: bytes, content_type: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(status, HTTPStatus(status).phrase)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in SECURITY_HEADERS + headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class HttpServer(ThreadingHTTPServer):
    """The dashboard's server over one Session; `start()` serves on a thread of its own, `stop()`
    closes the listening socket (connections in flight end at their deadline)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, session: Any, host: str, port: int = DEFAULT_PORT, password: str | None = None, *,
                 deadline_s: float = REQUEST_DEADLINE_S, max_connections: int = MAX_CONNECTIONS) -> None:
        if ":" in host:
            self.address_family = socket.AF_INET6
        self.api = Api(session)
        self.auth = Authenticator(password)
        self.deadline_s = deadline_s
        self._slots = threading.BoundedSemaphore(max_connections)
        self._thread: threading.Thread | None = None
        super().__init__((host, port), _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> HttpServer:
        self._thread = threading.Thread(target=self.serve_forever, name="sparkwave-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.shutdown()
        self.server_close()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):  # past the bound: refused at once, no thread
            _refuse(request)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def _refuse(request: socket.socket) -> None:
    try:
        request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    except OSError:
        pass

