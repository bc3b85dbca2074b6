"""How a stateful tree's backfill splits into chunks that each evaluate the tree once.

One scan, the **driving** scan, reads its upstream's snapshot a vnode range at a time; every other
scan reads its whole snapshot. That is exact when each output row (and each state row) of the
operators between the driving scan and the lowest aggregate above it comes from exactly one
driving row, so that the chunks' outputs add up to the whole:
- a projection or a time window maps each row on its own (a window function does not: a tree
  with one between the scan and the aggregate does not chunk by that scan);
- a join is linear in a side it joins inner, or preserves (a LEFT join's left, a RIGHT join's
  right): that side's state rows are split among the chunks, and the other side (the join never
  NULL-pads its missing rows from this one) is evaluated once, in the first chunk, whose state
  files hand it to the later chunks;
- the lowest aggregate above adds up its chunks' partials (`Aggregate.merge_partials`) in a last
  merge chunk, which evaluates everything above the aggregate. A shared subplan (`Share`) that the
  chunks evaluated below it may be read above it too: the merge writes none of its state again.

A tree with no such scan (say, a FULL join under every path) backfills in one chunk. Of the
candidates, the scan of the largest upstream drives (on a tie, one with no aggregate above it, whose
chunks then write the MV's rows themselves and need no merge)."""

from __future__ import annotations

from dataclasses import dataclass

from sparkwave.stream.aggregate import Aggregate
from sparkwave.stream.join import Join
from sparkwave.stream.operator import Operator
from sparkwave.stream.over import OverWindow
from sparkwave.stream.scan import Scan
from sparkwave.stream.temporal_join import TemporalJoin

PARTIAL = "#partial"  # a chunk's files of an aggregate's partials (`<table>#partial`), added up by the merge


@dataclass(frozen=True)
class ChunkPlan:
    driving: Scan
    aggregate: Aggregate | None  # the lowest aggregate above the driving scan, if any
    handed: tuple[str, ...]  # state suffixes carrying the join sides evaluated once, in the first chunk

    @property
    def merges(self) -> bool:
        """Whether a last chunk adds up the chunks' partials."""
        return self.aggregate is not None


def chunk_plan(root: Operator, rows: dict[str, int]) -> ChunkPlan | None:
    """The plan of a stateful tree's chunked backfill, `rows` being each upstream's snapshot rows;
    None if no scan can drive chunks."""
    best: tuple[tuple[int, bool], ChunkPlan] | None = None
    for scan, path in _scans(root, []):
        plan = _plan(scan, path)
        if plan is None:
            continue
        rank = (rows.get(scan.relation, 0), plan.aggregate is None)
        if best is None or rank > best[0]:
            best = (rank, plan)
    return best[1] if best else None


def _scans(op: Operator, path: list[Operator]) -> list[tuple[Scan, list[Operator]]]:
    """Every scan with its ancestors, the nearest last (a shared scan once per path to it)."""
    if isinstance(op, Scan):
        return [(op, path)]
    return [found for child in op.inputs for found in _scans(child, [*path, op])]


def _plan(scan: Scan, ancestors: list[Operator]) -> ChunkPlan | None:
    handed: list[str] = []
    child: Operator = scan
    for op in reversed(ancestors):
        if isinstance(op, Aggregate):
            return ChunkPlan(scan, op, tuple(handed))
        if isinstance(op, OverWindow):
            return None  # a row's window value depends on the other driving rows of its partition
        if isinstance(op, TemporalJoin) and op.right is child:
            return None  # a temporal join's table is looked up whole, never driven
        if isinstance(op, Join):
            on_left = op.left is child
            if not op.linear_in("left" if on_left else "right"):
                return None  # the other side's NULL-padded rows (an ASOF match) depend on every driving row
            handed.append(op.handed_state("right" if on_left else "left"))
        child = op
    return ChunkPlan(scan, None, tuple(handed))
