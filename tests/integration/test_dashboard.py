"""The dashboard over a real pipeline: its JSON and pages over HTTP from a live Session, its job
buttons against a real creating job, `sparkwave serve` with a password, and, in a real headless
Chromium, the page while a table fills and an MV backfills under a rate limit: the graph shows every
relation, the job's progress advances, Pause pauses it and Resume resumes it (as `SHOW JOBS` says),
the MV's page shows its SQL, plan and rows, user data stays text (no XSS), Cancel cancels. A
screenshot is kept in `tests/artifacts/` (`SPARKWAVE_UPDATE_SCREENSHOT=1` copies it to `docs/dashboard.png`,
the README's)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import sparkwave
from sparkwave.server.http import CSRF_HEADER, HttpServer

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ARTIFACTS = ROOT / "tests" / "artifacts"
XSS = '<img src=x onerror="window.__xss = 1">'
WAIT_MS = 120_000  # the machine is loaded: conditions get long deadlines, never sleeps


def get(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> tuple[int, str, bytes]:
    req = urllib.request.Request(url, headers=headers or {}, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


def post(url: str) -> tuple[int, Any]:
    status, _, body = get(url, {CSRF_HEADER: "1"}, "POST")
    return status, json.loads(body)


@contextmanager
def dashboard(session: sparkwave.Session, password: str | None = None) -> Iterator[str]:
    server = HttpServer(session, "127.0.0.1", 0, password).start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def job(s: sparkwave.Session, name: str) -> Any:
    return next(j for j in s.jobs() if j.name == name)


def show_jobs(s: sparkwave.Session, name: str) -> dict[str, Any]:
    """The job's row of `SHOW JOBS`, as a client sees it."""
    rows = [r.asDict() for r in s.sql("SHOW JOBS").collect()]
    return next(r for r in rows if r["name"] == name)


def test_the_api_shows_the_pipeline_and_a_relations_page(session):
    s = session
    s.sql("CREATE TABLE t (k int PRIMARY KEY, g int, note varchar)")
    s.sql(f"INSERT INTO t VALUES (1, 1, '{XSS}'), (2, 1, 'b'), (3, 2, 'c')")
    s.sql("CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n FROM t GROUP BY g")
    s.sql("CREATE MATERIALIZED VIEW notes AS SELECT k, note FROM t")
    s.flush()
    with dashboard(s) as url:
        status, kind, body = get(f"{url}/api/overview")
        assert status == 200 and kind == "application/json"
        data = json.loads(body)
        nodes = {n["name"]: n for n in data["graph"]}
        assert set(nodes) == {"t", "per_g", "notes"}
        assert nodes["per_g"]["kind"] == "mv" and nodes["per_g"]["upstreams"] == ["t"]
        assert nodes["per_g"]["status"] == "running" and nodes["per_g"]["rows"] == 2
        assert nodes["t"]["rows"] == 3 and nodes["per_g"]["state_bytes"] > 0
        assert data["epochs"]["committed_epoch"] == s.committed_epoch == data["committed_epoch"]
        assert data["jobs"] == [] and data["sources"] == [] and data["sinks"] == []

        status, _, body = get(f"{url}/api/relations/per_g")
        page = json.loads(body)
        assert status == 200 and "GROUP BY g" in page["sql"] and page["plan"]
        assert page["state_tables"] and all(t["description"] for t in page["state_tables"])
        assert sorted(page["sample"]["rows"]) == [[1, 2], [2, 1]]
        status, _, body = get(f"{url}/api/relations/notes")
        assert [1, XSS] in json.loads(body)["sample"]["rows"]  # JSON carries it; the page shows it as text

        assert get(f"{url}/relations/per_g")[0] == 200
        state = page["state_tables"][0]["name"]
        for path in (f"/relations/{state}", "/relations/nope", "/api/relations/nope"):
            assert get(url + path)[0] == 404, path

        status, kind, body = get(f"{url}/metrics")
        assert status == 200 and kind.startswith("text/plain")
        names = {f.name for f in text_string_to_metric_families(body.decode())}
        assert "sparkwave_epochs_committed" in names


def test_the_job_buttons_pause_resume_and_cancel_a_creating_job(session):
    s = session
    s.sql("CREATE TABLE t (k int PRIMARY KEY, v int)")
    s.sql("INSERT INTO t VALUES " + ", ".join(f"({i}, {i % 7})" for i in range(200)))
    s.flush()
    s.sql("SET background_ddl = true; SET backfill_rate_limit = 1")  # a row a second: it stays creating
    s.sql("CREATE MATERIALIZED VIEW a AS SELECT k, v FROM t WHERE v > 2")
    s.sql("SET backfill_rate_limit = 0")  # paused from the start
    s.sql("CREATE MATERIALIZED VIEW b AS SELECT v, count(*) AS n FROM t GROUP BY v")
    a, b = job(s, "a"), job(s, "b")
    with dashboard(s) as url:
        overview = json.loads(get(f"{url}/api/overview")[2])
        assert {j["name"]: j["paused"] for j in overview["jobs"]} == {"a": False, "b": True}
        assert post(f"{url}/api/jobs/{a.id}/pause") == (200, {
            "job": a.id, "action": "pause", "statement": "ALTER MATERIALIZED VIEW a SET BACKFILL_RATE_LIMIT = 0"})
        assert show_jobs(s, "a")["rate_limit"] == 0
        overview = json.loads(get(f"{url}/api/overview")[2])
        assert {j["name"]: j["paused"] for j in overview["jobs"]} == {"a": True, "b": True}
        assert {n["name"]: n["status"] for n in overview["graph"]}["a"] == "paused"
        assert post(f"{url}/api/jobs/{a.id}/resume")[0] == 200
        assert show_jobs(s, "a")["rate_limit"] == 1  # the limit it had before the pause
        status, body = post(f"{url}/api/jobs/{b.id}/cancel")
        assert status == 200 and body["statement"] == f"CANCEL JOBS {b.id}"
        assert s.catalog.relation("b") is None and "b" not in [j.name for j in s.jobs()]
        status, body = post(f"{url}/api/jobs/{b.id}/pause")
        assert status == 404 and body["error"] == f"no job with id {b.id}"
        status, body = post(f"{url}/api/jobs/{job(s, 't').id}/pause")  # a table's job: created with its CREATE
        assert status == 409 and "not creating" in body["error"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_with_a_password_guards_every_route_but_health(tmp_path):
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkwave.cli.main", "serve", "--warehouse", str(tmp_path / "wh"), "--port", "0",
         "--http-port", str(port), "--password", "pw 1"], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env={**os.environ, "SPARKWAVE_SPARK_MASTER": "local[1]"})
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "dashboard on" in line:
                break
        assert f"dashboard on http://127.0.0.1:{port}/" in lines[-1], "".join(lines)
        url = f"http://127.0.0.1:{port}"
        assert get(f"{url}/health")[0] == 200
        assert get(f"{url}/api/overview")[0] == 401
        auth = {"Authorization": "Basic " + base64.b64encode(b"me:pw 1").decode()}
        status, _, body = get(f"{url}/api/overview", auth)
        assert status == 200 and json.loads(body)["graph"] == []
        assert get(f"{url}/", auth)[0] == 200 and get(f"{url}/relations/x", auth)[0] == 404
    finally:
        proc.terminate()
        proc.wait(timeout=120)


# --- in a real browser ---------------------------------------------------------------------------
@pytest.fixture
def browser_page(tmp_path: Path) -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (`sudo scripts/check-chromium.sh`, or "
                    "`apt-get install chromium`) to run the dashboard's browser test")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True,
            viewport={"width": 1280, "height": 1000})
        try:
            page = context.new_page()
            page.set_default_timeout(WAIT_MS)
            yield page
        finally:
            context.close()


def _rows_done(page: Any, job_id: int) -> int:
    return int(page.locator(f'#jobs tr[data-job="{job_id}"]').get_attribute("data-rows-done"))


def _advances(page: Any, job_id: int, beyond: int) -> None:
    page.wait_for_function("([id, n]) => { const r = document.querySelector(`#jobs tr[data-job='${id}']`);"
                           " return r !== null && Number(r.dataset.rowsDone) > n; }", arg=[job_id, beyond],
                           timeout=WAIT_MS)


def test_in_a_browser_the_dashboard_follows_and_controls_a_live_backfill(spark, tmp_path, browser_page):
    from playwright.sync_api import expect

    page = browser_page
    script_errors: list[Any] = []
    page.on("pageerror", lambda error: script_errors.append(error))
    with sparkwave.connect(tmp_path / "wh", spark=spark, barrier_interval_ms=250) as s:
        s.sql("CREATE TABLE g (id bigint, v int) WITH (connector = 'datagen', fields.id.kind = 'sequence', "
              "fields.id.start = '0', fields.v.min = '0', fields.v.max = '99', fields.v.seed = '5', "
              "datagen.rows.per.second = '1500')")  # rows arrive every epoch, throughout the test
        s.sql("CREATE TABLE notes (k int PRIMARY KEY, note varchar)")
        s.sql(f"INSERT INTO notes VALUES (1, '{XSS}'), (2, 'plain')")
        s.sql("CREATE MATERIALIZED VIEW per_v AS SELECT v, count(*) AS n FROM g GROUP BY v")
        s.sql("CREATE MATERIALIZED VIEW notes_mv AS SELECT k, note FROM notes")
        while s.table("g").count() < 6000:
            s.flush()
        # chunks of at most 100 rows at 100 rows/s: a backfill of 6000+ rows takes a minute at least
        s.sql("SET background_ddl = true; SET backfill_rate_limit = 100; SET backfill_chunk_rows = 100")
        s.sql("CREATE MATERIALIZED VIEW slow AS SELECT id, v + 1 AS v1 FROM g WHERE v < 50")
        slow = job(s, "slow")
        with dashboard(s) as url:
            page.goto(url)
            for name in ("g", "notes", "per_v", "notes_mv", "slow"):
                expect(page.locator(f'#graph g.node[data-name="{name}"]')).to_be_visible()
            expect(page.locator('#graph g.node[data-name="slow"]')).to_have_attribute("data-status", "creating")
            row = page.locator(f'#jobs tr[data-job="{slow.id}"]')
            expect(row).to_be_visible()
            _advances(page, slow.id, _rows_done(page, slow.id))  # its progress advances on the page

            row.locator('button[data-action="pause"]').click()
            expect(row).to_have_attribute("data-phase", "paused")
            assert show_jobs(s, "slow")["rate_limit"] == 0
            expect(page.locator('#graph g.node[data-name="slow"]')).to_have_attribute("data-status", "paused")

            row.locator('button[data-action="resume"]').click()
            expect(row).not_to_have_attribute("data-phase", "paused")
            assert show_jobs(s, "slow")["rate_limit"] == 100
            _advances(page, slow.id, _rows_done(page, slow.id))
            expect(page.locator("#epochs svg.chart path.p50")).to_have_count(1)
            expect(page.locator(".toast")).to_have_count(0)  # the buttons' notes have gone: a clean screenshot
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
            if os.environ.get("SPARKWAVE_UPDATE_SCREENSHOT"):  # the README's picture, refreshed on request
                shutil.copyfile(ARTIFACTS / "dashboard.png", ROOT / "docs" / "dashboard.png")

            page.locator('#graph g.node[data-name="per_v"]').click()
            page.wait_for_url(f"{url}/relations/per_v")
            expect(page.locator("#sql pre")).to_contain_text("GROUP BY v")
            expect(page.locator("#plan pre")).not_to_be_empty()
            expect(page.locator("#state tbody tr")).not_to_have_count(0)
            expect(page.locator("#sample tbody tr")).not_to_have_count(0)
            page.screenshot(path=str(ARTIFACTS / "dashboard-relation.png"), full_page=True)

            page.goto(f"{url}/relations/notes_mv")  # user data is shown as text, never run
            expect(page.locator("#sample")).to_contain_text(XSS)
            assert page.locator("#sample img").count() == 0 and page.evaluate("window.__xss") is None
            response = page.goto(f"{url}/relations/" + XSS.replace(" ", "%20").replace('"', "%22"))
            assert response is not None and response.status == 404
            expect(page.locator("main")).to_contain_text(XSS)
            assert page.locator("main img").count() == 0 and page.evaluate("window.__xss") is None

            page.goto(url)
            page.once("dialog", lambda dialog: dialog.accept())
            page.locator(f'#jobs tr[data-job="{slow.id}"] button[data-action="cancel"]').click()
            expect(page.locator(f'#jobs tr[data-job="{slow.id}"]')).to_have_count(0)
            expect(page.locator('#graph g.node[data-name="slow"]')).to_have_count(0)
            assert s.catalog.relation("slow") is None
    assert script_errors == []
