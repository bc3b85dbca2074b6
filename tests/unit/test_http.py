"""The dashboard's HTTP server (`server/http.py`) as a client meets it, over real sockets, without
Spark: its routes, its refusals (404 pages and JSON, 405, 411, 413, 400), its authentication (the
protocol's rule: loopback without a password, HTTP Basic against the SCRAM verifier with one), its
CSRF rule for POSTs, and the bounds on what a slow or greedy client can hold. The Session is a
stand-in with the few attributes these routes read; the real one is `tests/integration/test_dashboard.py`'s."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from sparkwave.server.http import CSRF_HEADER, MAX_BODY_BYTES, PAGE_CONCURRENCY, HttpServer

XSS = "<img src=x onerror=alert(1)>"


class _Catalog:
    def relation(self, name: str) -> None:
        if name == "boom":
            raise RuntimeError("the catalog is closed\n  Traceback (most recent call last): secret")
        return None


class _Session:
    committed_epoch, pipeline_error = 3, None
    catalog = _Catalog()

    def jobs(self) -> list[object]:
        return []


@contextmanager
def served(password: str | None = None, **kwargs: float) -> Iterator[HttpServer]:
    server = HttpServer(_Session(), "127.0.0.1", 0, password, **kwargs).start()
    try:
        yield server
    finally:
        server.stop()


def request(server: HttpServer, method: str, path: str, headers: dict[str, str] | None = None,
            body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def basic(password: str, user: str = "anyone") -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_health_and_the_page_and_its_assets_are_served():
    with served() as s:
        status, headers, body = request(s, "GET", "/health")
        assert status == 200 and json.loads(body) == {"status": "ok", "committed_epoch": 3, "pipeline_error": None}
        status, headers, body = request(s, "GET", "/")
        assert status == 200 and headers["content-type"].startswith("text/html")
        assert b'src="/static/dashboard.js"' in body and b"<script>" not in body  # no inline script
        assert "script-src 'self'" in headers["content-security-policy"]
        for name, kind in (("dashboard.js", "text/javascript"), ("dashboard.css", "text/css")):
            status, headers, body = request(s, "GET", f"/static/{name}")
            assert status == 200 and headers["content-type"].startswith(kind) and len(body) > 1000
        status, headers, body = request(s, "HEAD", "/static/dashboard.css")
        assert status == 200 and body == b"" and int(headers["content-length"]) > 1000


def test_an_unknown_page_or_relation_is_a_404_page_with_the_name_escaped():
    with served() as s:
        for path in ("/nothing/here", "/relations/%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E", "/static/../x",
                     "/relations/no_such_mv"):
            status, headers, body = request(s, "GET", path)
            assert status == 404 and headers["content-type"].startswith("text/html"), path
            assert b"<img" not in body and b"Traceback" not in body
        assert "&lt;img src=x onerror=alert(1)&gt;" in request(s, "GET", "/relations/%3Cimg%20src%3Dx%20onerror%3D"
                                                                      "alert(1)%3E")[2].decode()


def test_an_unknown_api_path_or_relation_is_a_404_in_json():
    with served() as s:
        for path in ("/api/nothing", "/api/relations/no_such_mv", "/api/relations/" + XSS.replace(" ", "%20")):
            status, headers, body = request(s, "GET", path)
            assert status == 404 and headers["content-type"] == "application/json", path
            assert json.loads(body)["status"] == 404
        status, _, body = request(s, "POST", "/api/jobs/12/pause", {CSRF_HEADER: "1"})
        assert status == 404 and json.loads(body)["error"] == "no job with id 12"


def test_a_method_a_route_does_not_take_is_405_with_allow():
    with served() as s:
        for method, path, allow in (("POST", "/health", "GET, HEAD"), ("DELETE", "/api/overview", "GET, HEAD"),
                                    ("GET", "/api/jobs/1/pause", "POST"), ("PUT", "/", "GET, HEAD"),
                                    ("BREW", "/metrics", "GET, HEAD")):
            status, headers, body = request(s, method, path, {CSRF_HEADER: "1"})
            assert status == 405 and headers["allow"] == allow, (method, path)


def test_bodies_are_bounded_and_need_a_length():
    with served() as s:
        status, _, body = request(s, "POST", "/api/jobs/1/pause", {CSRF_HEADER: "1"}, b"x" * (MAX_BODY_BYTES + 1))
        assert status == 413 and b"at most 4,096" in body
        status, _, _ = request(s, "POST", "/api/jobs/1/pause", {CSRF_HEADER: "1", "Content-Length": "-5"})
        assert status == 400
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
            sock.sendall(b"POST /api/jobs/1/pause HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"5\r\nhello\r\n0\r\n\r\n")
            assert sock.makefile("rb").readline().split()[1] == b"411"
        assert request(s, "GET", "/health")[0] == 200  # and it still serves


def test_a_failing_handler_is_a_500_of_one_line_and_the_server_goes_on():
    with served() as s:
        status, headers, body = request(s, "GET", "/api/relations/boom")
        assert status == 500 and json.loads(body)["error"] == "internal error: RuntimeError: the catalog is closed"
        status, headers, body = request(s, "GET", "/relations/boom")
        assert status == 500 and b"Traceback" not in body and headers["content-type"].startswith("text/html")
        assert request(s, "GET", "/health")[0] == 200


def test_garbage_and_overlong_requests_do_not_hurt_it():
    with served() as s:
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
            sock.sendall(b"\x00\xff\xfe garbage\r\n\r\n")  # HTTP/0.9's shape: an error page with no status line
            assert b"Bad" in sock.makefile("rb").read()
        for junk in (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n",
                     b"GET /health HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n", b"GET /relations/%ff HTTP/1.0\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
                sock.sendall(junk)
                status = sock.makefile("rb").readline().split()
                assert status and status[1][:1] == b"4", (junk[:40], status)
        assert request(s, "GET", "/health")[0] == 200


def test_a_client_that_never_finishes_its_request_is_dropped():
    """Slowloris: a connection is closed at its deadline however slowly it trickles."""
    with served(deadline_s=0.5) as s:
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
            sock.sendall(b"GET /hea")  # and nothing more
            assert sock.recv(4096) == b""  # closed by the server, not by our timeout (that would raise)
        assert request(s, "GET", "/health")[0] == 200


def test_connections_past_the_bound_are_refused_at_once():
    with served(max_connections=2) as s:
        held = [socket.create_connection(("127.0.0.1", s.port), timeout=30) for _ in range(2)]
        for sock in held:
            sock.sendall(b"GET /he")
        answers = []
        for _ in range(500):  # until the server has taken both slots (each try is a new client)
            with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
                sock.sendall(b"GET /health HTTP/1.0\r\n\r\n")
                answers.append(sock.makefile("rb").readline())
            if b"503" in answers[-1]:
                break
        assert b"503" in answers[-1], answers[-3:]
        for sock in held:
            sock.close()
        answers = []
        for _ in range(500):  # until the server has seen them go
            answers.append(request(s, "GET", "/health")[0])
            if answers[-1] == 200:
                break
        assert answers[-1] == 200


def test_without_a_password_a_non_loopback_host_header_is_refused():
    """A DNS-rebound page (evil.example resolving to 127.0.0.1) cannot read the dashboard."""
    with served() as s:
        assert request(s, "GET", "/api/overview", {"Host": "evil.example:5691"})[0] == 403
        assert request(s, "GET", "/health", {"Host": "localhost:5691"})[0] == 200
        assert request(s, "GET", "/health", {"Host": "[::1]:5691"})[0] == 200


def test_a_post_needs_the_dashboards_header_and_its_own_origin():
    with served() as s:
        status, _, body = request(s, "POST", "/api/jobs/1/pause")
        assert status == 403 and CSRF_HEADER.encode() in body
        status, _, _ = request(s, "POST", "/api/jobs/1/pause", {CSRF_HEADER: "1", "Origin": "http://evil.example"})
        assert status == 403
        status, _, _ = request(s, "POST", "/api/jobs/1/pause", {CSRF_HEADER: "1", "Origin": "null"})
        assert status == 403
        origin = f"http://127.0.0.1:{s.port}"
        status, _, _ = request(s, "POST", "/api/jobs/1/pause", {CSRF_HEADER: "1", "Origin": origin,
                                                                "Host": f"127.0.0.1:{s.port}"})
        assert status == 404  # admitted: there is no job 1


@pytest.mark.parametrize("path", ["/", "/api/overview", "/metrics", "/static/dashboard.js", "/relations/x",
                                  "/no/such/page"])
def test_with_a_password_every_route_but_health_needs_it(path):
    with served("s3cret pw") as s:
        status, headers, _ = request(s, "GET", path)
        assert status == 401 and headers["www-authenticate"].startswith("Basic realm=")
        assert request(s, "GET", path, basic("wrong"))[0] == 401
        assert request(s, "GET", path, {"Authorization": "Basic !!notbase64"})[0] == 401
        assert request(s, "GET", "/health")[0] == 200


def test_with_a_password_the_right_one_admits_any_user_name():
    with served("s3cret pw") as s:
        for user in ("", "alice"):
            status, _, body = request(s, "GET", "/", basic("s3cret pw", user))
            assert status == 200 and b"dashboard.js" in body
        assert request(s, "POST", "/api/jobs/9/pause", basic("s3cret pw"))[0] == 403  # and a POST still needs CSRF
        assert request(s, "POST", "/api/jobs/9/pause", {**basic("s3cret pw"), CSRF_HEADER: "1"})[0] == 404


def test_many_concurrent_clients_are_all_answered():
    with served() as s:
        results: list[int] = []

        def client() -> None:
            results.append(request(s, "GET", "/health")[0])

        threads = [threading.Thread(target=client) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == [200] * 20


def test_a_content_length_of_non_ascii_digits_is_a_400_not_a_500():
    """`'²'.isdigit()` is true, `int('²')` fails: the header's Latin-1 digits are the client's error."""
    with served() as s:
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
            sock.sendall(b"POST /api/jobs/1/pause HTTP/1.0\r\nHost: localhost\r\nContent-Length: \xb2\r\n\r\n")
            assert sock.makefile("rb").readline().split()[1] == b"400"
        assert request(s, "GET", "/health")[0] == 200


def test_without_a_password_a_bracketed_ipv6_host_without_a_port_is_loopback():
    with served() as s:
        assert request(s, "GET", "/health", {"Host": "[::1]"})[0] == 200
        assert request(s, "GET", "/health", {"Host": "localhost"})[0] == 200
        assert request(s, "GET", "/health", {"Host": "[::1]evil.example"})[0] == 403
        assert request(s, "GET", "/health", {"Host": "127.0.0.1.evil.example:80"})[0] == 403


class _Blocking:
    """A catalog whose committed epoch is not read until `release` is set: a page being computed."""

    def __init__(self) -> None:
        self.release, self.inside, self.most = threading.Event(), 0, 0
        self.entered = threading.Condition()

    def relation(self, name: str) -> object:
        return type("Rel", (), {"kind": "mv", "name": name})()

    def committed_epoch(self) -> int:
        with self.entered:
            self.inside += 1
            self.most = max(self.most, self.inside)
            self.entered.notify_all()
        self.release.wait(60)
        with self.entered:
            self.inside -= 1
        return 3


class _SlowSession(_Session):
    def __init__(self) -> None:
        self.catalog = _Blocking()  # type: ignore[assignment]


@contextmanager
def served_slow(wait_s: float) -> Iterator[tuple[HttpServer, _Blocking]]:
    session = _SlowSession()
    server = HttpServer(session, "127.0.0.1", 0).start()
    server.api.wait_s = wait_s
    try:
        yield server, session.catalog
    finally:
        session.catalog.release.set()
        server.stop()


def _in_background(server: HttpServer, path: str) -> tuple[threading.Thread, list[int]]:
    status: list[int] = []
    t = threading.Thread(target=lambda: status.append(request(server, "GET", path)[0]), daemon=True)
    t.start()
    return t, status


def test_relation_pages_computed_at_once_are_bounded_and_the_rest_are_refused_not_queued():
    """Each page may run a Spark job for its sample: a client (or a tab re-polling a slow page) cannot
    make the server compute more than PAGE_CONCURRENCY of them at a time."""
    with served_slow(wait_s=0.2) as (s, catalog):
        running = [_in_background(s, f"/api/relations/r{i}") for i in range(PAGE_CONCURRENCY)]
        with catalog.entered:
            assert catalog.entered.wait_for(lambda: catalog.inside == PAGE_CONCURRENCY, 60)
        status, _, body = request(s, "GET", "/api/relations/another")
        assert status == 503 and b"try again" in body
        assert request(s, "GET", "/health")[0] == 200  # the rest of the server answers meanwhile
        catalog.release.set()
        for t, _ in running:
            t.join(60)
        assert catalog.most == PAGE_CONCURRENCY


def test_a_slow_overview_does_not_queue_every_poll_behind_it():
    with served_slow(wait_s=0.2) as (s, catalog):
        first, status = _in_background(s, "/api/overview")
        with catalog.entered:
            assert catalog.entered.wait_for(lambda: catalog.inside == 1, 60)
        code, _, body = request(s, "GET", "/api/overview")
        assert code == 503 and b"try again" in body  # nothing computed yet to show meanwhile
        catalog.release.set()
        first.join(60)
        assert status == [200] and catalog.most == 1
