"""The commit step of an epoch with 20 and 40 changed MVs (21 and 41 changed relations): each
relation's Delta commit inside the epoch before the catalog commit (`inline`, as before issue 47:
`Committer.commit` of d731358, re-created here as `InlineCommitter`), against the catalog
commit alone with the Delta follower committing behind (`follower`, today's). Reports the commit
step's and the epoch's p50 / p99 and the Delta versions written per epoch. Epochs are driven by hand,
back to back, 50 rows each; the two variants alternate in rounds to share the machine's noise.
`cpu()` measures the Delta work alone, without Spark: the process CPU (all threads: delta-rs commits
on its own runtime) of 10 epochs x 41 relations, one version per relation and epoch against one per
relation and group of 5 epochs."""

from __future__ import annotations

import shutil
import time

import pyarrow as pa

import sparkwave
from bench.common import fresh_dir, pct, report, spark
from sparkwave.core.schema import Column, Schema, SqlType
from sparkwave.meta.barrier.commit import Committer, EpochReport
from sparkwave.meta.pipeline import Commit
from sparkwave.storage.table import StoredTable
from sparkwave.stream.epoch_work import EpochWork

EPOCHS = 15  # per round and variant
ROUNDS = 2


class InlineCommitter(Committer):
    """The commit step as it was: every changed relation's Delta version on the pool, then the catalog."""

    def commit(self, e: EpochWork, pool, rows_in: int, t0: float, step_ms: dict[str, float]) -> EpochReport:
        sources = {r.name for r in e.relations if r.kind == "source"}
        changed = [n for n, c in e.chunks.items() if c is not None and c.num_rows > 0 and n not in sources]
        logs = list(pool.map(lambda n: (n, *self.rt.stored(self.rt.relation(n)).commit_log(e.epoch)), changed))
        offsets = {rel: {s: end for s, (_, end) in splits.items()} for rel, splits in e.plan.get("sources", {}).items()}
        latency = (time.time() - t0) * 1000
        self.rt.catalog.commit_epoch(e.epoch, logs, offsets, rows_in, latency, e.bad.rows, e.bad.counts)
        self._forget_consumed_dml()
        commit = Commit(e.epoch, e.chunks, t0, time.time(), rows_in)
        for listener in self.listeners:
            listener.on_commit(commit)
        return EpochReport(e.epoch, rows_in, {r: n for r, _, n, _ in logs}, latency, step_ms)


def run(n_mvs: int) -> list[str]:
    wh = fresh_dir(f"delta-commit-{n_mvs}")
    times: dict[str, list[float]] = {"inline": [], "follower": []}
    epochs: dict[str, list[float]] = {"inline": [], "follower": []}
    with sparkwave.connect(wh, spark=spark(), barrier_interval_ms=3_600_000) as s:
        s.sql("CREATE TABLE t (id bigint, v int, c varchar, PRIMARY KEY (id))")
        for i in range(n_mvs):
            s.sql(f"CREATE MATERIALIZED VIEW m{i} AS SELECT id, v * {i + 1} AS w, upper(c) AS c FROM t")
        follower, inline = s.loop.committer, InlineCommitter(s.rt, s.loop.committer.listeners)
        next_id = 0
        for _ in range(ROUNDS):
            for name, committer in (("inline", inline), ("follower", follower)):
                follower.delta.drain()  # each variant starts with the Delta logs caught up
                s.loop.committer = committer
                original = committer.commit

                def timed_commit(*args, _original=original, _name=name, **kwargs):
                    t0 = time.perf_counter()
                    out = _original(*args, **kwargs)
                    times[_name].append((time.perf_counter() - t0) * 1000)
                    return out

                committer.commit = timed_commit  # type: ignore[method-assign]
                for _ in range(EPOCHS):
                    rows = ", ".join(f"({next_id + j}, {j}, 'x{j}')" for j in range(50))
                    next_id += 50
                    s.sql(f"INSERT INTO t VALUES {rows}")
                    report_ = s.loop.run_epoch()
                    assert report_ is not None and len(report_.rows_out) == n_mvs + 1
                    epochs[name].append(report_.latency_ms)
                del committer.commit
        s.loop.committer = follower
        follower.delta.drain()
    lines = []
    for name in ("inline", "follower"):
        lines.append(f"| {n_mvs + 1} | {name} | {pct(times[name], 50):.1f} | {pct(times[name], 99):.1f} | "
                     f"{pct(epochs[name], 50):.0f} | {pct(epochs[name], 99):.0f} |")
    return lines


def cpu(relations: int = 41, epochs: int = 10, group: int = 5) -> str:
    schema = Schema((Column("k", SqlType("int")), Column("v", SqlType("varchar"))), ("k",))

    def tables(tag: str) -> list[StoredTable]:
        root = fresh_dir(f"delta-cpu-{tag}")
        out = [StoredTable(root / f"t{i}", f"t{i}", schema) for i in range(relations)]
        for t in out:
            t.create()
            for e in range(1, epochs + 1):
                t.stage_log(e, pa.table({"_seq": pa.array(range(50), pa.int64()), "_op": pa.array([1] * 50, pa.int8()),
                                         "_vnode": pa.array([0] * 50, pa.int16()), "k": pa.array(range(50), pa.int32()),
                                         "v": pa.array(["x"] * 50), "_epoch": pa.array([e] * 50, pa.int64())}))
        return out

    inline, grouped = tables("inline"), tables("grouped")
    c0 = time.process_time()
    for e in range(1, epochs + 1):
        for t in inline:
            t.commit_log(e)
    c1 = time.process_time()
    for first in range(1, epochs + 1, group):
        for t in grouped:
            t.commit_logs([(e, t.log_file_path(e), 50) for e in range(first, min(epochs, first + group - 1) + 1)])
    c2 = time.process_time()
    for t in (*inline, *grouped):
        shutil.rmtree(t.root, ignore_errors=True)
    return (f"Delta commits of {relations} relations, CPU per epoch: one version per epoch "
            f"{(c1 - c0) / epochs * 1000:.0f} ms, one per {group} epochs {(c2 - c1) / epochs * 1000:.0f} ms")


def main() -> str:
    lines = ["| changed relations | Delta commits | commit step p50 ms | p99 ms | epoch p50 ms | epoch p99 ms |",
             "|---|---|---|---|---|---|"]
    for n in (20, 40):
        lines += run(n)
    lines += ["", cpu()]
    return report("Commit step: Delta commits inline vs behind the catalog (Delta follower)", lines)


if __name__ == "__main__":
    main()
