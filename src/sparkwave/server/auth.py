"""Who may connect: SCRAM-SHA-256 against the one configured password (any user name), or, with
no password, trust for loopback peers only.

The SCRAM verifier is derived once per server from the password: every user name gets the same
salt and keys, so neither a name nor a wrong password changes the work done or the answer's
timing beyond "password authentication failed"."""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
import socket
from collections.abc import Callable

from scramp import ScramMechanism

from sparkwave.server import protocol as proto
from sparkwave.server.backend import ServerError

MECHANISM = "SCRAM-SHA-256"


def is_loopback_address(address: str) -> bool:
    """Whether an IP address (a peer's) is a loopback one (127/8, ::1, ::ffff:127.x)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def is_loopback_host(host: str) -> bool:
    """Whether a listen address binds loopback only (a name must resolve to loopback addresses only)."""
    if host in ("", "*", "0.0.0.0", "::"):
        return False
    try:
        ipaddress.ip_address(host)
        return is_loopback_address(host)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    return bool(infos) and all(is_loopback_address(str(i[4][0])) for i in infos)


class Authenticator:
    """The server's authentication policy; `authenticate` runs the exchange on one connection."""

    def __init__(self, password: str | None) -> None:
        self.password = password
        if password is not None:
            self._mechanism = ScramMechanism(MECHANISM)
            self._auth_info = self._mechanism.make_auth_info(password)

    def authenticate(self, user: str, peer: str, send: Callable[[bytes], None], reader: proto.Reader) -> None:
        """Raises ServerError (FATAL 28000 / 28P01) when the peer may not in; sends
        AuthenticationOk when it may."""
        if self.password is None:
            if not is_loopback_address(peer):
                raise ServerError("28000", f"no password is configured, so only loopback connections are accepted "
                                  f"(connection from {peer} refused); start the server with a password",
                                  severity="FATAL")
            send(proto.authentication_ok())
            return
        self._scram(user, send, reader)
        send(proto.authentication_ok())

    def verifies(self, password: str) -> bool:
        """Whether a clear-text password (HTTP Basic's, `server/http.py`) is the configured one: it is
        derived with the verifier's own salt and iterations and its StoredKey compared in constant
        time, so both servers check one verifier the same way."""
        if self.password is None:
            return False
        salt, stored_key, _, iterations = self._auth_info
        try:
            _, candidate, _, _ = self._mechanism.make_auth_info(password, iteration_count=iterations, salt=salt)
        except Exception:  # scramp refuses what SASLprep prohibits: no such password was configured
            return False
        return hmac.compare_digest(candidate, stored_key)

    def _scram(self, user: str, send: Callable[[bytes], None], reader: proto.Reader) -> None:
        """RFC 5802 / 7677 as PostgreSQL runs it: the user name inside SCRAM is ignored (libpq sends
        it empty, which scramp's server refuses, so the exchange is ours; the verifier is scramp's)."""
        failed = ServerError("28P01", f'password authentication failed for user "{user}"', severity="FATAL")
        send(proto.authentication_sasl([MECHANISM]))
        first = self._password_message(reader)
        mechanism = first.cstr()
        length = first.int32()
        data = first.take(length) if length >= 0 else b""
        first.end()
        if mechanism != MECHANISM:
            raise ServerError("28000", f"client selected an invalid SASL authentication mechanism: {mechanism}",
                              severity="FATAL")
        try:
            exchange = _ScramExchange(*self._auth_info)
            send(proto.authentication_sasl_continue(exchange.server_first(data.decode())))
            final = self._password_message(reader).rest()
            send(proto.authentication_sasl_final(exchange.server_final(final.decode())))
        except (ValueError, UnicodeDecodeError) as e:
            raise failed from e

    @staticmethod
    def _password_message(reader: proto.Reader) -> proto.Payload:
        kind, payload = reader.read_message(max_bytes=proto.MAX_STARTUP_BYTES)
        if kind != b"p":
            raise proto.ProtocolViolation(f"expected SASL response, got message type {kind!r}")
        return proto.Payload(payload, "SASL response")


class _ScramExchange:
    """The server side of one SCRAM-SHA-256 exchange (no channel binding: 'n' or 'y' GS2 flag)."""

    def __init__(self, salt: bytes, stored_key: bytes, server_key: bytes, iterations: int) -> None:
        self.salt, self.stored_key, self.server_key, self.iterations = salt, stored_key, server_key, iterations
        self.nonce = ""
        self.gs2_header = ""
        self.client_first_bare = ""
        self.server_first_message = ""

    def server_first(self, client_first: str) -> bytes:
        flag, _, rest = client_first.partition(",")
        authzid, _, bare = rest.partition(",")
        if flag not in ("n", "y"):
            raise ValueError("channel binding is not offered")
        attrs = _attributes(bare)
        if "m" in attrs or not attrs.get("r") or any(c == "," or not 0x21 <= ord(c) <= 0x7E for c in attrs["r"]):
            raise ValueError("malformed client-first message")
        self.gs2_header = f"{flag},{authzid},"
        self.client_first_bare = bare
        self.nonce = attrs["r"] + secrets.token_urlsafe(18)
        salt = base64.b64encode(self.salt).decode()
        self.server_first_message = f"r={self.nonce},s={salt},i={self.iterations}"
        return self.server_first_message.encode()

    def server_final(self, client_final: str) -> bytes:
        without_proof, sep, proof_b64 = client_final.rpartition(",p=")
        if not sep:
            raise ValueError("client-final message without proof")
        attrs = _attributes(without_proof)
        if attrs.get("c") != base64.b64encode(self.gs2_header.encode()).decode():
            raise ValueError("channel binding data does not match")
        if not hmac.compare_digest(attrs.get("r", "").encode(), self.nonce.encode()):
            raise ValueError("nonce does not match")
        proof = base64.b64decode(proof_b64, validate=True)
        auth_message = f"{self.client_first_bare},{self.server_first_message},{without_proof}".encode()
        signature = hmac.digest(self.stored_key, auth_message, "sha256")
        if len(proof) != len(signature):
            raise ValueError("malformed proof")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), self.stored_key):
            raise ValueError("wrong password")
        server_signature = hmac.digest(self.server_key, auth_message, "sha256")
        return b"v=" + base64.b64encode(server_signature)


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ValueError(f"malformed SCRAM attribute {part[:20]!r}")
        out.setdefault(key, value)
    return out
