"""A CDC backfill's position as the integer splits of a source's offsets, which are committed with
the epoch and replayed from its plan.

Two layouts, by who can order the key:
- ordered here: integer and uuid key columns, whose order Python repeats exactly. A position is the
  next key to read, one split a part (`backfill`, `backfill.1`, ...): an integer column is one part, a
  uuid two (its 16 bytes as two signed 64-bit parts, in PostgreSQL's order of them).
- compared upstream: any other key (text in its column's collation, numeric, a date, an enum, ...).
  A position is the last key read, as its columns' text forms; the empty position means none yet.
  PostgreSQL compares keys with it. It is held as JSON in UTF-8, 8 bytes a split: `backfill` is 0
  (the layout's mark), `backfill.t0` the length in bytes, and `backfill.t1`, ... the bytes.

Why the bytes go in splits and not in a text column of the catalog: offsets are integers in every
table and plan that carries them. Held this way, a position is committed in the epoch's own
transaction, needs no migration, and reads the same from both catalogs. A key of a few dozen bytes
takes a few splits; a long one (a B-tree holds compressed keys of many kB) takes one per 8 bytes, for
the backfill's epochs only: the last chunk's epoch empties the position. SHOW SOURCES, the dashboard
and the metrics leave these splits out (`key_bytes`): they are the key's bytes, not offsets."""

from __future__ import annotations

import json
from collections.abc import Mapping

BACKFILL = "backfill"
TEXT = f"{BACKFILL}.t"
Key = tuple[int | str, ...]  # a position: integer parts (ordered here) or key texts (compared upstream)


def ordered_splits(parts: int) -> list[str]:
    return [BACKFILL] + [f"{BACKFILL}.{i}" for i in range(1, parts)]


def text_splits(texts: Key) -> dict[str, int]:
    """The splits of a compared position (the key's column texts; empty: no key read yet)."""
    data = json.dumps(list(texts), ensure_ascii=False, separators=(",", ":")).encode() if texts else b""
    out = {BACKFILL: 0, f"{TEXT}0": len(data)}
    for i in range(0, len(data), 8):
        out[f"{TEXT}{i // 8 + 1}"] = int.from_bytes(data[i:i + 8].ljust(8, b"\0"), "big", signed=True)
    return out


def key_bytes(split: str) -> bool:
    """Whether a split holds a compared position's bytes (not shown as an offset)."""
    return split.startswith(TEXT)


def is_text(offsets: Mapping[str, int]) -> bool:
    return f"{TEXT}0" in offsets


def text_position(offsets: Mapping[str, int]) -> tuple[str, ...]:
    """The compared position the splits hold (a split past the length: another epoch's, unread);
    empty where none is held (a table an earlier release made, whose key was read in one chunk)."""
    n = offsets.get(f"{TEXT}0", 0)
    if n <= 0:
        return ()
    data = b"".join(offsets.get(f"{TEXT}{i + 1}", 0).to_bytes(8, "big", signed=True) for i in range((n + 7) // 8))
    try:
        texts = json.loads(data[:n].decode())
    except ValueError:
        raise ValueError(f"the backfill's position splits {TEXT}* do not hold a key") from None
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise ValueError(f"the backfill's position splits {TEXT}* do not hold a key")
    return tuple(texts)


def span(start: Mapping[str, int], end: Mapping[str, int]) -> dict[str, list[int]]:
    """The ranges from one position's splits to another's (a split one lacks: 0, past its length)."""
    return {s: [start.get(s, 0), end.get(s, 0)] for s in {**start, **end}}
