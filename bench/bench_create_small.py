"""A small CREATE on a live pipeline: how long a foreground `CREATE MATERIALIZED VIEW` over a ~10k-row
snapshot takes until the MV is live (merged into the main graph).

The pipeline is the demo's: Nexmark person/auction/bid at 2,300 bids/s with the demo's four MVs and
q4 (and `SPARKWAVE_BENCH_CREATE_EXTRA` more of bench_many_mvs' mixed MVs, default 5, so that an
epoch takes most of the 1 s barrier interval, as the demo's did when issue 47 was filed), plus
`items`, a keyed datagen table upserting 2,000 rows a second over 10,000 keys (so its snapshot stays
near 10k rows while every epoch changes it) and `cats`, 100 keyed rows. Three shapes over `items`: a
projection with a filter, a group-by aggregate, a join with an aggregate; each created, timed and
dropped, with the in-band catch-up (`policy.CATCH_UP_EPOCHS`) and without it (0: the lag rule's
out-of-band log store alone, as before), alternating in one process; round 0 is a warm-up.
Target (issue 47): <= 1.5 s, about a barrier interval."""

from __future__ import annotations

import os
import time

import sparkwave
from bench.bench_many_mvs import mv_sql
from bench.common import fresh_dir, median, report, spark
from sparkwave.cli.demo import FIRST_MVS
from sparkwave.cli.nexmark_sql import QUERIES, tables_sql
from sparkwave.core import policy

ROUNDS = int(os.environ.get("SPARKWAVE_BENCH_CREATE_ROUNDS", 4))  # round 0 is a warm-up
EXTRA = int(os.environ.get("SPARKWAVE_BENCH_CREATE_EXTRA", 5))
KEYS = 10_000
ITEMS = f"""CREATE TABLE items (id bigint, cat int, price bigint, name varchar, PRIMARY KEY (id)) WITH (
    connector = 'datagen', datagen.rows.per.second = '2000', fields.id.kind = 'random', fields.id.min = '0',
    fields.id.max = '{KEYS - 1}', fields.id.seed = '1', fields.cat.min = '0', fields.cat.max = '99',
    fields.price.min = '0', fields.price.max = '100000', fields.name.length = '8');
CREATE TABLE cats (id int, label varchar, PRIMARY KEY (id)) WITH (connector = 'datagen',
    datagen.rows.per.second = '20', fields.id.kind = 'random', fields.id.min = '0', fields.id.max = '99',
    fields.label.length = '3')"""
SHAPES = {
    "project + filter": "SELECT id, price * 2 AS p2, upper(name) AS un FROM items WHERE price % 3 <> 0",
    "group-by aggregate": "SELECT cat, count(*) AS n, sum(price) AS s FROM items GROUP BY cat",
    "join + aggregate": "SELECT c.label, count(*) AS n, max(i.price) AS mx "
                        "FROM items i JOIN cats c ON i.cat = c.id GROUP BY c.label",
}
MODES = {"in band": policy.CATCH_UP_EPOCHS, "lag rule only": 0}


def create_once(s: sparkwave.Session, sql: str, catch_up_epochs: int) -> tuple[float, int, int]:
    """Seconds of one foreground CREATE, the snapshot's rows and the epochs committed meanwhile."""
    policy.CATCH_UP_EPOCHS = catch_up_epochs
    before = s.committed_epoch
    t0 = time.perf_counter()
    s.sql(f"CREATE MATERIALIZED VIEW m AS {sql}")
    took = time.perf_counter() - t0
    job = next(j for j in s.jobs() if j.name == "m")
    assert not job.creating, "a foreground CREATE returned before its MV was live"
    rows = s.table("items", as_of=job.created_epoch).count()
    epochs = len(s.catalog.committed_epochs(since=before + 1))
    s.sql("DROP MATERIALIZED VIEW m")
    return took, rows, epochs


def main() -> str:
    took: dict[tuple[str, str], list[float]] = {}
    epochs: dict[tuple[str, str], list[int]] = {}
    rows: list[int] = []
    latencies: list[float] = []
    with sparkwave.connect(fresh_dir("create-small"), spark=spark(), barrier_interval_ms=1000,
                           on_epoch=lambda r: latencies.append(r.latency_ms)) as s:
        s.sql(tables_sql(2300))
        s.sql(ITEMS)
        s.sql("SET background_ddl = true")
        s.sql(FIRST_MVS)
        s.sql(f"CREATE MATERIALIZED VIEW q4 AS {QUERIES['q4']}")
        for _, _, create in mv_sql(EXTRA):
            s.sql(create)
        s.wait()
        s.sql("SET background_ddl = false")
        while s.sql("SELECT count(*) AS n FROM items").toArrow()["n"][0].as_py() < KEYS * 0.95:
            time.sleep(1)
        latencies.clear()
        for r in range(ROUNDS):
            for shape, sql in SHAPES.items():
                order = list(MODES.items()) if r % 2 == 0 else list(reversed(MODES.items()))
                for mode, n in order:
                    t, snap, e = create_once(s, sql, n)
                    print(f"round {r} {shape} / {mode}: {t:.2f} s ({snap} rows, {e} epochs)", flush=True)
                    if r:
                        took.setdefault((shape, mode), []).append(t)
                        epochs.setdefault((shape, mode), []).append(e)
                        rows.append(snap)
    policy.CATCH_UP_EPOCHS = MODES["in band"]
    lines = ["| shape | in band: CREATE s (median) | lag rule only: CREATE s (median) | in band / lag rule only | "
             "epochs committed during (in band / lag rule only) |", "|---|---|---|---|---|"]
    for shape in SHAPES:
        new, old = took[(shape, "in band")], took[(shape, "lag rule only")]
        lines.append(f"| {shape} | {', '.join(f'{t:.2f}' for t in new)} (**{median(new):.2f}**) | "
                     f"{', '.join(f'{t:.2f}' for t in old)} ({median(old):.2f}) | {median(new) / median(old):.2f}x | "
                     f"{median(epochs[(shape, 'in band')]):.0f} / {median(epochs[(shape, 'lag rule only')]):.0f} |")
    lines += ["", f"Snapshots of {min(rows):,}-{max(rows):,} rows; the demo MVs and {EXTRA} more; epoch latency "
                  f"meanwhile p50 {median(latencies):.0f} ms; barrier interval 1 s; rounds 1-{ROUNDS - 1} (round 0 "
                  "warm-up). Target: <= 1.5 s."]
    return report("A small CREATE on a live pipeline (demo MVs, 2,300 bids/s)", lines)


if __name__ == "__main__":
    main()
