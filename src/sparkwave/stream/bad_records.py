"""Bad source records of an epoch: the rows a connector read with `_error` set (a message that is
not JSON, a value out of its column's range) are set aside from the table's intents and kept, with
their payload, for the catalog's commit of the epoch (`source_errors`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from sparkwave.connectors import Connector
from sparkwave.connectors.base import ERROR, RAW

# Bad records kept (with their payload) per relation per epoch; all are counted. A schema that fits
# no message must not pour a whole epoch's payloads into the catalog's commit.
MAX_BAD_RECORDS_KEPT = 1000


@dataclass
class BadRecords:
    """One epoch's: `rows` kept `(relation, split, offset, error, payload)`, `counts` all, per relation."""

    rows: list[tuple[str, str, int, str, str]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def keep(self, name: str, conn: Connector, found: pa.Table, count: int) -> None:
        """Keep the first of `found` (`| _seq | _error | _raw |`) up to `MAX_BAD_RECORDS_KEPT` per
        relation and epoch; count all `count`."""
        room = MAX_BAD_RECORDS_KEPT - sum(1 for r in self.rows if r[0] == name)
        kept = found.slice(0, max(0, room))
        splits, offsets = conn.positions(kept["_seq"])
        self.rows.extend(zip([name] * kept.num_rows, splits.to_pylist(), offsets.to_pylist(),
                             kept[ERROR].to_pylist(), kept[RAW].to_pylist(), strict=True))
        self.counts[name] = self.counts.get(name, 0) + count

    def set_aside(self, name: str, conn: Connector | None, chunk: pa.Table) -> pa.Table:
        """The chunk without its bad records (`_error` set by the connector), which are kept."""
        if ERROR not in chunk.column_names:
            return chunk
        bad = pc.is_valid(chunk[ERROR])
        if pc.any(bad).as_py():
            assert conn is not None, f"BUG: bad records in {name!r}, which has no connector"
            found = chunk.filter(bad)
            self.keep(name, conn, found, found.num_rows)
            chunk = chunk.filter(pc.invert(bad))
        return chunk.drop_columns([ERROR, RAW])
