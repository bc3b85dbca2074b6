"""Big epochs on the executors (`big_epoch_rows`), in two parts.

1. Where the two paths cross: one epoch of N changed bids (a keyed table) through a join + aggregate
   MV (bids JOIN auctions GROUP BY seller: count, sum, max), on the driver (`big_epoch_rows = N`)
   and on the executors (`big_epoch_rows = 0`), alternately in one process: the epoch's latency
   on each path, their ratio, and the driver process's peak RSS growth during the epoch.
2. A 5M-row bulk load in one epoch (`dml_rows_per_epoch = 5000000`), then 2M of its bids updated in
   another, both above the default `big_epoch_rows`, in a child process whose Spark driver has
   `spark.driver.memory=1g` and whose Python process's data segment is capped (RLIMIT_DATA: its
   size once started + 1 GiB): the MV equals DuckDB's evaluation of the same query over the same
   rows, and the driver's peak RSS growth.
3. State lookups that follow the change: a join's state of S auctions, compacted (sorted by id),
   looked up on the executors by a backlog of bids on the newest 10,000 of them, at several state
   sizes, bounded by the change's key range and over the whole state (after a warm-up of each,
   three times each, alternating, in one process): how the lookup's time grows with the state."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time

import sparkwave
from bench.common import fresh_dir, median, report, spark

AUCTIONS, SELLERS = 10_000, 500
MV = ("SELECT a.seller, count(*) AS n, sum(b.price) AS s, max(b.price) AS mx "
      "FROM bids b JOIN auctions a ON b.auction = a.id GROUP BY a.seller")
BIDS = "id + {off} AS id, (id * 13) % {auctions} AS auction, ((id + {off}) * 7919 + {salt}) % 100000 AS price"
SIZES = [int(x) for x in os.environ.get("SPARKWAVE_BENCH_BIG_SIZES", "50000,250000,1000000").split(",")]
BULK = int(os.environ.get("SPARKWAVE_BENCH_BULK", 5_000_000))
UPDATED = BULK * 2 // 5  # more than the default big_epoch_rows too


class PeakRss:
    """The process's peak resident memory above its level at start, sampled every 10 ms."""

    def __init__(self) -> None:
        self.base = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, _rss())

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())

    @property
    def growth_mb(self) -> float:
        return (self.peak - self.base) / 2**20


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def pipeline(name: str) -> sparkwave.Session:
    s = sparkwave.connect(fresh_dir(name), spark=spark(), barrier_interval_ms=3_600_000)
    s.sql("CREATE TABLE auctions (id bigint, seller bigint, PRIMARY KEY (id)); "
          "CREATE TABLE bids (id bigint, auction bigint, price bigint, PRIMARY KEY (id)); "
          "SET compaction_epochs = 1000000")
    s.insert("auctions", spark().range(AUCTIONS).selectExpr("id", f"id % {SELLERS} AS seller"))
    s.flush()
    s.sql(f"CREATE MATERIALIZED VIEW sellers AS {MV}")
    return s


def bids(n: int, off: int = 0, salt: int = 0):
    return spark().range(n).selectExpr(*[e.strip() for e in BIDS.format(off=off, salt=salt, auctions=AUCTIONS)
                                         .split(", ")])


def crossover() -> str:
    lines = ["| changed bids | driver s | executors s | executors / driver | driver RSS +MB | executors RSS +MB |",
             "|---|---|---|---|---|---|"]
    for n in SIZES:
        times: dict[str, list[float]] = {"driver": [], "executors": []}
        rss: dict[str, list[float]] = {"driver": [], "executors": []}
        for path in ["driver", "executors"] * 2:
            s = pipeline(f"big-{n}-{path}")
            s.sql(f"SET big_epoch_rows = {0 if path == 'executors' else n}; SET dml_rows_per_epoch = {n}")
            s.insert("bids", bids(n))
            with PeakRss() as mem:
                t0 = time.perf_counter()
                s.flush()
                times[path].append(time.perf_counter() - t0)
            rss[path].append(mem.growth_mb)
            s.close()
        d, x = median(times["driver"]), median(times["executors"])
        lines.append(f"| {n:,} | {d:.2f} | {x:.2f} | {x / d:.2f}x | {max(rss['driver']):.0f} | "
                     f"{max(rss['executors']):.0f} |")
    return report("Big epochs: driver against executors (join + aggregate MV, one epoch)", lines)


def bulk_child() -> None:
    """Part 2, in the capped child process; prints its figures as JSON."""
    import duckdb

    s = pipeline("big-bulk")
    s.sql(f"SET dml_rows_per_epoch = {BULK}")
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    with open("/proc/self/status") as f:
        data = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmData:"))
    resource.setrlimit(resource.RLIMIT_DATA, (data + 2**30, hard))
    out: dict[str, float] = {"data_cap_mb": (data + 2**30) / 2**20}
    with PeakRss() as mem:
        s.insert("bids", bids(BULK))
        t0 = time.perf_counter()
        s.flush()
        out["load_s"] = time.perf_counter() - t0
        s.insert("bids", bids(UPDATED, off=BULK // 2, salt=1))
        t0 = time.perf_counter()
        s.flush()
        out["update_s"] = time.perf_counter() - t0
    out["rss_growth_mb"] = mem.growth_mb
    got = sorted(tuple(r) for r in s.sql("SELECT seller, n, s, mx FROM sellers").collect())
    s.close()
    db = duckdb.connect()
    db.sql(f"CREATE TABLE auctions AS SELECT id, id % {SELLERS} AS seller FROM range({AUCTIONS}) t(id)")
    db.sql(f"CREATE TABLE bids AS SELECT {BIDS.format(off=0, salt=0, auctions=AUCTIONS)} FROM range({BULK}) t(id)")
    db.sql(f"CREATE TABLE upd AS SELECT {BIDS.format(off=BULK // 2, salt=1, auctions=AUCTIONS)} "
           f"FROM range({UPDATED}) t(id)")
    db.sql("CREATE TABLE final AS SELECT * FROM bids WHERE id NOT IN (SELECT id FROM upd) UNION ALL SELECT * FROM upd")
    want = sorted(tuple(r) for r in db.sql(MV.replace("bids b", "final b")).fetchall())
    out["exact"] = float(got == want)
    out["groups"] = float(len(got))
    print("RESULT " + json.dumps(out), flush=True)


def bulk() -> str:
    env = {**os.environ, "SPARKWAVE_DRIVER_MEMORY": "1g"}
    proc = subprocess.run([sys.executable, "-m", "bench.bench_big_epoch", "--bulk"], env=env, capture_output=True,
                          text=True, check=False)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"the bulk-load child failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n"
                           f"{proc.stderr[-4000:]}")
    r = json.loads(line[len("RESULT "):])
    lines = [f"- {BULK:,} bids in one epoch: {r['load_s']:.1f} s; {UPDATED:,} of them updated in the next: "
             f"{r['update_s']:.1f} s",
             f"- spark.driver.memory=1g; Python data segment capped at {r['data_cap_mb']:,.0f} MB; driver Python "
             f"peak RSS growth {r['rss_growth_mb']:.0f} MB",
             f"- MV ({int(r['groups'])} sellers) equal to DuckDB: {'yes' if r['exact'] else 'NO'}"]
    return report("Big epochs: a 5M-row bulk load with a capped driver", lines)


FOLLOW_SIZES = [int(x) for x in os.environ.get("SPARKWAVE_BENCH_FOLLOW_SIZES", "1000000,4000000,8000000").split(",")]
FOLLOW_BIDS = 200_000
FOLLOW_AUCTIONS = 10_000  # the newest auctions the bids are on, whatever the state's size
FOLLOW_MV = ("SELECT b.auction, a.item, count(*) AS n FROM bids b JOIN auctions a ON b.auction = a.id "
             "GROUP BY b.auction, a.item")


def follow() -> str:
    from pyspark.sql import functions as F

    from sparkwave.core.zset_frames import semi
    from sparkwave.stream.operator import FrameIO

    lines = ["| auctions (state rows) | bounded s | whole state s | whole / bounded |", "|---|---|---|---|"]
    figures: list[tuple[float, float]] = []
    for size in FOLLOW_SIZES:
        s = sparkwave.connect(fresh_dir(f"follow-{size}"), spark=spark(), barrier_interval_ms=3_600_000)
        s.sql("CREATE TABLE auctions (id bigint, item varchar, PRIMARY KEY (id)); "
              "CREATE TABLE bids (id bigint, auction bigint, price bigint, PRIMARY KEY (id)); "
              f"SET compaction_epochs = 1000000; SET dml_rows_per_epoch = {size}; "
              f"CREATE MATERIALIZED VIEW per_auction AS {FOLLOW_MV}")
        s.insert("auctions", spark().range(size).selectExpr(  # Nexmark's item names are about 60 characters
            "id", "concat('item ', id, ' ', repeat(substr(sha2(cast(id AS string), 256), 1, 8), 7)) AS item"))
        s.flush()
        s.compact()  # the join's auction state: a base sorted by id
        state = next(x for x in s.catalog.relation("per_auction").definition["states"] if x.endswith("r"))
        io = FrameIO(rt=s.rt, inputs={}, owner="per_auction", prev=s.committed_epoch, epoch=s.committed_epoch + 1)
        key = s.rt.relation(f"per_auction.{state}").schema.key[0]
        recent = size - FOLLOW_AUCTIONS  # a backlog of bids on the newest auctions
        keys = spark().range(FOLLOW_BIDS).select((F.lit(recent) + F.col("id") % FOLLOW_AUCTIONS).alias(key)).distinct()
        keys = io.shared(keys)
        keys.count()
        times: dict[str, list[float]] = {"bounded": [], "whole": []}
        for way in ["bounded", "whole"] * 4:  # the first of each warms up
            io.ranges.clear()
            t0 = time.perf_counter()
            found = semi(io.state_rows(state, (keys, key, key) if way == "bounded" else None), keys, [key]).count()
            times[way].append(time.perf_counter() - t0)
            assert found == FOLLOW_AUCTIONS, f"the lookup found {found} auctions, not {FOLLOW_AUCTIONS}"
        io.release()
        s.close()
        b, w = median(times["bounded"][1:]), median(times["whole"][1:])
        figures.append((b, w))
        lines.append(f"| {size:,} | {b:.2f} | {w:.2f} | {w / b:.2f}x |")
    (b0, w0), (b1, w1) = figures[0], figures[-1]
    lines.append(f"\nFrom {FOLLOW_SIZES[0]:,} to {FOLLOW_SIZES[-1]:,} state rows the lookup takes {b1 / b0:.2f}x "
                 f"as long bounded and {w1 / w0:.2f}x over the whole state.")
    return report(f"Big epochs: a join state's lookup of {FOLLOW_BIDS:,} bids' auctions (the newest "
                  f"{FOLLOW_AUCTIONS:,})", lines)


def main() -> list[str]:
    return [crossover(), bulk(), follow()]


if __name__ == "__main__":
    if "--bulk" in sys.argv:
        bulk_child()
    elif "--follow" in sys.argv:
        follow()
    else:
        main()
