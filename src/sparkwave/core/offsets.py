"""A source's offset ranges `{split: [start, end)}` and how a backfill splits them into slots.

A source backfill reads the source's history (its snapshot: every split from its startup offset to
the offset the main graph had committed at the job's snapshot epoch) in chunks. A chunk of a stored
relation is a range of vnodes; a source has no vnodes, so its offsets are cut into `VNODES` slots
of (nearly) equal size, in split order, and slot `v` stands for vnode `v`: the chunking, progress
and checkpoints of a snapshot backfill apply unchanged, and a slot maps back to offset ranges."""

from __future__ import annotations

from sparkwave.core.chunk import VNODES

Ranges = dict[str, list[int]]


def _ordered(ranges: Ranges) -> list[tuple[str, int, int]]:
    return sorted(((s, lo, hi) for s, (lo, hi) in ranges.items() if hi > lo),
                  key=lambda r: (int(r[0]) if r[0].isdigit() else 0, r[0]))


def _bounds(total: int) -> list[int]:
    return [v * total // VNODES for v in range(VNODES + 1)]


def slot_counts(ranges: Ranges) -> list[int]:
    """Offsets per slot: the backfill's progress total and chunk sizes."""
    b = _bounds(sum(hi - lo for _, lo, hi in _ordered(ranges)))
    return [b[v + 1] - b[v] for v in range(VNODES)]


def slot_ranges(ranges: Ranges, slots: tuple[int, int] | None) -> Ranges:
    """The offset ranges of slots `[lo, hi)` (all of them for None)."""
    if slots is None:
        return {s: [lo, hi] for s, lo, hi in _ordered(ranges)}
    ordered = _ordered(ranges)
    b = _bounds(sum(hi - lo for _, lo, hi in ordered))
    first, last = b[slots[0]], b[slots[1]]  # global positions [first, last)
    out: Ranges = {}
    pos = 0
    for s, lo, hi in ordered:
        size = hi - lo
        a, z = max(first, pos), min(last, pos + size)
        if z > a:
            out[s] = [lo + a - pos, lo + z - pos]
        pos += size
    return out


def merged(many: list[Ranges]) -> Ranges:
    """The ranges of consecutive epochs as one range per split (they are contiguous)."""
    out: Ranges = {}
    for ranges in many:
        for s, (lo, hi) in ranges.items():
            cur = out.get(s)
            out[s] = [lo, hi] if cur is None else [min(cur[0], lo), max(cur[1], hi)]
    return out
