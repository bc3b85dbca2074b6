"""Unbounded streams, bounded state (issue 48): a simulated 6-hour event-time run.

Nexmark person/auction/bid, each epoch taking exactly `BIDS` bids (and the auctions and persons
between them), event time advancing `EPOCH_EVENT_S` seconds an epoch, epochs back to back. Four
MVs: q5 (HOP windows), q7 (a window's max joined back to its bids), an interval join of bids with
their auction's first 10 s, and a temporal filter keeping the last 10 minutes of bids (`NOW()`
advancing with event time). Run twice in one process: with `WATERMARK FOR date_time` on the tables
(state below the watermark cleaned) and without (state grows with the stream). Figures: state rows
and bytes of the four MVs at hour 6 as a ratio of hour 1 (target <= 1.1x with watermarks), and
epoch latency (median of the epochs around each hour) hour 6 / hour 1 (target <= 1.1x). Epochs
run back to back by FLUSH, with a compaction every 5 epochs as the maintenance thread would run
one every 5 barrier intervals."""

from __future__ import annotations

import os
import statistics

import sparkwave
from bench.common import fresh_dir, report, spark
from sparkwave.cli.nexmark_sql import QUERIES
from sparkwave.connectors.nexmark import BASE_TIME_S
from sparkwave.core import clock
from sparkwave.frontend.relation_sizes import RelationSizes

BIDS = int(os.environ.get("SPARKWAVE_BENCH_EVENT_BIDS", 4_600))  # bids an epoch
HOURS = int(os.environ.get("SPARKWAVE_BENCH_EVENT_HOURS", 6))
EPOCH_EVENT_S = int(os.environ.get("SPARKWAVE_BENCH_EVENT_EPOCH_S", 180))  # event seconds an epoch
COMPACT_EVERY = 5  # epochs between compactions (the loop runs epochs back to back, by FLUSH)
WINDOW = 5  # epochs around an hour mark whose latencies are compared
EVENTS = BIDS * 50 // 46  # all three kinds' events an epoch
GAP_NS = EPOCH_EVENT_S * 10**9 // EVENTS

MVS = {
    "q5": QUERIES["q5"],
    "q7": QUERIES["q7"],
    "interval_join": """SELECT b.auction, b.price, a.seller, b.date_time
        FROM bid b JOIN auction a ON b.auction = a.id
        AND b.date_time BETWEEN a.date_time AND a.date_time + INTERVAL '10' SECOND""",
    "recent_bids": """SELECT auction, price, date_time FROM bid
        WHERE date_time > NOW() - INTERVAL '10' MINUTE""",
}


def tables(watermarks: bool) -> str:
    wm = ", WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND" if watermarks else ""
    common = (f"nexmark.min.event.gap.in.ns = '{GAP_NS}', nexmark.rows.per.second = '1000000'")
    return f"""
CREATE TABLE auction (id bigint, item_name varchar, description varchar, initial_bid bigint, reserve bigint,
    date_time timestamp, expires timestamp, seller bigint, category bigint, extra varchar{wm})
    APPEND ONLY WITH (connector = 'nexmark', nexmark.table.type = 'auction',
    max.rows.per.epoch = '{BIDS * 3 // 46}', {common});
CREATE TABLE bid (auction bigint, bidder bigint, price bigint, channel varchar, url varchar,
    date_time timestamp, extra varchar{wm})
    APPEND ONLY WITH (connector = 'nexmark', nexmark.table.type = 'bid', max.rows.per.epoch = '{BIDS}', {common});
"""


def state_size(s: sparkwave.Session, sizes: RelationSizes, mv: str) -> tuple[int, int]:
    epoch = s.committed_epoch
    rows = bytes_ = 0
    for rel in s.catalog.relations(internal=True):
        if rel.kind == "state" and rel.name.startswith(mv + "."):
            size = sizes.size(rel, epoch)
            rows, bytes_ = rows + size.rows, bytes_ + size.bytes
    return rows, bytes_


def run(watermarks: bool) -> dict[str, dict[int, tuple[int, int, float]]]:
    """Per MV, per hour (1 and HOURS): (state rows, state bytes, median epoch ms around the hour)."""
    epochs_per_hour = 3600 // EPOCH_EVENT_S
    marks = {1: epochs_per_hour, HOURS: HOURS * epochs_per_hour}
    out: dict[str, dict[int, tuple[int, int, float]]] = {mv: {} for mv in MVS}
    latencies: list[float] = []
    wh = fresh_dir(f"event-time-{'wm' if watermarks else 'plain'}")
    flushed = [0]  # NOW() follows event time: the next epoch's bids end `EPOCH_EVENT_S` later
    clock.use(lambda: (BASE_TIME_S + (flushed[0] + 1) * EPOCH_EVENT_S) * 1_000_000)
    with sparkwave.connect(wh, spark=spark(), barrier_interval_ms=3_600_000,
                           on_epoch=lambda r: latencies.append(r.latency_ms)) as s:
        s.sql(tables(watermarks))
        for mv, sql in MVS.items():
            s.sql(f"CREATE MATERIALIZED VIEW {mv} AS {sql}")
        sizes = RelationSizes(s.catalog)
        for n in range(1, max(marks.values()) + WINDOW // 2 + 1):
            s.flush()
            flushed[0] = n
            if n % COMPACT_EVERY == 0:  # what the maintenance thread does every 5 barrier intervals
                s.compact()
            for hour, at in marks.items():
                if n == at:
                    around = latencies[-WINDOW:]
                    for mv in MVS:
                        rows, size = state_size(s, sizes, mv)
                        out[mv][hour] = (rows, size, statistics.median(around))
    clock.use(None)
    return out


def main() -> None:
    lines = [f"{BIDS:,} bids an epoch, {EPOCH_EVENT_S} s of event time an epoch, {HOURS} hours "
             f"({HOURS * 3600 // EPOCH_EVENT_S} epochs); state of each MV's state tables at the committed epoch.", "",
             "| MVs | watermarks | state rows h1 | h6 | ratio | state KB h1 | h6 | ratio | epoch ms h1 | h6 | ratio |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for watermarks in (True, False):
        result = run(watermarks)
        for mv, by_hour in result.items():
            (r1, b1, l1), (r6, b6, l6) = by_hour[1], by_hour[HOURS]
            lines.append(f"| {mv} | {'yes' if watermarks else 'no'} | {r1:,} | {r6:,} | {r6 / max(r1, 1):.2f}x | "
                         f"{b1 / 1e3:,.0f} | {b6 / 1e3:,.0f} | {b6 / max(b1, 1):.2f}x | {l1:.0f} | {l6:.0f} | "
                         f"{l6 / max(l1, 1e-9):.2f}x |")
    report("Event time: state and latency over 6 hours (`bench/bench_event_time.py`)", lines)


if __name__ == "__main__":
    main()
