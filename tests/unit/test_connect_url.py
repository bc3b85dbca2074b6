"""`connect_spark` refuses at once, naming the address, a Spark Connect URL whose server does not
answer or that is not `sc://HOST[:PORT]` (PySpark's client would retry its first request for minutes);
a URL's token never reaches the message. No Java, no server."""

from __future__ import annotations

import socket

import pytest

from sparkwave.core.errors import SparkwaveError
from sparkwave.core.spark import connect_spark


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_closed_port_is_refused_naming_the_address() -> None:
    port = _closed_port()
    with pytest.raises(SparkwaveError, match=f"no Spark Connect server answers at 127.0.0.1:{port}") as e:
        connect_spark(f"sc://127.0.0.1:{port}/;token=secret-token")
    assert "secret-token" not in str(e.value)


@pytest.mark.parametrize("url", ["http://127.0.0.1:15002", "sc://", "sc://h:notaport"])
def test_a_malformed_url_is_refused(url: str) -> None:
    with pytest.raises(SparkwaveError, match="Spark Connect URL"):
        connect_spark(url)
