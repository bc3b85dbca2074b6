"""The oracle of watermarked relations: the rows sparkwave keeps are the rows that arrived at or above
the relation's watermark before their epoch (a row below it is dropped and counted), and the
watermark after an epoch is the max over the kept rows of `ts - delay`, never moving back (one
split: rows come by INSERT). MVs are then evaluated by DuckDB over the kept rows (`tests/oracle.py`);
an EMIT ON WINDOW CLOSE MV holds the rows of the same query whose window (or watermarked column) is
below the watermark."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.oracle import Model

EPOCH = datetime(1970, 1, 1)


def micros(t: datetime) -> int:
    return (t - EPOCH) // timedelta(microseconds=1)


def at(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def tumble_start(w: int, size_s: int) -> int:
    size = size_s * 1_000_000
    return (w // size) * size


def hop_start(w: int, size_s: int, slide_s: int) -> int:
    """The first HOP window start a row at or above `w` can fall in."""
    size, slide = size_s * 1_000_000, slide_s * 1_000_000
    return ((w - size) // slide) * slide + slide


class WatermarkModel:
    """One append-only table `name` with `WATERMARK FOR ts AS ts - delay`; `ts_index` is the time
    column's position in a row."""

    def __init__(self, model: Model, name: str, ts_index: int, delay_s: int) -> None:
        self.model, self.name, self.ts_index, self.delay = model, name, ts_index, delay_s * 1_000_000
        self.watermark: int | None = None
        self.late = 0

    def insert_epoch(self, rows: list[tuple]) -> list[tuple]:
        """Apply one epoch's inserted rows as sparkwave does; returns the rows kept."""
        before = self.watermark
        kept = [r for r in rows if before is None or r[self.ts_index] is None or micros(r[self.ts_index]) >= before]
        self.late += len(rows) - len(kept)
        marks = [micros(r[self.ts_index]) - self.delay for r in kept if r[self.ts_index] is not None]
        if marks:
            top = max(marks)
            self.watermark = top if before is None else max(before, top)
        if kept:
            self.model.apply_epoch([("insert", self.name, kept)])
        return kept
