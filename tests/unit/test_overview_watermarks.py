"""The dashboard's Kafka high watermarks (`frontend/overview.py: _Watermarks`) against a broker that
accepts connections and never answers: it is asked once, not once per source, while it stays silent
(a hundred sources on a hung broker would each cost a timeout, per scrape and per dashboard poll)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sparkwave.core.catalog import Relation
from sparkwave.core.schema import Column, Schema, parse_type
from sparkwave.frontend.overview import _Watermarks

MARK = b"MARK"


class HungBroker:
    """A TCP listener that accepts every connection, keeps it open and answers nothing. `settled()`
    is the number of connections accepted before it: a connection of ours marks the queue's end."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.held: list[socket.socket] = []
        self._marked = threading.Condition()
        self._marks: list[int] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.settimeout(30)
            try:
                first = conn.recv(len(MARK))
            except OSError:
                first = b""
            if first == MARK:
                with self._marked:
                    self._marks.append(self.accepted)
                    self._marked.notify_all()
                conn.close()
            else:
                self.accepted += 1
                self.held.append(conn)

    def settled(self) -> int:
        """The connections taken so far (every one opened before this call has been accepted)."""
        with self._marked:
            before = len(self._marks)
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
            s.sendall(MARK)
            with self._marked:
                assert self._marked.wait_for(lambda: len(self._marks) > before, 30)
                return self._marks[before]

    def close(self) -> None:
        self.sock.close()
        for c in self.held:
            c.close()


@contextmanager
def hung_broker() -> Iterator[HungBroker]:
    broker = HungBroker()
    try:
        yield broker
    finally:
        broker.close()


def kafka_table(name: str, bootstrap: str) -> Relation:
    schema = Schema((Column("id", parse_type("int")),), ("id",))
    connector = {"connector": "kafka", "topic": f"t_{name}", "properties.bootstrap.server": bootstrap,
                 "format": "upsert", "encode": "json"}
    return Relation(name, "table", schema, {"connector": connector}, 1)


def test_a_broker_that_does_not_answer_is_asked_once_for_all_its_sources():
    watermarks = _Watermarks()
    with hung_broker() as broker:
        bootstrap = f"127.0.0.1:{broker.port}"
        first = watermarks.get(kafka_table("a", bootstrap), {"0": 5})
        assert first == {"0": None}  # no answer: unknown, no error
        asked = broker.settled()
        assert asked >= 1  # it was asked
        for name in ("b", "c", "d"):
            assert watermarks.get(kafka_table(name, bootstrap), {"0": 1, "1": 2}) == {"0": None, "1": None}
        assert broker.settled() == asked  # the others did not ask it again
