"""Watermarks of connector-fed relations: a Kafka source's watermark is kept per partition and is the
least of them (a partition running behind holds it back, so its rows are not late), rows below it
are dropped and counted, and an MV created on the source later (a source backfill from Kafka) agrees;
Nexmark and datagen tables with watermarks feed EMIT ON WINDOW CLOSE MVs that equal the closed
windows of the same MVs without EOWC at every epoch."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.kafka_util import Topic
from tests.oracle import multiset, rows_of
from tests.oracle_watermark import micros, tumble_start

T0 = datetime(2026, 1, 1)
SEC = 1_000_000
# per epoch: (partition, seconds after T0) messages; partition 1 runs behind partition 0
EPOCHS = [
    [(0, 30), (0, 31), (1, 2)],            # watermark min(26, -3) = -3 s: partition 1 holds it back
    [(0, 40), (1, 1), (1, 9), (0, 20)],    # all on time; min(35, 4) = 4 s
    [(1, 30), (0, 22), (1, 3)],            # (1, 3) late; min(35, 25) = 25 s
    [(0, 50), (1, 45), (1, 24), (0, 26), (0, 10)],  # (1, 24) and (0, 10) late
]
TUMBLE = "SELECT window_start, count(*) AS n FROM TUMBLE(ev, ts, INTERVAL '10' SECOND) GROUP BY window_start"


def _model(epochs: list[list[tuple[int, int]]]) -> tuple[list[tuple[int, int]], int, int | None]:
    """The rows kept, the late count and the watermark, as the source keeps them (per partition)."""
    kept: list[tuple[int, int]] = []
    late, w, per = 0, None, {}
    for rows in epochs:
        on_time = [(p, t) for p, t in rows if w is None or T0_US(t) >= w]
        late += len(rows) - len(on_time)
        kept += on_time
        for p, t in on_time:
            per[p] = max(per.get(p, T0_US(t) - 5 * SEC), T0_US(t) - 5 * SEC)
        if per:
            w = min(per.values()) if w is None else max(w, min(per.values()))
    return kept, late, w


def T0_US(seconds: int) -> int:  # noqa: N802 - reads as the time it is
    return micros(T0 + timedelta(seconds=seconds))


def test_a_kafka_source_keeps_a_watermark_per_partition_and_drops_late_rows(session, kafka):
    s = session
    topic = Topic(kafka.bootstrap, 2)
    s.sql(f"CREATE SOURCE ev (k int, ts timestamp, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) "
          f"INCLUDE partition AS p WITH ({topic.options()}) FORMAT PLAIN ENCODE JSON")
    s.sql("CREATE MATERIALIZED VIEW rows_kept AS SELECT k, ts FROM ev")
    s.sql(f"CREATE MATERIALIZED VIEW closed AS {TUMBLE} EMIT ON WINDOW CLOSE")
    k = 0
    for i, rows in enumerate(EPOCHS):
        for p, t in rows:
            topic.produce({"k": k, "ts": (T0 + timedelta(seconds=t)).isoformat()}, p)
            k += 1
        topic.flush()
        s.flush()
        kept, late, w = _model(EPOCHS[: i + 1])
        epoch = s.catalog.committed_epoch()
        assert s.catalog.watermark("ev", epoch) == w
        assert s.catalog.late_rows().get("ev", 0) == late
        assert sorted(micros(r[1]) for r in rows_of(s.table("rows_kept"))) == sorted(T0_US(t) for _, t in kept)
        windows: dict[int, int] = {}
        for _, t in kept:
            windows[(T0_US(t) // (10 * SEC)) * 10 * SEC] = windows.get((T0_US(t) // (10 * SEC)) * 10 * SEC, 0) + 1
        closed = {(T0 + timedelta(microseconds=start - T0_US(0)), n) for start, n in windows.items()
                  if start < tumble_start(w, 10)}
        assert multiset(rows_of(s.table("closed"))) == multiset(closed), i
    assert late >= 3
    s.sql(f"CREATE MATERIALIZED VIEW closed_later AS {TUMBLE} EMIT ON WINDOW CLOSE")  # a source backfill
    s.flush()
    assert multiset(rows_of(s.table("closed_later"))) == multiset(rows_of(s.table("closed")))


def test_generated_tables_feed_eowc_equal_to_the_closed_windows(session):
    s = session
    s.sql("CREATE TABLE bid (auction bigint, price bigint, date_time timestamp, "
          "WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) WITH (connector = 'nexmark', "
          "nexmark.table.type = 'bid', nexmark.rows.per.second = '5000', max.rows.per.epoch = '2000', "
          "nexmark.min.event.gap.in.ns = '1000000')")
    s.sql("CREATE TABLE dg (k int, ts timestamp, WATERMARK FOR ts AS ts - INTERVAL '3' SECOND) WITH ("
          "connector = 'datagen', datagen.split.num = '2', fields.ts.kind = 'sequence', "
          "fields.ts.start = '2026-01-01 00:00:00', fields.ts.end = '2026-01-02 00:00:00', "
          "datagen.rows.per.second = '100', max.rows.per.epoch = '40')")
    queries = {
        "b": ("bid", "SELECT window_start, count(*) AS n, max(price) AS mx FROM TUMBLE(bid, date_time, "
                     "INTERVAL '1' SECOND) GROUP BY window_start"),
        "d": ("dg", "SELECT window_start, window_end, count(*) AS n FROM HOP(dg, ts, INTERVAL '2' SECOND, "
                    "INTERVAL '6' SECOND) GROUP BY window_start, window_end"),
    }
    for name, (_, sql) in queries.items():
        s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        s.sql(f"CREATE MATERIALIZED VIEW {name}_e AS {sql} EMIT ON WINDOW CLOSE")
    for _ in range(4):
        s.flush()
        epoch = s.catalog.committed_epoch()
        for name, (table, _) in queries.items():
            w = s.catalog.watermark(table, epoch)
            assert w is not None
            size, slide = (1, None) if name == "b" else (6, 2)
            limit = tumble_start(w, size) if slide is None else ((w - size * SEC) // (slide * SEC)) * slide * SEC \
                + slide * SEC
            # both read as of the epoch whose watermark is `w`: the loop may commit another meanwhile
            everything = rows_of(s.table(name, as_of=epoch))
            closed = rows_of(s.table(f"{name}_e", as_of=epoch))
            assert multiset(closed) == multiset(r for r in everything if micros(r[0]) < limit), name
            assert len(everything) > len(closed), "no window was still open"
    assert s.catalog.split_watermarks("dg", s.catalog.committed_epoch()).keys() == {"0", "1"}
    assert s.catalog.late_rows() == {}
