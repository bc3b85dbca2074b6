"""The barrier loop, which advances the main graph one epoch at a time: plan (`plan.py`), execute
(`schedule.py` over `stream/execute.py`), commit (`commit.py`), in a thread (`loop.py`), with flush
tickets (`flush.py`) and failure isolation (`failures.py`)."""

from sparkwave.meta.barrier.commit import EpochReport
from sparkwave.meta.barrier.failures import EpochAbandoned, RelationFailed
from sparkwave.meta.barrier.loop import MAIN_POOL, BarrierLoop
from sparkwave.meta.barrier.schedule import topo_order

__all__ = ["MAIN_POOL", "BarrierLoop", "EpochAbandoned", "EpochReport", "RelationFailed", "topo_order"]
