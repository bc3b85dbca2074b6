"""Operator state tables: stored like any relation (per-epoch log + compacted base), named
`<mv>.<suffix>`, owned by their MV, committed in the same epoch as the MV's own log.

Their rows all go to vnode 0: no backfill reads them by vnode range, and so their bases are sorted
by key alone (join key or group first), which lets a lookup's Parquet row-group statistics skip
most of a large state. A base a backfill linked from a table's files (`links.py`) is neither, until
its first compaction."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from sparkwave.core.catalog import Relation
from sparkwave.core.chunk import consolidate
from sparkwave.core.schema import Schema
from sparkwave.core.zset import to_ops
from sparkwave.storage.lookup import lookup
from sparkwave.storage.state_range import range_rows
from sparkwave.storage.store import Store
from sparkwave.storage.table import log_rows


def state_name(owner: str, suffix: str) -> str:
    return f"{owner}.{suffix}"


def state_relations(rt: Store, owner: Relation) -> list[Relation]:
    return [rt.relation(state_name(owner.name, s)) for s in owner.spec.states]


@dataclass
class StateIO:
    """One epoch's view of an MV's state tables: lookups as of `prev` (the last epoch whose state
    is committed for this MV) and the changes staged for `epoch`."""

    rt: Store
    owner: str
    prev: int
    epoch: int
    staged: dict[str, pa.Table] = field(default_factory=dict)
    _relations: dict[str, Relation] = field(default_factory=dict, repr=False)

    def relation(self, suffix: str) -> Relation:
        """The state table, read from the catalog once per epoch (its lookups and its staging ask often)."""
        rel = self._relations.get(suffix)
        if rel is None:
            rel = self._relations[suffix] = self.rt.relation(state_name(self.owner, suffix))
        return rel

    def lookup(self, suffix: str, by: list[str], keys: pa.Table) -> pa.Table:
        """Rows (without `_vnode`) whose `by` columns match a row of `keys`."""
        rel = self.relation(suffix)
        if keys.num_rows == 0:
            return rel.schema.arrow().empty_table()
        rows = lookup(self.rt.catalog, rel.name, rel.schema, self.prev, keys, by)
        return rows.drop_columns(["_vnode"]).cast(rel.schema.arrow())

    def between(self, suffix: str, column: str, ranges: list[tuple[int, int]]) -> pa.Table:
        """Rows whose timestamp `column` (microseconds) lies in one of the closed `ranges`."""
        rel = self.relation(suffix)
        return range_rows(self.rt.catalog, rel.name, rel.schema, self.prev, column, ranges).cast(rel.schema.arrow())

    def stage(self, suffix: str, changes: pa.Table) -> None:
        """Stage a consistent Z-set of state rows (-1 the old row of a key, +1 its new row)."""
        rel = self.relation(suffix)
        if changes.num_rows == 0:
            return
        rows = to_ops(changes.select([*rel.schema.names, "_w"]).cast(
            pa.schema([*rel.schema.arrow(), pa.field("_w", pa.int64())])))
        rows = rows.append_column("_vnode", pa.array([0] * rows.num_rows, pa.int16()))
        out = log_rows(consolidate(rows, list(rel.schema.key), rel.schema.values), rel.schema, self.epoch)
        if out.num_rows:
            self._keep(rel, out)

    def _keep(self, rel: Relation, rows: pa.Table) -> None:
        self.rt.stored(rel).stage_log(self.epoch, rows)
        self.staged[rel.name] = rows


@dataclass
class EmptyStateIO(StateIO):
    """The state tables of a build from nothing (`Dataflow.build_local`, a build's top): a lookup
    finds no row, and the staged rows are kept in `staged`, not written: they become the tables'
    bases. The tables are named by their schemas (`schemas`, by suffix), not read from the catalog:
    a blocking CREATE builds them before the catalog has them."""

    schemas: dict[str, Schema] = field(default_factory=dict)

    def relation(self, suffix: str) -> Relation:
        assert suffix in self.schemas, f"BUG: state {suffix} of {self.owner} is not among the build's tables"
        return Relation(state_name(self.owner, suffix), "state", self.schemas[suffix], {"owner": self.owner},
                        self.epoch)

    def lookup(self, suffix: str, by: list[str], keys: pa.Table) -> pa.Table:
        return self.relation(suffix).schema.arrow().empty_table()

    def between(self, suffix: str, column: str, ranges: list[tuple[int, int]]) -> pa.Table:
        return self.relation(suffix).schema.arrow().empty_table()

    def _keep(self, rel: Relation, rows: pa.Table) -> None:
        assert rel.name not in self.staged, f"BUG: state {rel.name} staged twice in one build"
        self.staged[rel.name] = rows
