"""Jobs as users see them: phase, rows done of total, recent rows/s, ETA, lag. Computed from the
catalog alone, so another process (`sparkwave jobs --watch`) sees the same as the owner."""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from sparkwave.core.catalog import ALL_UPSTREAMS, Catalog, JobRow, Phase
from sparkwave.core.chunk import VNODES
from sparkwave.core.offsets import slot_ranges
from sparkwave.meta.lag_rule import LagRule

RATE_WINDOW_S = 10.0  # rows/s is measured over the checkpoints of this recent window
NOTE = "note: "  # a sink's error that is no failure: what its target changed of a delivery (it runs on)


@dataclass(frozen=True)
class UpstreamProgress:
    """How much of one upstream's snapshot at S a creating job has read."""

    relation: str
    rows_done: int
    rows_total: int
    # A source's history, per partition: (partition, offset read up to, end offset at S).
    offsets: tuple[tuple[str, int, int], ...] = ()

    def __str__(self) -> str:
        parts = "".join(f" p{p} {done}/{end}" for p, done, end in self.offsets)
        return f"{self.relation} {self.rows_done:,}/{self.rows_total:,}{parts}"


@dataclass(frozen=True)
class ChunkProgress:
    """One snapshot checkpoint: the upstream rows of vnodes `[lo, hi)`; `attempts` > 1 after a crash
    or a failure re-read it."""

    lo: int
    hi: int
    rows: int
    state: str  # 'reading' | 'done'
    attempts: int


@dataclass(frozen=True)
class JobInfo:
    id: int
    name: str
    kind: str  # 'table' | 'source' | 'materialized view'
    strategy: str  # 'snapshot' | 'blocking' | '-' (tables)
    phase: str  # 'snapshot' | 'log store' | 'merging' | 'created' | 'failed' (out of the pipeline)
    rows_done: int  # snapshot rows read
    rows_total: int
    percent: float
    rows_per_second: float  # recent, over the last RATE_WINDOW_S
    eta_seconds: float | None
    lag_epochs: int  # main-graph epochs not yet consumed
    lag_seconds: float
    rate_limit: int | None  # rows/s; None = unlimited, 0 = paused
    started_at: datetime
    created_epoch: int  # the epoch the relation is readable from
    merged_epoch: int | None  # the epoch a creating job joined the main graph at
    held_back: int  # main-graph epochs this job delayed under the lag rule
    error: str | None  # the last failed checkpoint's error, while it is being retried
    upstreams: tuple[UpstreamProgress, ...] = ()  # the snapshot phase per upstream
    chunks: tuple[ChunkProgress, ...] = ()  # the snapshot phase per vnode range

    @property
    def creating(self) -> bool:
        return self.phase not in ("created", "failed")


@dataclass(frozen=True)
class SinkInfo:
    """A sink as `SHOW SINKS` shows it."""

    name: str
    mv: str
    connector: str
    target: str  # the table, topic or location
    mode: str  # upsert | append-only | debezium
    phase: str  # 'snapshot' (its backfill) | 'running' | 'paused' | 'retrying'
    epoch: int  # delivered up to (the snapshot epoch S while backfilling)
    lag_epochs: int
    lag_seconds: float
    lag_bytes: int  # of the MV's log files not yet delivered
    rows_per_second: float
    rate_limit: int | None
    decouple: bool
    error: str | None
    job: int


def sink_infos(catalog: Catalog, now: float | None = None) -> list[SinkInfo]:
    now = time.time() if now is None else now
    jobs = {j.id: j for j in catalog.jobs()}
    out = []
    for s in catalog.sinks():
        job = jobs.get(s.job)
        if job is None:
            continue
        consumed = job.consumed_epoch or 0
        lag = LagRule.lag(catalog, consumed)
        since = now - RATE_WINDOW_S
        rate = sum(st.rows for st in catalog.job_steps(job.id, since)) / RATE_WINDOW_S
        size = sum(os.path.getsize(f.path) for f in catalog.log_files(s.mv, consumed, catalog.committed_epoch())
                   if os.path.exists(f.path))
        opts = s.spec["options"]
        phase = ("paused" if job.rate_limit == 0 else "retrying" if job.error and not job.error.startswith(NOTE) else
                 "snapshot" if job.phase is Phase.SNAPSHOT else "running")
        out.append(SinkInfo(s.name, s.mv, opts.get("connector", ""),
                            opts.get("table") or opts.get("topic") or opts.get("location") or "", s.spec["mode"],
                            phase, consumed, lag.epochs, lag.seconds, size, round(rate, 1), job.rate_limit,
                            s.decouple, job.error, job.id))
    return out


def job_infos(catalog: Catalog, now: float | None = None) -> list[JobInfo]:
    now = time.time() if now is None else now
    rels = {r.name: (r.kind, r.created_epoch) for r in catalog.relations(creating=True)}
    failed = {r.name for r in catalog.relations(creating=True) if r.state == "failed"}
    rels.update({s.name: ("sink", 0) for s in catalog.sinks()})
    out = []
    for job in catalog.jobs():
        rel = rels.get(job.relation)
        if rel is None:
            continue
        kind, created = rel
        info = _info(catalog, job, kind, created if kind != "sink" else job.snapshot_epoch or 0, now)
        out.append(dataclasses.replace(info, phase="failed") if job.relation in failed else info)
    from sparkwave.meta.cdc_progress import with_cdc_backfills  # it imports this module
    return with_cdc_backfills(catalog, out, now)  # a CDC table's job shows its backfill's progress


def _info(catalog: Catalog, job: JobRow, kind: str, created_epoch: int, now: float) -> JobInfo:
    sink = kind == "sink"  # a sink's job: a creating one while its backfill runs; its lag is always shown
    lag = (LagRule.lag(catalog, job.consumed_epoch) if (job.creating or sink) and job.consumed_epoch is not None
           else None)
    lag_epochs, lag_s = (lag.epochs, lag.seconds) if lag else (0, 0.0)
    rate = eta = None
    if job.creating or sink:
        since = max(job.started_at, now - RATE_WINDOW_S)
        steps = catalog.job_steps(job.id, since)
        span = max(1e-3, now - since)
        rate = sum(s.rows for s in steps) / span
        if job.phase is Phase.SNAPSHOT and rate > 0:
            eta = (job.rows_total - job.rows_done) / rate
        elif job.phase is Phase.LOG_STORE:
            epochs_per_s = sum(s.epochs for s in steps) / span
            eta = lag_epochs / epochs_per_s if epochs_per_s > 0 else (0.0 if lag_epochs == 0 else None)
    phase = {Phase.SNAPSHOT: "snapshot", Phase.LOG_STORE: "merging" if lag_epochs == 0 else "log store",
             Phase.CREATED: "created"}[job.phase]
    total = job.rows_total
    percent = 100.0 if job.phase is not Phase.SNAPSHOT else (100.0 * job.rows_done / total if total else 0.0)
    upstreams = tuple(UpstreamProgress(u, sum(counts[:job.next_vnode]), sum(counts),
                                       _source_offsets(catalog, u, job.snapshot_epoch, job.next_vnode))
                      for u, counts in (job.vnode_rows or {}).items() if u != ALL_UPSTREAMS)
    chunks = tuple(ChunkProgress(c.lo, c.hi, c.rows, c.state, c.attempts) for c in catalog.job_chunks(job.id))
    return JobInfo(job.id, job.relation, {"table": "table", "source": "source", "sink": "sink"}.get(
                       kind, "materialized view"),
                   job.strategy, phase,
                   job.rows_done, total, round(percent, 1), round(rate or 0.0, 1),
                   None if eta is None else round(eta, 1), lag_epochs, lag_s, job.rate_limit,
                   datetime.fromtimestamp(job.started_at, tz=UTC), created_epoch, job.merged_epoch, job.held_back,
                   job.error, upstreams, chunks)


def _source_offsets(catalog: Catalog, relation: str, epoch: int | None,
                    next_slot: int) -> tuple[tuple[str, int, int], ...]:
    """How far a source backfill has read each partition of the source's history (its slots below
    `next_slot` are done), or () for an upstream that is not a source."""
    history = catalog.source_snapshot(relation, epoch) if epoch is not None else None
    if not history:
        return ()
    done = slot_ranges(history, (0, min(next_slot, VNODES)))
    return tuple((p, done[p][1] if p in done else lo, hi) for p, (lo, hi) in slot_ranges(history, None).items())
