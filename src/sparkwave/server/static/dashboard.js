// sparkwave dashboard: polls /api/overview every second and draws it; /relations/<name> draws one
// relation's page from /api/relations/<name>. No framework, no build step, no network but this
// server. Every value is put in the page as text (textContent, setAttribute), never as HTML:
// relation names, SQL, errors and sample rows are user input.
"use strict";

(() => {
  const POLL_MS = 1000;
  const PAGE_POLL_MS = 3000;
  const CHART_SECONDS = 300;
  const CHART_BUCKETS = 60;
  const SVG_NS = "http://www.w3.org/2000/svg";
  const CSRF = {"X-Sparkwave-Request": "1"};

  // --- building elements --------------------------------------------------------------------
  function fill(node, children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function setAttrs(node, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else if (k === "class") node.setAttribute("class", v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    return node;
  }

  const put = (node, ...children) => { node.replaceChildren(); return fill(node, children); };
  const h = (tag, attrs, ...children) => fill(setAttrs(document.createElement(tag), attrs), children);
  const s = (tag, attrs, ...children) => fill(setAttrs(document.createElementNS(SVG_NS, tag), attrs), children);

  // --- formatting ---------------------------------------------------------------------------
  const num = (n) => (n === null || n === undefined) ? "–" : Number(n).toLocaleString("en-US");
  function bytes(n) {
    if (n === null || n === undefined) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return `${i ? n.toFixed(1) : n} ${units[i]}`;
  }
  function rate(n) {
    if (n === null || n === undefined) return "–";
    return n >= 100 ? `${num(Math.round(n))}/s` : `${Number(n).toFixed(1)}/s`;
  }
  function duration(sec) {
    if (sec === null || sec === undefined) return "–";
    if (sec < 1) return `${Math.round(sec * 1000)} ms`;
    if (sec < 90) return `${sec.toFixed(1)} s`;
    if (sec < 5400) return `${Math.floor(sec / 60)} min ${Math.round(sec % 60)} s`;
    return `${Math.floor(sec / 3600)} h ${Math.round((sec % 3600) / 60)} min`;
  }
  const clock = (t) => t ? new Date(t * 1000).toLocaleTimeString("en-GB") : "–";
  const slug = (text) => String(text || "").replace(/[^a-z0-9]+/gi, "-").toLowerCase();
  const pill = (text, cls) => h("span", {class: `pill ${slug(cls || text)}`}, text);
  const relLink = (name) => h("a", {href: `/relations/${encodeURIComponent(name)}`}, name);
  const empty = (text) => h("div", {class: "empty"}, text);

  function table(headers, rows, emptyText) {
    if (!rows.length) return empty(emptyText);
    return h("div", {class: "scroll"}, h("table", null,
      h("thead", null, h("tr", null, headers.map(([label, cls]) => h("th", {class: cls}, label)))),
      h("tbody", null, rows)));
  }

  function section(id, title, note) {
    const body = h("div", {class: "body"});
    const node = h("section", {id}, h("h2", null, title, note ? h("span", {class: "muted"}, note) : null), body);
    return {node, body};
  }

  function sectionError(body, data) {
    if (data && !Array.isArray(data) && data.error) {
      body.replaceChildren(h("p", {class: "error"}, `could not compute this section: ${data.error}`));
      return true;
    }
    return false;
  }

  let toastTimer = null;
  function toast(text, bad) {
    document.querySelectorAll(".toast").forEach((t) => t.remove());
    const t = h("div", {class: bad ? "toast bad" : "toast", role: "status"}, text);
    document.body.append(t);
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => t.remove(), 5000);
  }

  async function getJson(url) {
    const r = await fetch(url, {credentials: "same-origin", cache: "no-store"});
    const body = await r.json().catch(() => ({error: `${r.status} ${r.statusText}`}));
    if (!r.ok) throw new Error(body.error || `${r.status} ${r.statusText}`);
    return body;
  }

  // --- the header ---------------------------------------------------------------------------
  function header(data) {
    const e = data.epochs && !data.epochs.error ? data.epochs : null;
    document.getElementById("epoch").textContent =
      `epoch ${data.committed_epoch}` + (e && e.committed_at ? ` · committed ${clock(e.committed_at)}` : "");
    const st = document.getElementById("status");
    const failing = data.pipeline_error || data.status !== "ok";
    st.className = `pill ${failing ? "failed" : "ok"}`;
    st.textContent = data.status !== "ok" ? data.status : (data.pipeline_error ? "epochs failing" : "running");
    st.title = data.pipeline_error || "";
  }

  // --- the graph ----------------------------------------------------------------------------
  const NODE_W = 214, NODE_H = 66, COL_GAP = 70, ROW_GAP = 16, PAD = 8;

  function layout(nodes) {
    const byName = new Map(nodes.map((n) => [n.name, n]));
    const depth = new Map();
    const depthOf = (n, seen) => {
      if (depth.has(n.name)) return depth.get(n.name);
      if (seen.has(n.name)) return 0;
      seen.add(n.name);
      const ups = (n.upstreams || []).map((u) => byName.get(u)).filter(Boolean);
      const d = ups.length ? 1 + Math.max(...ups.map((u) => depthOf(u, seen))) : 0;
      depth.set(n.name, d);
      return d;
    };
    nodes.forEach((n) => depthOf(n, new Set()));
    const columns = [];
    nodes.forEach((n) => { (columns[depth.get(n.name)] ||= []).push(n); });
    const pos = new Map();
    columns.forEach((col, d) => {
      if (d > 0) {  // near the upstreams they read: fewer crossing edges
        const centre = (n) => {
          const ys = (n.upstreams || []).map((u) => pos.get(u)).filter(Boolean).map((p) => p.y);
          return ys.length ? ys.reduce((a, b) => a + b, 0) / ys.length : 0;
        };
        col.sort((a, b) => centre(a) - centre(b));
      }
      col.forEach((n, i) => pos.set(n.name, {x: PAD + d * (NODE_W + COL_GAP), y: PAD + i * (NODE_H + ROW_GAP)}));
    });
    const rows = Math.max(1, ...columns.map((c) => c.length));
    return {pos, width: PAD * 2 + columns.length * (NODE_W + COL_GAP) - COL_GAP, height: PAD * 2 + rows * (NODE_H + ROW_GAP) - ROW_GAP};
  }

  function nodeLine(n) {
    const parts = [];
    if (n.rows !== null && n.rows !== undefined) parts.push(`${num(n.rows)} rows`);
    parts.push(rate(n.rows_per_second));
    if (n.state_bytes !== null && n.state_bytes !== undefined) parts.push(`state ${bytes(n.state_bytes)}`);
    else if (n.bytes !== null && n.bytes !== undefined) parts.push(bytes(n.bytes));
    return parts.join(" · ");
  }

  const KIND = {table: "table", source: "source", mv: "materialized view", sink: "sink"};

  function drawGraph(body, nodes) {
    if (sectionError(body, nodes)) return;
    if (!nodes.length) { body.replaceChildren(empty("No relations yet: CREATE TABLE, SOURCE or MATERIALIZED VIEW.")); return; }
    const {pos, width, height} = layout(nodes);
    const root = s("svg", {class: "graph", viewBox: `0 0 ${Math.max(width, 400)} ${height}`, role: "img",
                           "aria-label": "the relation graph", height: height});
    root.style.maxWidth = `${Math.max(width, 400)}px`;
    for (const n of nodes) {
      const to = pos.get(n.name);
      for (const u of n.upstreams || []) {
        const from = pos.get(u);
        if (!from) continue;
        const x1 = from.x + NODE_W, y1 = from.y + NODE_H / 2, x2 = to.x, y2 = to.y + NODE_H / 2;
        const mid = (x1 + x2) / 2;
        root.append(s("path", {class: "edge", d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`}));
      }
    }
    for (const n of nodes) {
      const p = pos.get(n.name);
      const linked = n.kind !== "sink";
      const g = s("g", {class: `node ${slug(n.kind)} ${slug(n.status)}${linked ? " link" : ""}`,
                        transform: `translate(${p.x},${p.y})`, "data-name": n.name, "data-kind": n.kind,
                        "data-status": n.status, tabindex: linked ? 0 : null});
      const name = n.name.length > 26 ? `${n.name.slice(0, 25)}…` : n.name;
      g.append(
        s("title", null, `${KIND[n.kind] || n.kind} ${n.name}: ${n.status}${n.error ? `\n${n.error}` : ""}`),
        s("rect", {class: "box", width: NODE_W, height: NODE_H, rx: 7}),
        s("rect", {class: "stripe", width: 5, height: NODE_H - 2, x: 1, y: 1, rx: 2}),
        s("text", {class: "name", x: 14, y: 20}, name),
        s("text", {class: "meta", x: 14, y: 38}, `${KIND[n.kind] || n.kind} · `,
          s("tspan", {class: `status-${slug(n.status)}`}, n.status)),
        s("text", {class: "meta", x: 14, y: 55}, nodeLine(n)));
      if (linked) {
        const go = () => { location.href = `/relations/${encodeURIComponent(n.name)}`; };
        g.addEventListener("click", go);
        g.addEventListener("keydown", (ev) => { if (ev.key === "Enter") go(); });
      }
      root.append(g);
    }
    const legend = h("div", {class: "legend"}, ["table", "source", "mv", "sink"].map(
      (k) => h("span", null, h("i", {class: k}), KIND[k])));
    body.replaceChildren(h("div", {class: "scroll"}, root), legend);
  }

  // --- epochs -------------------------------------------------------------------------------
  function quantile(sorted, q) {
    return sorted.length ? sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)] : null;
  }

  function chart(series, now) {
    const W = 1100, H = 190, L = 56, R = 64, T = 10, B = 24;
    // the last CHART_SECONDS, or less (whole minutes, at least one) while the history is younger
    const oldest = series.length ? series[0].committed_at : now;
    const span = Math.min(CHART_SECONDS, Math.max(60, Math.ceil((now - oldest) / 60) * 60));
    const start = now - span, step = span / CHART_BUCKETS;
    const buckets = Array.from({length: CHART_BUCKETS}, () => ({lat: [], rows: 0}));
    for (const p of series) {
      const i = Math.floor((p.committed_at - start) / step);
      if (i < 0 || i >= CHART_BUCKETS) continue;
      buckets[i].lat.push(p.latency_seconds);
      buckets[i].rows += p.rows_in;
    }
    const stats = buckets.map((b) => {
      const sorted = b.lat.slice().sort((a, c) => a - c);
      return {p50: quantile(sorted, 0.5), p99: quantile(sorted, 0.99), rows: b.rows};
    });
    const maxLat = Math.max(0.01, ...stats.map((x) => x.p99 || 0));
    const maxRows = Math.max(1, ...stats.map((x) => x.rows));
    const x = (i) => L + (i + 0.5) * (W - L - R) / CHART_BUCKETS;
    const yLat = (v) => T + (H - T - B) * (1 - v / maxLat);
    const yRows = (v) => T + (H - T - B) * (1 - v / maxRows);
    const svg = s("svg", {class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img",
                          "aria-label": "epoch latency p50 and p99 and rows in, over the last minutes"});
    const bw = (W - L - R) / CHART_BUCKETS * 0.7;
    stats.forEach((st, i) => {
      if (st.rows) svg.append(s("rect", {class: "rows", x: x(i) - bw / 2, y: yRows(st.rows), width: bw, height: H - B - yRows(st.rows)}));
    });
    for (const key of ["p50", "p99"]) {
      let d = "";
      stats.forEach((st, i) => { if (st[key] !== null) d += `${d ? "L" : "M"}${x(i).toFixed(1)},${yLat(st[key]).toFixed(1)} `; });
      if (d) svg.append(s("path", {class: key, d}));
    }
    svg.append(s("line", {class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B}),
      s("line", {class: "axis", x1: L, y1: T, x2: L, y2: H - B}),
      s("text", {class: "tick", x: L - 6, y: T + 8, "text-anchor": "end"}, duration(maxLat)),
      s("text", {class: "tick", x: L - 6, y: H - B, "text-anchor": "end"}, "0"),
      s("text", {class: "tick", x: W - R + 6, y: T + 8}, `${num(maxRows)} rows`),
      s("text", {class: "tick", x: L, y: H - 6}, `${span / 60} min ago`),
      s("text", {class: "tick", x: W - R, y: H - 6, "text-anchor": "end"}, "now"));
    const keys = h("div", {class: "keys"}, h("span", null, h("i", {class: "p50"}), "latency p50"),
      h("span", null, h("i", {class: "p99"}), "latency p99"), h("span", null, h("i", {class: "rows"}), "rows in"),
      h("span", null, `each point and bar: the epochs committed in ${duration(step)}`));
    return [svg, keys];
  }

  function drawEpochs(body, e, now) {
    if (sectionError(body, e)) return;
    const stat = (value, label) => h("div", {class: "stat"}, h("b", null, value), h("span", null, label));
    const stats = h("div", {class: "stats"},
      stat(String(e.committed_epoch), "committed epoch"),
      stat(e.committed_at ? `${clock(e.committed_at)}` : "–", `committed at (${e.committed_at ? duration(Math.max(0, now - e.committed_at)) + " ago" : "not yet"})`),
      stat(duration(e.latency_p50), "latency p50"),
      stat(duration(e.latency_p99), "latency p99"),
      stat(num(e.committed_total), "epochs committed"),
      stat(num(e.failed_total), "attempts failed"));
    const failures = (e.failures || []).slice(-10).reverse().map((f) => h("tr", null,
      h("td", {class: "num"}, clock(f.at)), h("td", null, f.relation ? relLink(f.relation) : "–"),
      h("td", {class: "num"}, f.epoch === null ? "–" : String(f.epoch)), h("td", {class: "wrap error"}, f.error)));
    put(body, stats,
      e.pipeline_error ? h("p", {class: "error"}, `The next epoch is failing and being retried: ${e.pipeline_error}`) : null,
      chart(e.series || [], now),
      h("h3", null, "Failures"),
      table([["time", "num"], ["relation"], ["epoch", "num"], ["error"]], failures, "No failed epoch in the window."));
  }

  // --- jobs: rows kept across polls, so a button is never replaced under the pointer ---------
  const jobRows = new Map();

  async function control(id, action, button) {
    if (action === "cancel" && !confirm(`Cancel job ${id}? What it built so far is removed.`)) return;
    button.disabled = true;
    try {
      const r = await fetch(`/api/jobs/${encodeURIComponent(id)}/${action}`,
                            {method: "POST", headers: CSRF, credentials: "same-origin"});
      const body = await r.json().catch(() => ({}));
      if (!r.ok) throw new Error(body.error || `${r.status} ${r.statusText}`);
      toast(`job ${id}: ${action} (${body.statement})`);
    } catch (err) {
      toast(`job ${id}: ${action} failed: ${err.message}`, true);
    } finally {
      button.disabled = false;
      poll();
    }
  }

  function jobRow(j) {
    const cell = (cls) => h("td", {class: cls});
    const r = {
      tr: h("tr", {"data-job": j.id}), id: cell("num"), name: cell(), kind: cell(), phase: cell(),
      bar: h("div", {class: "bar"}, h("span")), barLabel: h("div", {class: "bar-label"}),
      rate: cell("num"), eta: cell("num"), lag: cell("num"), limit: cell("num"), error: cell("wrap error"),
    };
    const mk = (action, label, cls) => h("button", {class: cls, "data-action": action,
                                                    onclick: (ev) => control(j.id, action, ev.currentTarget)}, label);
    r.pause = mk("pause", "Pause");
    r.resume = mk("resume", "Resume");
    r.cancel = mk("cancel", "Cancel", "danger");
    r.tr.append(r.id, r.name, r.kind, r.phase, h("td", null, r.bar, r.barLabel), r.rate, r.eta, r.lag, r.limit,
                h("td", {class: "actions"}, r.pause, r.resume, r.cancel), r.error);
    return r;
  }

  function updateJob(r, j) {
    r.tr.dataset.rowsDone = String(j.rows_done);
    r.tr.dataset.phase = j.paused ? "paused" : j.phase;
    r.id.textContent = String(j.id);
    r.name.replaceChildren(j.kind === "sink" ? j.name : relLink(j.name));
    r.kind.textContent = j.kind;
    r.phase.replaceChildren(pill(j.paused ? "paused" : j.phase));
    const pct = Math.max(0, Math.min(1, j.progress || 0));
    r.bar.className = j.paused ? "bar paused" : "bar";
    r.bar.firstChild.style.width = `${(pct * 100).toFixed(1)}%`;
    r.barLabel.textContent = `${num(j.rows_done)} / ${num(j.rows_total)} rows (${(pct * 100).toFixed(1)}%)`;
    r.rate.textContent = rate(j.rows_per_second);
    r.eta.textContent = j.paused ? "paused" : duration(j.eta_seconds);
    r.lag.textContent = `${num(j.lag_epochs)} epochs · ${duration(j.lag_seconds)}`;
    r.limit.textContent = j.rate_limit === null || j.rate_limit === undefined ? "none" : `${num(j.rate_limit)}/s`;
    r.pause.disabled = j.paused;
    r.resume.disabled = !j.paused;
    r.error.textContent = j.error || "";
  }

  function drawJobs(body, jobs) {
    if (sectionError(body, jobs)) { jobRows.clear(); return; }
    if (!jobs.length) { jobRows.clear(); body.replaceChildren(empty("No creating job: every MV and sink has joined the main graph.")); return; }
    let tbody = body.querySelector("tbody");
    if (!tbody) {
      jobRows.clear();
      const heads = [["id", "num"], ["relation"], ["kind"], ["phase"], ["progress"], ["rows/s", "num"], ["ETA", "num"],
                     ["lag", "num"], ["rate limit", "num"], ["control"], ["error"]];
      body.replaceChildren(table(heads, [h("tr")], ""));
      tbody = body.querySelector("tbody");
      tbody.replaceChildren();
    }
    const seen = new Set();
    for (const j of jobs) {
      seen.add(j.id);
      let r = jobRows.get(j.id);
      if (!r) { r = jobRow(j); jobRows.set(j.id, r); }
      updateJob(r, j);
      tbody.append(r.tr);  // in order; an existing row moves without being rebuilt
    }
    for (const [id, r] of jobRows) if (!seen.has(id)) { r.tr.remove(); jobRows.delete(id); }
  }

  // --- sources and sinks --------------------------------------------------------------------
  function drawSources(body, parts) {
    if (sectionError(body, parts)) return;
    body.replaceChildren(table(
      [["relation"], ["connector"], ["topic"], ["partition", "num"], ["offset", "num"], ["high watermark", "num"],
       ["behind", "num"], ["bad records", "num"], ["status"]],
      parts.map((p) => h("tr", {"data-relation": p.relation},
        h("td", null, relLink(p.relation)), h("td", null, p.connector), h("td", null, p.topic || "–"),
        h("td", {class: "num"}, p.partition), h("td", {class: "num"}, num(p.committed_offset)),
        h("td", {class: "num"}, num(p.high_watermark)), h("td", {class: "num"}, num(p.behind)),
        h("td", {class: "num"}, num(p.bad_records)), h("td", {class: "wrap"}, p.status || "reading"))),
      "No relation is fed by a connector."));
  }

  function drawSinks(body, sinks) {
    if (sectionError(body, sinks)) return;
    body.replaceChildren(table(
      [["sink"], ["from"], ["target"], ["phase"], ["delivered epoch", "num"], ["lag", "num"], ["rows/s", "num"],
       ["last error"]],
      sinks.map((k) => h("tr", {"data-sink": k.name},
        h("td", null, k.name), h("td", null, relLink(k.mv)), h("td", null, `${k.connector}: ${k.target}`),
        h("td", null, pill(k.phase)), h("td", {class: "num"}, String(k.delivered_epoch)),
        h("td", {class: "num"}, `${num(k.lag_epochs)} epochs · ${duration(k.lag_seconds)}`),
        h("td", {class: "num"}, rate(k.rows_per_second)), h("td", {class: "wrap error"}, k.last_error || ""))),
      "No sinks."));
  }

  // --- the overview page --------------------------------------------------------------------
  const parts = {};
  let lastOk = 0;
  let polling = false;

  function overviewPage() {
    const main = document.getElementById("main");
    parts.graph = section("graph", "Pipeline", "tables and sources → materialized views → sinks; click one to open it");
    parts.epochs = section("epochs", "Epochs", `the last ${CHART_SECONDS / 60} minutes at most`);
    parts.jobs = section("jobs", "Jobs", "creating MVs and sink backfills");
    parts.sources = section("sources", "Sources", "per partition");
    parts.sinks = section("sinks", "Sinks");
    main.replaceChildren(parts.graph.node, parts.epochs.node, parts.jobs.node, parts.sources.node, parts.sinks.node);
  }

  async function poll() {
    if (polling) return;
    polling = true;
    try {
      const data = await getJson("/api/overview");
      header(data);
      drawGraph(parts.graph.body, data.graph || []);
      drawEpochs(parts.epochs.body, data.epochs || {error: "missing"}, data.now);
      drawJobs(parts.jobs.body, data.jobs || []);
      drawSources(parts.sources.body, data.sources || []);
      drawSinks(parts.sinks.body, data.sinks || []);
      lastOk = Date.now();
      document.body.dataset.updated = String(lastOk);
    } catch (err) {
      const st = document.getElementById("status");
      st.className = "pill failed";
      st.textContent = "disconnected";
      st.title = err.message;
    } finally {
      polling = false;
    }
  }

  function ticker() {
    const el = document.getElementById("updated");
    el.textContent = lastOk ? `updated ${duration((Date.now() - lastOk) / 1000)} ago` : "";
  }

  // --- a relation's page ----------------------------------------------------------------------
  function drawRelation(p) {
    document.title = `${p.name} · sparkwave`;
    const main = document.getElementById("main");
    const links = (names) => names && names.length ? names.map((n, i) => [i ? ", " : "", relLink(n)]) : "none";
    const head = h("section", {id: "relation"},
      h("h1", null, p.name, " ", pill(p.status)),
      h("p", null, h("span", {class: "muted"}, `${KIND[p.kind] || p.kind} · `),
        `${num(p.rows)} rows · ${bytes(p.bytes)}`, h("span", {class: "muted"}, " · reads "), links(p.upstreams),
        h("span", {class: "muted"}, " · read by "), links(p.downstreams)),
      p.job ? h("div", null, h("span", {class: "muted"}, `job ${p.job.id}: `), pill(p.job.paused ? "paused" : p.job.phase),
        ` ${num(p.job.rows_done)} / ${num(p.job.rows_total)} rows, ${rate(p.job.rows_per_second)}, ETA ${duration(p.job.eta_seconds)}`) : null);
    const sql = section("sql", "SQL");
    sql.body.append(p.sql ? h("pre", null, p.sql) : empty("No SQL: created by a CREATE TABLE or SOURCE."));
    const cols = section("columns", "Columns");
    cols.body.append(table([["name"], ["type"], ["key"]], (p.columns || []).filter((c) => !c.hidden).map(
      (c) => h("tr", null, h("td", null, c.name), h("td", null, c.type), h("td", null, c.is_key ? "key" : ""))), "No columns."));
    const plan = section("plan", "Plan", "EXPLAIN: operators, their keys and state tables");
    plan.body.append(p.plan && p.plan.length ? h("pre", null, p.plan.join("\n")) : empty("No plan: only a materialized view has one."));
    const states = section("state", "State tables");
    states.body.append(table([["state table"], ["holds"], ["key"], ["rows", "num"], ["bytes", "num"]],
      (p.state_tables || []).map((t) => h("tr", null, h("td", null, h("code", null, t.name)), h("td", {class: "wrap"}, t.description),
        h("td", null, (t.key || []).join(", ")), h("td", {class: "num"}, num(t.rows)), h("td", {class: "num"}, bytes(t.bytes)))),
      "No state tables."));
    const sample = section("sample", "Sample rows", p.sample ? `at epoch ${p.sample.epoch}` : null);
    if (p.sample) {
      sample.body.append(table(p.sample.columns.map((c) => [c]), p.sample.rows.map(
        (row) => h("tr", null, row.map((v) => h("td", {class: "wrap"}, v === null ? "NULL" : typeof v === "object" ? JSON.stringify(v) : String(v))))),
        "No rows."));
    } else sample.body.append(empty(p.sample_error || "No sample."));
    main.replaceChildren(head, h("div", {class: "grid2"}, sql.node, cols.node), plan.node, states.node, sample.node);
  }

  async function pollRelation(name) {
    if (polling) return;  // a slow page (a Spark sample) is not asked for again before it answers
    polling = true;
    try {
      const p = await getJson(`/api/relations/${encodeURIComponent(name)}`);
      drawRelation(p);
      lastOk = Date.now();
      document.body.dataset.updated = String(lastOk);
      const st = document.getElementById("status");
      st.className = "pill ok";
      st.textContent = "connected";
    } catch (err) {
      document.getElementById("main").replaceChildren(h("section", null, h("h1", null, name), h("p", {class: "error"}, err.message)));
    } finally {
      polling = false;
    }
  }

  function start() {
    const m = location.pathname.match(/^\/relations\/([^/]+)$/);
    if (m) {
      const name = decodeURIComponent(m[1]);
      document.getElementById("epoch").textContent = name;
      pollRelation(name);
      setInterval(() => pollRelation(name), PAGE_POLL_MS);
    } else {
      overviewPage();
      poll();
      setInterval(poll, POLL_MS);
    }
    setInterval(ticker, 500);
  }

  document.addEventListener("DOMContentLoaded", start);
})();
