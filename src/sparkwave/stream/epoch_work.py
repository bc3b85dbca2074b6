"""What one epoch of the main graph carries while its relations execute: the plan it runs, each
relation's log rows as they are made, and what the relations hand each other on the way (a
source's rows, the chains its read computed, local frames of small changes). The barrier loop
(`meta/barrier/`) makes one per epoch and commits from it; `stream/execute.py` fills it."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import pyarrow as pa

from sparkwave.core.catalog import Relation
from sparkwave.storage.table import StagedLog
from sparkwave.stream.bad_records import BadRecords
from sparkwave.stream.operator import HeldRows

DmlBatch: TypeAlias = tuple[int, str, str, int]  # a staged DML batch the epoch takes: (id, relation, file, rows)
DmlBatches: TypeAlias = Sequence[DmlBatch]  # the catalog's rows are named tuples of these fields


@dataclass
class EpochWork:
    epoch: int
    prev: int
    plan: dict
    chunks: dict[str, pa.Table | StagedLog | None] = field(default_factory=dict)
    big_rows: int = 0  # a step with a change of more rows than this runs on the executors
    more: bool = False  # staged DML is left for the next epoch
    bad: BadRecords = field(default_factory=BadRecords)  # bad source records, committed with the epoch
    held: dict[str, HeldRows | None] = field(default_factory=dict)  # small log rows (Arrow, a local frame), by relation
    relations: list[Relation] = field(default_factory=list)  # executed this epoch, upstreams first
    fused: dict[str, dict[int, pa.Table]] = field(default_factory=dict)  # chains read with a source, by MV
    unwritten: dict[str, pa.Table] = field(default_factory=dict)  # a source's rows whose file no MV needed yet
    file_locks: dict[str, threading.Lock] = field(default_factory=dict)  # one per source in `unwritten`
    lock: threading.Lock = field(default_factory=threading.Lock)
    # watermarked relations' watermarks after this epoch (`stream/watermark_filter.py`), what the epoch
    # moved (relation, split, value; split '' the relation's) and the late rows it dropped, committed with it
    watermarks: dict[str, int] = field(default_factory=dict)
    moved_watermarks: list[tuple[str, str, int]] = field(default_factory=list)
    late: dict[str, int] = field(default_factory=dict)
    judged: list[tuple[str, str, int, int, int]] = field(default_factory=list)  # a source's ranges and their watermark
    _by_name: dict[str, Relation] = field(default_factory=dict, repr=False)

    def relation(self, name: str) -> Relation | None:
        """A relation executed this epoch, by name, as the plan read it (no catalog query per step)."""
        if len(self._by_name) != len(self.relations):
            self._by_name = {r.name: r for r in self.relations}
        return self._by_name.get(name)

    @property
    def now(self) -> int | None:
        """The epoch's NOW() (microseconds, UTC) its plan recorded (`meta/barrier/plan.py`); operators read
        it through `Catalog.epoch_now`, which serves creating jobs' epochs and builds alike."""
        return self.plan.get("now")

    def source_ranges(self, name: str) -> dict[str, list[int]]:
        """The offset ranges the plan reads from relation `name`'s connector (none: empty)."""
        return self.plan.get("sources", {}).get(name, {})
