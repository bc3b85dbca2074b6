"""The owner's locks and the one order they may be taken in.

    ddl  ->  epoch  ->  gate  ->  (leaves: the catalog's connection lock, the store's table cache)

- `ddl`: DDL and maintenance exclude each other: a DROP never removes a relation that compaction
  or retention is working on. Held for as long as compaction runs (seconds), never by an epoch.
- `epoch`: held for a whole epoch of the main graph; DDL, retention and a creating job's merge take
  it to act between two epochs. Re-entrant: a DDL statement may run an epoch while holding it.
- `gate`: serialises a creating job's checkpoint with the main graph's planning, so that the lag
  rule's check and the plan's persistence see one consistent job state.

A thread holding a lock may take only locks to its right. Threads that must wait for another
thread (a cancel joining a job's worker) hold none of them while they wait."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Locks:
    ddl: threading.Lock = field(default_factory=threading.Lock)
    epoch: threading.RLock = field(default_factory=threading.RLock)
    gate: threading.Lock = field(default_factory=threading.Lock)
