"""The barrier loop's parts that need no Spark: flush tickets, the doorbell, the dependency order."""

from __future__ import annotations

import pytest

from sparkwave.core.catalog import Relation
from sparkwave.core.errors import PipelineError
from sparkwave.core.schema import Schema
from sparkwave.meta.barrier.flush import FlushTickets
from sparkwave.meta.barrier.schedule import topo_order
from sparkwave.meta.pipeline import Barriers
from sparkwave.meta.service import Service


def _never() -> None:
    pass


def _closed() -> None:
    raise PipelineError("the pipeline is closed")


def test_a_flush_is_answered_only_by_an_epoch_planned_under_its_ticket():
    tickets = FlushTickets()
    early = tickets.newest()  # an epoch reads its input ...
    ticket = tickets.take()  # ... and a flush begins before it persists its plan
    tickets.planned(7, early)
    tickets.committed(7)
    with pytest.raises(PipelineError, match="closed"):  # not answered: it waits (and sees the pipeline closed)
        tickets.wait(ticket, _never, _closed)
    tickets.planned(8, tickets.newest())
    tickets.committed(8)
    tickets.wait(ticket, _never, _closed)  # answered: returns before any wait


def test_a_flush_reports_a_failing_or_closed_pipeline():
    tickets = FlushTickets()
    ticket = tickets.take()

    def failing() -> None:
        raise PipelineError("the pipeline's barrier loop failed")

    with pytest.raises(PipelineError, match="failed"):
        tickets.wait(ticket, failing, _never)

    with pytest.raises(PipelineError, match="closed"):
        tickets.wait(ticket, _never, _closed)


def test_the_doorbell_answers_a_request_once_and_a_nudge_only_a_held_barrier():
    bell = Barriers(1000)
    bell.request_barrier()
    assert bell.wait(False, 60, lambda: False) and bell.flush_requests == 0
    bell.nudge()
    assert bell.wait(True, 60, lambda: False)  # held back: the nudge admits it at once
    assert bell.wait(False, 0, lambda: True) is False  # stopped


def test_a_service_stops_its_sleep_at_once():
    class Sleeper(Service):
        rounds = 0

        def _run(self) -> None:
            while self.sleep(None):
                self.rounds += 1

    s = Sleeper("sleeper")
    s.start()
    s.stop()
    assert not s.alive() and s.rounds == 0


def _rel(name: str, *upstreams: str) -> Relation:
    return Relation(name, "mv" if upstreams else "table", Schema((), ()), {"upstreams": list(upstreams)}, 0)


def test_relations_execute_after_their_upstreams():
    rels = [_rel("c", "b", "a"), _rel("b", "a"), _rel("a"), _rel("d", "x")]
    assert [r.name for r in topo_order(rels)] == ["a", "b", "c", "d"]
