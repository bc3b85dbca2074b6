"""A source's read of an epoch that also computes the scan-and-projection chains of the MVs over it
(`stream/fusion.py`), with its fallback: if that job fails other than in the source's reader (an
MV's expression on a row, say), the source is read alone and each MV computes its chain itself,
failing as itself, so that one MV's fault never stops the source."""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.compute as pc
from py4j.protocol import Py4JJavaError
from pyspark.errors.exceptions.captured import PythonException
from pyspark.sql import DataFrame

from sparkwave.connectors.base import ERROR
from sparkwave.core.catalog import Relation
from sparkwave.core.local_frames import to_arrow
from sparkwave.storage.store import Store
from sparkwave.stream import fusion
from sparkwave.stream.dataflow import Dataflow
from sparkwave.stream.epoch_work import EpochWork

log = logging.getLogger("sparkwave.barrier")


def raised_by_python(err: BaseException) -> bool:
    """Whether a Spark job failed in a Python worker (a data source's reader), not in the JVM."""
    if isinstance(err, PythonException):
        return True
    if isinstance(err, Py4JJavaError):
        cause = err.java_exception
        while cause is not None:
            if cause.getClass().getName() == "org.apache.spark.api.python.PythonException":
                return True
            cause = cause.getCause()
    return False


def read_fused(store: Store, rel: Relation, e: EpochWork, rows: DataFrame) -> pa.Table:
    """Source `rel`'s rows of the epoch, read by one job that also computes the chains of the MVs
    over it, handed to them in `e.fused`; read alone if that job fails other than in the reader."""
    assert rel.schema.append_only, f"BUG: source {rel.name} is not append-only"
    try:
        roots = {mv.name: Dataflow(store, mv).root for mv in e.relations
                 if mv.kind == "mv" and rel.name in mv.upstreams}
        chains = [c for name, root in roots.items() for c in fusion.branches(name, root, rel.name)]
        fused = fusion.fused_read(rows, chains, f"`{ERROR}` IS NULL" if ERROR in rows.columns else "true")
        if fused is not None:
            wide = to_arrow(fused[0])
            good = pc.is_null(wide[ERROR]) if ERROR in wide.column_names else None
            chunk, by_mv = fusion.split(wide, rows.columns, chains, fused[1], good)
            with e.lock:  # sources run at once; an MV may read two
                for name, ops in by_mv.items():
                    e.fused.setdefault(name, {}).update(ops)
            return chunk
    except Exception as err:
        if raised_by_python(err):  # the reader's own: reading alone fails the same way
            raise
        log.warning("source %s: the read with its MVs' projections failed (%s); reading it alone",
                    rel.name, (str(err).strip().splitlines() or [type(err).__name__])[0][:300])
    return to_arrow(rows)
