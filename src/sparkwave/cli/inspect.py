"""Read-only inspection of a warehouse from another process (no Spark, no ownership)."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table

from sparkwave.core.catalog import Catalog
from sparkwave.core.epoch import epoch_datetime
from sparkwave.frontend.progress_bars import JobBars
from sparkwave.meta.ownership import describe_owner, is_owned
from sparkwave.meta.progress import JobInfo, SinkInfo, job_infos, sink_infos
from sparkwave.storage.warehouse import Warehouse


def _read(warehouse: str | Path) -> tuple[str, list[JobInfo], list[SinkInfo]]:
    wh = Warehouse(warehouse)
    catalog = Catalog(wh.catalog_path, read_only=True)
    try:
        committed = catalog.committed_epoch()
        owner = describe_owner(wh.owner_path) if is_owned(wh.owner_path) else "none"
        when = epoch_datetime(committed).strftime("%H:%M:%S") if committed else "-"
        return (f"sparkwave jobs · committed epoch {committed} ({when}) · owner: {owner}", job_infos(catalog),
                sink_infos(catalog))
    finally:
        catalog.close()


def jobs_table(warehouse: str | Path) -> RenderableType:
    title, jobs, sinks = _read(warehouse)
    return Group(_table(title, jobs), _sinks(sinks)) if sinks else _table(title, jobs)


def _sinks(sinks: list[SinkInfo]) -> Table:
    """Each sink: where it delivers, how far, how far behind, how fast, why it retries."""
    table = Table(title="sinks")
    for c in ("name", "from", "connector", "target", "phase", "committed epoch", "lag", "rows/s", "rate limit",
              "last error"):
        table.add_column(c)
    for s in sinks:
        table.add_row(s.name, s.mv, s.connector, s.target, s.phase, str(s.epoch),
                      f"{s.lag_epochs} epochs / {s.lag_seconds:,.1f}s / {s.lag_bytes:,} B",
                      f"{s.rows_per_second:,.0f}",
                      "unlimited" if s.rate_limit is None else f"{s.rate_limit:,}", s.error or "-")
    return table


def _table(title: str, jobs: list[JobInfo]) -> Table:
    table = Table(title=title)
    for c in ("id", "name", "kind", "strategy", "phase", "progress", "rows/s", "ETA", "lag", "rate limit",
              "started", "created epoch"):
        table.add_column(c)
    for j in jobs:
        creating = j.creating
        table.add_row(str(j.id), j.name, j.kind, j.strategy, j.phase,
                      _progress(j) if creating else "-",
                      f"{j.rows_per_second:,.0f}" if creating else "-",
                      "-" if j.eta_seconds is None else f"{j.eta_seconds:,.0f}s",
                      f"{j.lag_epochs} epochs / {j.lag_seconds:,.1f}s" if creating else "-",
                      "-" if not creating else "unlimited" if j.rate_limit is None else f"{j.rate_limit:,}",
                      j.started_at.strftime("%H:%M:%S"), str(j.created_epoch))
    return table


def _progress(j: JobInfo) -> str:
    total = f"{j.rows_done:,}/{j.rows_total:,} ({j.percent:.1f}%)"
    detail = len(j.upstreams) > 1 or any(u.offsets for u in j.upstreams)  # several upstreams, or a source's partitions
    return f"{total}: " + ", ".join(map(str, j.upstreams)) if detail else total


def watch_jobs(console: Console, warehouse: str | Path) -> int:
    """A live view until Ctrl-C: the jobs table, and one progress bar per creating job."""
    bars = JobBars()
    with Live(console=console, refresh_per_second=2) as live:
        while True:
            title, jobs, sinks = _read(warehouse)
            bars.update([j for j in jobs if j.creating or j.id in bars.shown])
            live.update(Group(_table(title, jobs), *([_sinks(sinks)] if sinks else []), bars.progress))
            time.sleep(1.0)
