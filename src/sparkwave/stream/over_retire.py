"""Which rows an `OverWindow` under EMIT ON WINDOW CLOSE may forget: those no row still to be emitted
reads (`frontend/plan/eowc_over.py` plans it).

Rows are emitted in their window order: a row's close value (the ORDER BY value of the farthest row
its frames read ahead) only grows along the order, so the rows below the watermark are a prefix of
each partition. A row not yet emitted reads at most `behind` rows before it (`lag(x, n)`, `ROWS n
PRECEDING`), so of that prefix only the last `behind` rows stay; the earlier ones leave the state.
Their outputs are final, and a later epoch recomputes them from the same shortened partition before
and after its change, so the difference it emits for them is none. Not possible when a call reads
back to the partition's start (row_number, rank, a running aggregate): then nothing is retired."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparkwave.stream.watermark import Derivation, as_ints


@dataclass(frozen=True)
class Retire:
    """`close`: the close value's column; `order`: the ORDER BY column; `behind`: rows read back."""

    close: str
    order: str
    behind: int
    watermark: Derivation

    def to_json(self) -> dict[str, Any]:
        return {"close": self.close, "order": self.order, "behind": self.behind, "watermark": self.watermark.to_json()}

    @staticmethod
    def from_json(d: dict[str, Any] | None) -> Retire | None:
        return None if not d else Retire(d["close"], d["order"], int(d["behind"]), Derivation.from_json(d["watermark"]))

    def describe(self) -> str:
        return (f"rows already emitted leave but the last {self.behind} of each partition (read by the rows still "
                f"to be emitted)")


def retired(rows: pa.Table, retire: Retire, partition: list[str], key: list[str], value: int) -> pa.Table:
    """The rows of whole partitions `rows` (with the close column) that leave the state: of each
    partition's rows whose close value is below `value`, all but the last `retire.behind`."""
    closed = rows.filter(pc.fill_null(pc.less(as_ints(rows[retire.close]), value), False))
    if closed.num_rows <= retire.behind:
        return closed.slice(0, 0)
    closed = closed.sort_by([(c, "descending", "at_start") for c in [retire.order, *key]])  # the window's, backwards
    seen: Counter[tuple[Any, ...]] = Counter()
    parts = list(zip(*[closed[c].to_pylist() for c in partition], strict=True)) if partition else \
        [()] * closed.num_rows
    leave = []
    for p in parts:
        seen[p] += 1
        leave.append(seen[p] > retire.behind)
    return closed.filter(pa.array(leave, pa.bool_()))
