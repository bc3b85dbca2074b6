"""A postgres-cdc table run in a child process by the CDC crash test and killed by
`SPARKWAVE_CRASH_AT`: the CDC backfill in chunks of 40 rows while the upstream table takes
transactions between epochs, an MV over it created before and one during the backfill.

Usage: python -m tests.pgcdc_crash_child WAREHOUSE PROGRESS_FILE, with SPARKWAVE_PGCDC (the JSON
of host, port, user, password, database, slot [, epochs, drop, key]) naming the upstream PostgreSQL, whose
table `t` exists (slots are the server's: each case names its own); with `drop`, the MVs and the table
are dropped after the epochs; with `key` "numeric", its `id` is a numeric (ordered by PostgreSQL)."""

from __future__ import annotations

import json
import os
import sys

import sparkwave
from sparkwave.core.spark import create_spark
from tests import TEST_MASTER
from tests.pgcdc_util import DECLARED, MVS, Upstream

EPOCHS = 12


class Server:
    """What `pgcdc_util.options` reads of a server."""

    def __init__(self, d: dict) -> None:
        self.host, self.port, self.user, self.password = d["host"], d["port"], d["user"], d["password"]


def create(s, pg, db: str, slot: str, key: str) -> None:
    from tests.pgcdc_util import options
    opts = options(pg, db, "t", **{"snapshot.batch_size": "40", "slot.name": slot})
    declared = DECLARED.replace("id int", "id decimal(12,0)") if key == "numeric" else DECLARED
    s.sql(f"CREATE TABLE t ({declared}) WITH ({opts})")
    s.sql(f"CREATE MATERIALIZED VIEW even AS {MVS['even'].format(t='t')}")


def main(warehouse: str, progress: str) -> None:
    conf = json.loads(os.environ["SPARKWAVE_PGCDC"])
    pg = Server(conf)
    dsn = f"host={pg.host} port={pg.port} user={pg.user} password={pg.password} dbname={conf['database']}"
    up = Upstream(dsn, ddl=None, seed=4900)
    spark = create_spark(TEST_MASTER)
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=3_600_000) as s:
        create(s, pg, conf["database"], conf["slot"], conf.get("key", "int"))
        for i in range(conf.get("epochs", EPOCHS)):
            if i == 2:
                s.sql(f"CREATE MATERIALIZED VIEW per_name AS {MVS['per_name'].format(t='t')}")
            up.churn(3)
            with open(progress, "a") as f:
                f.write(f"{i}\n")
            s.flush()
        s.flush()
        if conf.get("drop"):
            for mv in ("even", "per_name"):
                if s.catalog.relation(mv) is not None:
                    s.sql(f"DROP MATERIALIZED VIEW {mv}")
            s.sql("DROP TABLE t")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
