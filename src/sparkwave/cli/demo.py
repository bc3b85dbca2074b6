"""`sparkwave demo`: a live Nexmark pipeline with a few MVs, one more created part-way through."""

from __future__ import annotations

import shutil
import time

from rich.console import Console

import sparkwave
from sparkwave.meta.barrier import EpochReport

NEXMARK_TABLES = """
CREATE TABLE person (id bigint, name varchar, email_address varchar, credit_card varchar, city varchar,
    state varchar, date_time timestamp, extra varchar, PRIMARY KEY (id))
    WITH (connector = 'nexmark', nexmark.table.type = 'person', nexmark.rows.per.second = '50');
CREATE TABLE auction (id bigint, item_name varchar, description varchar, initial_bid bigint, reserve bigint,
    date_time timestamp, expires timestamp, seller bigint, category bigint, extra varchar, PRIMARY KEY (id))
    WITH (connector = 'nexmark', nexmark.table.type = 'auction', nexmark.rows.per.second = '150');
CREATE TABLE bid (auction bigint, bidder bigint, price bigint, channel varchar, url varchar,
    date_time timestamp, extra varchar)
    WITH (connector = 'nexmark', nexmark.table.type = 'bid', nexmark.rows.per.second = '2300');
"""

FIRST_MVS = """
CREATE MATERIALIZED VIEW bids_above_90k AS
    SELECT auction, bidder, price, date_time FROM bid WHERE price > 90000;
CREATE MATERIALIZED VIEW bids_in_euro AS
    SELECT auction, bidder, CAST(price * 0.908 AS decimal(18, 2)) AS price_eur, channel FROM bid;
CREATE MATERIALIZED VIEW west_coast_people AS
    SELECT id, name, city, state FROM person WHERE state IN ('CA', 'OR', 'WA');
"""



def run_demo(console: Console, warehouse: str, seconds: float) -> int:
    shutil.rmtree(warehouse, ignore_errors=True)
    console.print(f"[bold]sparkwave demo[/] · warehouse [cyan]{warehouse}[/] · Nexmark person/auction/bid, "
                  f"{seconds:.0f} s (Ctrl-C stops it cleanly)")
    console.print("starting Spark (local) ...")

    session: list[sparkwave.Session] = []

    def on_epoch(r: EpochReport) -> None:
        out = ", ".join(f"{k} +{v}" for k, v in r.rows_out.items())
        jobs = "".join(f"\n    [magenta]creating {j.name}: {j.phase} {j.percent:.0f}% "
                       f"({j.rows_done:,}/{j.rows_total:,} rows, {j.rows_per_second:,.0f} rows/s), "
                       f"lag {j.lag_epochs} epochs[/]" for j in (session[0].jobs() if session else []) if j.creating)
        console.print(f"epoch [cyan]{r.epoch}[/]  rows in [green]{r.rows_in:>5}[/]  "
                      f"latency [yellow]{r.latency_ms:6.0f} ms[/]  changes: {out}{jobs}", highlight=False)

    started = time.time()
    with sparkwave.connect(warehouse, barrier_interval_ms=1000, on_epoch=on_epoch) as s:
        session.append(s)
        try:
            s.sql(NEXMARK_TABLES)
            s.sql(FIRST_MVS)
            console.print("[bold]pipeline running:[/] tables person, auction, bid; MVs bids_above_90k, bids_in_euro, "
                          "west_coast_people")
            while time.time() - started < seconds / 2:
                time.sleep(0.2)
            console.print("[bold magenta]creating MV high_bids_by_channel on the live pipeline (snapshot "
                          "backfill in the background; the pipeline keeps committing) ...[/]")
            t0 = time.time()
            s.sql("SET background_ddl = true; SET backfill_chunk_rows = 20000")
            s.sql("CREATE MATERIALIZED VIEW high_bids_by_channel AS "
                  "SELECT auction, price, upper(channel) AS channel FROM bid WHERE price > 50000")
            s.wait()
            job = next(j for j in s.jobs() if j.name == "high_bids_by_channel")
            console.print(f"[bold magenta]high_bids_by_channel joined the pipeline at epoch {job.merged_epoch} "
                          f"after {time.time() - t0:.1f} s ({job.rows_total:,} snapshot rows)[/]")
            while time.time() - started < seconds:
                time.sleep(0.2)
        except KeyboardInterrupt:
            console.print("[bold]interrupted, stopping cleanly ...[/]")
        epoch = s.flush()
        console.print(f"\n[bold]final state at committed epoch {epoch}[/]")
        from sparkwave.cli.main import print_frame

        counts = [{"relation": r.name, "rows": s.table(r.name).count()} for r in s.catalog.relations()]
        print_frame(console, counts, ["relation", "rows"], title="rows per relation")
        for mv in [m for m in ("bids_above_90k", "high_bids_by_channel") if s.catalog.relation(m)]:
            df = s.sql(f"SELECT * FROM {mv} ORDER BY price DESC LIMIT 5")
            assert df is not None
            print_frame(console, df.toArrow().to_pylist(), df.columns, title=f"{mv}: top 5 by price")
    return 0
