"""A sink's log store, after RisingWave's `kv_log_store` (`../shared/seeds/sync_kv_log_store`):
what decouples a sink from the main graph.

The MV's per-epoch log files already are a durable log store; this adds the memory side. The
barrier loop hands each committed epoch's change to the buffer (`offer`), which never blocks: an
epoch that does not fit (buffer full, the sink behind or restarting) is *spilled*, that is, left
to be read back from the MV's log file. The reader (`read`) takes the epochs after the sink's
position in order, each from memory if it is there, else from its file. Truncation is the
sink's pin on the MV moving as it commits (`Catalog.sink_delivered`): retention then frees the
log files behind it."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import pyarrow as pa

from sparkwave.core.catalog import Catalog
from sparkwave.core.schema import Schema
from sparkwave.storage.integrity import read_table
from sparkwave.storage.table import log_arrow_schema

BUFFER_ROWS = 200_000  # rows of committed epochs a sink keeps in memory before it spills


@dataclass(frozen=True)
class Batch:
    """Consecutive epochs of the MV's change up to `through`: their log rows and how many epochs."""

    through: int
    rows: pa.Table  # `| _epoch | _seq | _op | _vnode | columns |`
    epochs: int


class LogStore:
    def __init__(self, catalog: Catalog, mv: str, schema: Schema, capacity: int = BUFFER_ROWS) -> None:
        self.catalog = catalog
        self.mv = mv
        self.schema = log_arrow_schema(schema)
        self.capacity = capacity
        self._buffer: OrderedDict[int, pa.Table] = OrderedDict()
        self._rows = 0
        self._lock = threading.Lock()
        self.spilled_epochs = 0  # epochs read back from files, since start
        self.memory_epochs = 0  # epochs taken from memory, since start

    def offer(self, epoch: int, rows: pa.Table) -> bool:
        """A committed epoch's change, from the barrier loop; False if it was spilled."""
        with self._lock:
            if self._rows + rows.num_rows > self.capacity:
                return False
            self._buffer[epoch] = rows.select(self.schema.names).cast(self.schema)
            self._rows += rows.num_rows
            return True

    def truncate(self, upto: int) -> None:
        """Forget the buffered epochs `<= upto`: the sink has committed them."""
        with self._lock:
            while self._buffer and next(iter(self._buffer)) <= upto:
                _, t = self._buffer.popitem(last=False)
                self._rows -= t.num_rows

    def read(self, after: int, upto: int, max_rows: float) -> Batch:
        """The epochs in `(after, upto]` with changes, oldest first, until `max_rows` is reached (at
        least one epoch); `through` covers the epochs without changes up to the next one not taken."""
        files = self.catalog.log_file_rows(self.mv, after, upto)
        taken: list[int] = []
        total = 0
        for e, n in files:
            if taken and total + n > max_rows:
                break
            taken.append(e)
            total += n
        through = upto if len(taken) == len(files) else taken[-1]
        paths = dict(self.catalog.log_files(self.mv, after, through))
        tables, spilled = [], 0
        for e in taken:
            with self._lock:
                t = self._buffer.get(e)
            if t is None:
                t = read_table(paths[e], schema=self.schema)
                spilled += 1
            tables.append(t)
        self.spilled_epochs += spilled
        self.memory_epochs += len(taken) - spilled
        rows = pa.concat_tables(tables) if tables else self.schema.empty_table()
        return Batch(through, rows, len(taken))
