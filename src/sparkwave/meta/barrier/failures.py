"""Failure isolation: which relation an epoch failed at, and an MV that keeps failing taken out of
the main graph (with what depends on it) so that the others go on committing. RisingWave stops the
world; here a user drops or replaces one MV."""

from __future__ import annotations

import logging

import pyarrow as pa
from py4j.protocol import Py4JError
from pyspark.errors.exceptions.captured import CapturedException

from sparkwave.core.catalog import Relation
from sparkwave.core.errors import CatalogError, PipelineError, SparkwaveError
from sparkwave.meta.locks import Locks
from sparkwave.meta.pipeline import JobControl
from sparkwave.meta.runtime import Runtime
from sparkwave.storage.integrity import spark_read_error

log = logging.getLogger("sparkwave.barrier")
MAX_ATTEMPTS = 3  # flush() reports a failure once an epoch has failed this many times in a row; an
# MV that failed it this many times in a row is taken out of the main graph (`Isolation`)


class EpochAbandoned(PipelineError):
    """The running epoch was given up for a DROP; its plan is replayed without what was dropped."""


class RelationFailed(PipelineError):
    """An epoch failed at one relation's execution (not at a commit)."""

    def __init__(self, message: str, relation: str, kind: str, epoch: int, cause: str) -> None:
        super().__init__(message)
        self.relation, self.kind, self.epoch, self.cause = relation, kind, epoch, cause


def relation_failed(rel: Relation, epoch: int, err: Exception) -> RelationFailed:
    """The error of an epoch that failed executing `rel`: what, where, and what the user can do."""
    what = {"mv": "materialized view", "source": "source"}.get(rel.kind, "table")
    cause = spark_read_error(err) or (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
    hint = (f"after {MAX_ATTEMPTS} failed attempts it is taken out of the pipeline, which goes on"
            if rel.kind == "mv" else f"if it keeps failing, DROP {what.upper()} {rel.name} lets the "
            "pipeline go on")
    return RelationFailed(f"epoch {epoch} failed at {what} {rel.name!r}: {cause}; {hint}",
                          rel.name, rel.kind, epoch, cause)


def deterministic(err: BaseException | None) -> bool:
    """An error that evaluating the MV's query raises on this data, and will again: Spark's errors
    in the query (a `raise_error`, a failed analysis), Arrow's and Python's value errors. Not one of
    the machine's (memory, disk, network, a stopped Spark): those stop the pipeline until fixed
    rather than take MVs out of it for good."""
    if isinstance(err, (MemoryError, OSError, Py4JError)):
        return False
    if isinstance(err, pa.ArrowException):
        return not isinstance(err, (pa.ArrowMemoryError, pa.ArrowIOError))
    # a Spark Connect server's errors are its JVM's, raised by the client (`spark_features`)
    if isinstance(err, CapturedException) or type(err).__module__ == "pyspark.errors.exceptions.connect":
        text = str(err)
        return not any(m in text for m in ("OutOfMemory", "SparkContext", "shut down", "Connection", "CANCELLED",
                                           "cancelled", "OPERATION_CANCELED", "canceled", "UNAVAILABLE",
                                           "INVALID_HANDLE"))
    return isinstance(err, (SparkwaveError, ArithmeticError, ValueError, TypeError, KeyError, IndexError))


class Isolation:
    """Counts, per MV, the attempts in a row that failed at it, and takes out one that reached
    `MAX_ATTEMPTS` with a deterministic error."""

    def __init__(self, rt: Runtime, locks: Locks, jobs: JobControl | None) -> None:
        self.rt = rt
        self.locks = locks
        self.jobs = jobs
        self._failing: dict[str, int] = {}  # MV -> consecutive attempts that failed at it

    def clear(self) -> None:
        """An epoch committed: no MV is failing."""
        self._failing.clear()

    def isolated(self, e: Exception) -> bool:
        """Count a failed attempt; True if it took an MV out (the epoch is then retried at once)."""
        if not (isinstance(e, RelationFailed) and e.kind == "mv" and deterministic(e.__cause__)):
            return False
        self._failing[e.relation] = self._failing.get(e.relation, 0) + 1
        if self._failing[e.relation] < MAX_ATTEMPTS:
            return False
        try:
            stopped = self.take_out(e.relation, f"failed {MAX_ATTEMPTS} times at epoch {e.epoch}: {e.cause}",
                                    f"which failed at epoch {e.epoch}: {e.cause}")
        except Exception:  # the loop goes on: the epoch is retried and fails again
            log.exception("could not take materialized view %r out of the pipeline", e.relation)
            return False
        log.error("materialized view %r failed %d times at epoch %d and is taken out of the pipeline (with %s): %s; "
                  "DROP it, then create it again", e.relation, MAX_ATTEMPTS, e.epoch,
                  ", ".join(sorted(stopped - {e.relation})) or "nothing downstream", e.cause)
        self._failing.clear()
        return True

    def take_out(self, name: str, reason: str, upstream_reason: str) -> set[str]:
        """Take MV `name` and every relation downstream of it out of the main graph; returns their
        names. Each keeps its rows as of its last committed epoch and says why it stopped (`reason`;
        downstream: its upstream `name`, `upstream_reason`); reads refuse it until it is dropped. A
        creating job over one of them is cancelled: its upstream's log ends."""
        rels = self.rt.catalog.relations(creating=True)
        stopped, grew = {name}, True
        while grew:
            more = {r.name for r in rels if r.name not in stopped and stopped & set(r.upstreams)}
            stopped |= more
            grew = bool(more)
        created = [r.name for r in rels if r.name in stopped and r.state == "created"]
        with self.locks.epoch:
            self.rt.catalog.fail_relations(
                {n: reason if n == name else f"stopped with its upstream {name!r}, {upstream_reason}" for n in created})
        for r in rels:
            if r.name in stopped and r.state == "creating" and self.jobs is not None \
                    and (job := self.rt.catalog.job_of(r.name)) is not None:
                try:
                    self.jobs.cancel(job.id, wait=False)
                except CatalogError:  # it finished or went meanwhile
                    pass
        return stopped
