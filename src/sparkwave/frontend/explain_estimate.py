"""What a `CREATE MATERIALIZED VIEW`'s backfill would cost, for `EXPLAIN CREATE ...`: the rows and
bytes it reads of each upstream at the committed epoch (the catalog's file listings: a base's row
count, each log file's rows, the files' sizes; a source's history as Kafka offsets), a bound on the
rows it writes into the MV and each state table, where it runs (`core/policy.py`), and how long it
takes at the backfill rate measured on this warehouse (its creating jobs' recent checkpoints), or
"no rate measured yet". Nothing is read but the catalog and file sizes; nothing is written."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from sparkwave.core import policy
from sparkwave.core.catalog import Catalog, Phase, Relation
from sparkwave.frontend.plan.explain import INDENT, state_tables
from sparkwave.frontend.plan.planner import MvPlan
from sparkwave.stream.aggregate import Aggregate
from sparkwave.stream.join import Join
from sparkwave.stream.operator import Operator
from sparkwave.stream.scan import Scan
from sparkwave.stream.table_side import TableSide
from sparkwave.stream.values import Values

RATE_JOBS = 5  # the backfill rate is measured over this many of the warehouse's most recent backfills


@dataclass(frozen=True)
class Read:
    """What a backfill reads of one upstream as of the committed epoch."""

    relation: str
    rows: int
    bytes: int | None  # None: a source, read from Kafka
    files: int

    def __str__(self) -> str:
        if self.bytes is None:
            return f"reads {self.relation}: {self.rows:,} messages of the source's history, from Kafka"
        files = f"{self.files:,} file" + ("" if self.files == 1 else "s")
        return f"reads {self.relation}: {self.rows:,} rows, {_bytes(self.bytes)} in {files}"


@dataclass(frozen=True)
class Rate:
    rows_per_second: float
    jobs: int  # the backfills it was measured over


@dataclass(frozen=True)
class BackfillSettings:
    """The settings a backfill runs under (`meta/settings.py`, or the CREATE's WITH options)."""

    strategy: str = "snapshot"
    big_epoch_rows: int = policy.BIG_EPOCH_ROWS
    rate_limit: int | None = None


def estimate(catalog: Catalog, name: str, plan: MvPlan, settings: BackfillSettings) -> list[str]:
    """The estimate block EXPLAIN CREATE prints under the tree."""
    epoch = catalog.committed_epoch()
    reads = [read(catalog, catalog_relation(catalog, u), epoch) for u in plan.upstreams]
    total = sum(r.rows for r in reads)
    on_disk = [r for r in reads if r.bytes is not None and r.rows]
    width = sum(r.bytes or 0 for r in on_disk) / sum(r.rows for r in on_disk) if on_disk else None
    bounds = _Bounds({r.relation: r.rows for r in reads})
    lines = [f"Backfill estimate (strategy {settings.strategy}, as of epoch {epoch}; nothing is created):"]
    lines += [INDENT + str(r) for r in reads]
    lines.append(INDENT + f"writes {name}: {bounds.words(plan.root, width)}")
    ops = {state: op for op in plan.root.walk() for state in op.state_tables()}
    for table, words in state_tables(name, plan):
        suffix = table.split(".", 1)[1]
        lines.append(INDENT + f'writes {table} "{words}": {bounds.state_words(ops[suffix], suffix, width)}')
    lines.append(INDENT + "runs: " + _where(plan, total, settings.big_epoch_rows))
    lines.append(INDENT + "takes: " + _time(total, measured_rate(catalog), settings.rate_limit))
    return lines


def catalog_relation(catalog: Catalog, name: str) -> Relation:
    rel = catalog.relation(name)
    assert rel is not None, f"BUG: the planner read relation {name!r}, which the catalog no longer has"
    return rel


def read(catalog: Catalog, rel: Relation, epoch: int) -> Read:
    """What a snapshot of `rel` as of `epoch` reads: its newest base and the log files after it."""
    if rel.kind == "source":
        start = rel.spec.startup_offsets
        rows = sum(max(0, end - start.get(p, 0)) for p, end in catalog.source_offsets(rel.name).items())
        return Read(rel.name, rows, None, 0)
    base = catalog.base_at(rel.name, epoch)
    after = base.epoch if base else 0
    logs = catalog.log_files(rel.name, after, epoch)
    files = (base.files if base else []) + [f.path for f in logs]
    rows = (base.rows if base else 0) + sum(r.rows for r in catalog.log_file_rows(rel.name, after, epoch))
    return Read(rel.name, rows, sum(_size(f) for f in files), len(files))


def measured_rate(catalog: Catalog) -> Rate | None:
    """Snapshot rows per second over the warehouse's most recent backfills that checkpointed: each
    one's rows over the time from its start (or its oldest kept checkpoint) to its last checkpoint."""
    rows = seconds = 0.0
    jobs = 0
    for job in sorted(catalog.jobs(), key=lambda j: j.started_at, reverse=True):
        steps = [s for s in catalog.job_steps(job.id) if s.phase == Phase.SNAPSHOT]
        if not steps or job.strategy == "sink":
            continue
        start = job.started_at if steps[0].step == 1 else steps[0].at
        counted = steps if steps[0].step == 1 else steps[1:]
        span = steps[-1].at - start
        if span <= 0 or not sum(s.rows for s in counted):
            continue
        rows += sum(s.rows for s in counted)
        seconds += span
        jobs += 1
        if jobs == RATE_JOBS:
            break
    return Rate(rows / seconds, jobs) if jobs else None


def _time(rows: int, rate: Rate | None, limit: int | None) -> str:
    if rows == 0:
        return "no time: there is nothing to read"
    if limit == 0:
        return "nothing until resumed: backfill_rate_limit is 0 (paused)"
    if rate is None:
        if limit:
            return f"at least {_seconds(rows / limit)} at backfill_rate_limit {limit:,} rows/s (no rate measured yet)"
        return "no rate measured yet: no backfill on this warehouse has checkpointed"
    per_s = rate.rows_per_second if limit is None else min(rate.rows_per_second, limit)
    limited = f", limited to {limit:,} rows/s by backfill_rate_limit" if limit is not None and limit < \
        rate.rows_per_second else ""
    return (f"about {_seconds(rows / per_s)} at {rate.rows_per_second:,.0f} rows/s, the rate of the last "
            f"{rate.jobs} backfill{'s' if rate.jobs > 1 else ''} on this warehouse{limited}")


def _where(plan: MvPlan, rows: int, big_epoch_rows: int) -> str:
    if plan.root.stateless and policy.builds_stateless_on_driver(rows, big_epoch_rows):
        return (f"on the driver (Arrow), as one epoch of inserts: {rows:,} rows, not more than "
                f"{min(policy.STATELESS_DRIVER_ROWS, big_epoch_rows):,}")
    if plan.root.stateless:
        return "on the executors (Spark), over the upstream's snapshot in chunks of vnodes"
    only_spark = any(isinstance(o, Values) or (isinstance(o, Aggregate) and o.scalar) for o in plan.root.walk())
    if only_spark:  # as `Dataflow.builds_locally`: only a snapshot build makes a scalar aggregate's or VALUES' rows
        return "on the executors (Spark), as a snapshot build: a scalar aggregate's or VALUES' rows only it makes"
    if policy.builds_on_driver(rows, big_epoch_rows):
        return (f"on the driver (Arrow), as one epoch of inserts: {rows:,} rows in all, not more than "
                f"big_epoch_rows ({big_epoch_rows:,})")
    return (f"on the executors (Spark), in chunks of vnodes of its driving upstream: {rows:,} rows in all, more "
            f"than big_epoch_rows ({big_epoch_rows:,})")


class _Bounds:
    """An upper bound on the rows each operator's output holds once the backfill is done."""

    def __init__(self, upstream_rows: dict[str, int]) -> None:
        self.upstream_rows = upstream_rows
        self._memo: dict[int, float] = {}
        self._pairs: set[int] = set()  # the joins bounded by every pair of their sides' rows

    def rows(self, op: Operator) -> float:
        if op.id not in self._memo:
            self._memo[op.id] = self._rows(op)
        return self._memo[op.id]

    def _rows(self, op: Operator) -> float:
        if isinstance(op, Scan):
            return self.upstream_rows.get(op.relation, 0) * (op.window.size // op.window.slide
                                                             if op.window and op.window.slide else 1)
        if isinstance(op, Values):
            return len(op.rows)
        if isinstance(op, Aggregate):
            return 1 if op.scalar else self.rows(op.input)
        if isinstance(op, Join):
            return self._join(op)
        return self.rows(op.inputs[0]) if op.inputs else 0

    def _join(self, op: Join) -> float:
        left, right = self.rows(op.left), self.rows(op.right)
        if op.op == "asof_join":
            return left  # each left row once, matched or (ASOF LEFT) padded
        padded = {"left": left, "right": right, "full": left + right}.get(op.join_type, 0)
        # a side matched on its whole key matches each row of the other side at most once
        if op.right.key and set(op.right.key) <= set(op.right_keys):
            return left + padded
        if op.left.key and set(op.left.key) <= set(op.left_keys):
            return right + padded
        self._pairs.add(op.id)
        return left * right + padded  # a many-to-many join: at most every pair

    def words(self, op: Operator, width: float | None) -> str:
        rows = self.rows(op)
        if math.isinf(rows) or rows > 10**15:
            return "no useful bound (a many-to-many join)"
        size = f" (about {_bytes(int(rows * width))} at the upstreams' {width:,.0f} bytes a row)" if width else ""
        pairs = any(o.id in self._pairs for o in op.walk())
        return f"at most {int(rows):,} rows{size}" + (", every pair a many-to-many join could make" if pairs else "")

    def state_words(self, op: Operator, suffix: str, width: float | None) -> str:
        if isinstance(op, Join):
            left = suffix == op.left_state
            child = op.left if left else op.right
            where = op.side("left" if left else "right")
            if isinstance(where, TableSide):
                rows = self.upstream_rows.get(where.relation, 0)
                if policy.links_base(rows):
                    return f"links {where.relation}'s files ({rows:,} rows), writes no copy"
            return self.words(child, width)
        if isinstance(op, Aggregate) and suffix == op.partials_state:
            return self.words(op, width)  # a row per group
        return self.words(op.inputs[0], width)  # a value or window state: at most a row per input row


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0  # removed by retention meanwhile


def _bytes(size: int) -> str:
    n = float(size)
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} TB"


def _seconds(s: float) -> str:
    if s < 1:
        return "under a second"
    if s < 120:
        return f"{s:,.0f} s"
    return f"{s / 60:,.0f} min" if s < 7200 else f"{s / 3600:,.1f} h"
