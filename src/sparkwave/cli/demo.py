"""`sparkwave demo`: a live Nexmark pipeline with a few MVs, one more created part-way through."""

from __future__ import annotations

import shutil
import time

from rich.console import Console

from sparkwave.cli.nexmark_sql import QUERIES, tables_sql
from sparkwave.frontend.session import Session, connect
from sparkwave.meta.barrier import EpochReport

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



def run_demo(console: Console, warehouse: str, seconds: float) -> int:
    shutil.rmtree(warehouse, ignore_errors=True)
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

    started = time.time()
    with connect(warehouse, barrier_interval_ms=1000, on_epoch=on_epoch) as s:
        session.append(s)
        try:
            s.sql(tables_sql(2300))
            s.sql(FIRST_MVS)
            console.print("[bold]pipeline running:[/] tables person, auction, bid; MVs bids_above_90k, bids_in_euro, "
                          "west_coast_sellers (join + aggregate), busiest_auctions_10s (TUMBLE window)")
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
            while time.time() - started < seconds:
                time.sleep(0.2)
        except KeyboardInterrupt:
            console.print("[bold]interrupted, stopping cleanly ...[/]")
        epoch = s.flush()
        console.print(f"\n[bold]final state at committed epoch {epoch}[/]")
        from sparkwave.cli.main import print_frame

        counts = [{"relation": r.name, "rows": s.table(r.name).count()} for r in s.catalog.relations()]
        print_frame(console, counts, ["relation", "rows"], title="rows per relation")
        for title, query in [("bids_above_90k: top 5 by price",
                              "SELECT * FROM bids_above_90k ORDER BY price DESC LIMIT 5"),
                             ("west_coast_sellers", "SELECT * FROM west_coast_sellers ORDER BY state"),
                             (f"{LATE_MV} (Nexmark q4)", f"SELECT * FROM {LATE_MV} ORDER BY category")]:
            if s.catalog.relation(query.split(" FROM ")[1].split()[0]) is None:
                continue
            df = s.sql(query)
            assert df is not None
            print_frame(console, df.toArrow().to_pylist(), df.columns, title=title)
    return 0
