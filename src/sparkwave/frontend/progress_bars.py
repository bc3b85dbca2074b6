"""Live progress bars for creating jobs: one rich bar per job, for a foreground CREATE and for
`sparkwave jobs --watch`."""

from __future__ import annotations

from typing import Any, cast

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from sparkwave.meta.progress import JobInfo


def describe(j: JobInfo) -> str:
    rate = "unlimited" if j.rate_limit is None else ("paused" if j.rate_limit == 0 else f"limit {j.rate_limit:,}/s")
    eta = "-" if j.eta_seconds is None else f"{j.eta_seconds:,.0f}s"
    return (f"{j.rows_done:,}/{j.rows_total:,} rows · {j.rows_per_second:,.0f} rows/s · ETA {eta} · "
            f"lag {j.lag_epochs} epochs ({j.lag_seconds:,.1f}s) · {rate}"
            + (f" · [red]retrying: {j.error}[/]" if j.error else ""))


class JobBars:
    def __init__(self, console: Console | None = None) -> None:
        self.progress = Progress(TextColumn("[bold]job {task.fields[id]}[/] {task.fields[name]}"),
                                 TextColumn("{task.fields[phase]}"), BarColumn(),
                                 TextColumn("{task.percentage:>5.1f}%"),
                                 TextColumn("{task.fields[detail]}"), console=console)
        self._tasks: dict[int, TaskID] = {}

    def __enter__(self) -> JobBars:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(None, None, None)

    @property
    def shown(self) -> set[int]:
        return set(self._tasks)

    def update(self, jobs: list[JobInfo]) -> None:
        for j in jobs:
            fields: dict[str, Any] = {"id": j.id, "name": j.name, "phase": j.phase, "detail": describe(j)}
            done = j.percent if j.creating else 100.0
            if j.id not in self._tasks:
                # rich annotates add_task's `completed` as int, but stores and renders it as a float.
                self._tasks[j.id] = self.progress.add_task(j.name, total=100.0, completed=cast(int, done), **fields)
            else:
                self.progress.update(self._tasks[j.id], completed=done, **fields)
