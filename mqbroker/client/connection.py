"""One plain blocking socket to one broker, speaking the native codec (no reactor, no threads).

Used by the blocking driver (scripts, Spark workers): ``send`` writes a request and returns its
correlation id, ``receive`` reads what has arrived and returns the responses it completes, and
``wait_response`` waits for one request's answer while others are in flight (the consumer keeps a
fetch parked at the broker while it sends other requests on the same connection).
"""

from __future__ import annotations

import select
import socket
import ssl
import time
from collections.abc import Sequence

from mqbroker.client.security import ClientSecurity, sasl_steps
from mqbroker.errors import BrokerError, RequestTimedOutError, error_for_code
from mqbroker.protocols.native.codec import ErrorResponse
from mqbroker.protocols.native.connection import ClientConnection, ConnectionFailed, ResponseReceived
from mqbroker.protocols.native.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
)

#: Bytes asked of the kernel per read: large, since fetch replies carry megabytes. Reads go into
#: one buffer per connection, reused: a fresh buffer per ``recv`` of this size costs an mmap, an
#: mremap and a munmap on every read, several times per message at low rates.
_RECEIVE_BYTES = 1024 * 1024


class BrokerUnavailableError(BrokerError):
    """A broker could not be reached or dropped the connection (retriable)."""

    retriable = True


def parse_address(address: str) -> tuple[str, int]:
    """Split ``host:port`` (IPv6 hosts in brackets)."""
    host, separator, port = address.rpartition(":")
    if not separator or not port.isdigit():
        raise ValueError(f"bootstrap address {address!r} is not HOST:PORT")
    return host.strip("[]") or "localhost", int(port)


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[tuple[str, int]]:
    """Broker addresses, in order, from ``"host1:9393,host2:9393"`` (Kafka's ``bootstrap.servers``
    form) or a list of such strings; clients try them in turn until one answers."""
    entries = [bootstrap] if isinstance(bootstrap, str) else list(bootstrap)
    addresses = [parse_address(part.strip()) for entry in entries for part in entry.split(",") if part.strip()]
    if not addresses:
        raise ValueError(f"bootstrap {bootstrap!r} names no broker; give HOST:PORT[,HOST:PORT...]")
    return addresses


class BlockingConnection:
    """A socket plus its sans-I/O ``ClientConnection``."""

    def __init__(
        self, host: str, port: int, client_id: str, timeout_s: float, security: ClientSecurity | None = None
    ) -> None:
        try:
            self.socket = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as error:
            raise BrokerUnavailableError(f"cannot connect to broker {host}:{port}: {error}") from error
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._received = memoryview(bytearray(_RECEIVE_BYTES))
        if security is not None and security.ssl_context is not None:
            try:  # the server's certificate must name ``host`` (checked by the context)
                self.socket = security.ssl_context.wrap_socket(self.socket, server_hostname=host)
            except OSError as error:  # ssl.SSLError included
                self.socket.close()
                raise BrokerUnavailableError(f"TLS handshake with {host}:{port} failed: {error}") from error
        self.address = f"{host}:{port}"
        self._timeout_s = timeout_s
        self.codec = ClientConnection(client_id)
        #: Responses that arrived while another was awaited, by correlation id, until their own wait.
        self._arrived: dict[int, object] = {}
        #: Requests whose responses nobody will wait for: dropped on arrival.
        self._abandoned: set[int] = set()
        versions = self.request(ApiVersionsRequest(), timeout_s)
        assert isinstance(versions, ApiVersionsResponse)
        self.codec.use_broker_versions(versions)
        if security is not None and security.sasl_mechanism:
            self._authenticate(security, timeout_s)

    def _authenticate(self, security: ClientSecurity, timeout_s: float) -> None:
        """SaslHandshake, then SaslAuthenticate steps until the exchange completes (typed errors on refusal)."""
        self.request(SaslHandshakeRequest(mechanism=security.sasl_mechanism or ""), timeout_s)
        steps = sasl_steps(security)
        message = next(steps)
        while True:
            response = self.request(SaslAuthenticateRequest(auth_bytes=message), timeout_s)
            assert isinstance(response, SaslAuthenticateResponse)
            try:
                message = steps.send(response.auth_bytes)
            except StopIteration:
                return

    def send(self, request: object) -> int:
        """Write ``request``; return its correlation id."""
        correlation_id, data = self.codec.send_request(request)
        try:
            if self.socket.gettimeout() == 0.0:
                self._send_without_blocking(data)
            else:
                self.socket.sendall(data)
        except OSError as error:
            raise BrokerUnavailableError(f"lost connection to {self.address}: {error}") from error
        return correlation_id

    def _send_without_blocking(self, data: bytes) -> None:
        """``sendall`` for a non-blocking socket (the producer's I/O thread), whose ``sendall``
        would give up half-way through a request as soon as the send buffer is full."""
        view = memoryview(data)
        while view:
            try:
                view = view[self.socket.send(view):]
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                _, writable, _ = select.select([], [self.socket], [], self._timeout_s)
                if not writable:
                    raise TimeoutError(f"the send buffer stayed full for {self._timeout_s}s") from None

    def receive(self, timeout_s: float | None = None) -> list[ResponseReceived]:
        """Read once (blocking up to ``timeout_s``, default the socket's timeout); return the responses completed."""
        try:
            if timeout_s is not None and self.socket.gettimeout() != timeout_s:  # a syscall: only when it changes
                self.socket.settimeout(timeout_s)
            count = self.socket.recv_into(self._received)
        except TimeoutError:
            return []
        except OSError as error:
            raise BrokerUnavailableError(f"lost connection to {self.address}: {error}") from error
        if not count:
            raise BrokerUnavailableError(f"broker {self.address} closed the connection")
        events = self.codec.receive_data(self._received[:count])  # the codec copies what it keeps
        responses: list[ResponseReceived] = []
        for event in events:
            if isinstance(event, ConnectionFailed):
                raise BrokerUnavailableError(f"broker {self.address} broke the protocol: {event.error.message}")
            responses.append(event)
        return responses

    def request(self, request: object, timeout_s: float) -> object:
        """Send ``request`` and wait for its response (nothing else may be in flight)."""
        return self.await_response(self.send(request), timeout_s)

    def await_response(self, correlation_id: int, timeout_s: float) -> object:
        """Block until the response to ``correlation_id`` arrives; a large one may take many reads.

        Raises ``RequestTimedOutError`` when ``timeout_s`` passes first (a late answer is then dropped).
        """
        try:
            response = self.wait_response(correlation_id, timeout_s)
        except BaseException:  # KeyboardInterrupt, say: nobody waits for this answer any more
            self.abandon(correlation_id)
            raise
        if response is None:
            self.abandon(correlation_id)
            raise RequestTimedOutError(f"no answer from {self.address} within {timeout_s}s")
        return response

    def wait_response(self, correlation_id: int, timeout_s: float) -> object | None:
        """The response to ``correlation_id``, or None if it has not arrived within ``timeout_s`` (it stays in
        flight). Responses to other requests that complete meanwhile are kept for their own wait."""
        arrived = self._arrived
        deadline = time.monotonic() + timeout_s
        wait_s = timeout_s
        while correlation_id not in arrived:
            if wait_s <= 0:
                return None
            for event in self.receive(wait_s):
                if event.correlation_id in self._abandoned:
                    self._abandoned.discard(event.correlation_id)
                else:
                    arrived[event.correlation_id] = event.response
            wait_s = deadline - time.monotonic()
        return raise_for_error_response(arrived.pop(correlation_id))

    def abandon(self, correlation_id: int) -> None:
        """Nobody will wait for the response to ``correlation_id``: drop it (now, or when it arrives).

        ``_abandoned`` keeps only requests still unanswered (an answer read by ``receive`` alone is never looked up
        there), so it holds no more ids than the codec has requests in flight, however long the connection lives."""
        if self._arrived.pop(correlation_id, _MISSING) is _MISSING:
            unanswered = self.codec.inflight_correlation_ids
            self._abandoned.intersection_update(unanswered)
            if correlation_id in unanswered:
                self._abandoned.add(correlation_id)

    def close(self) -> None:
        """Close the socket; nothing is awaited any more."""
        self.socket.close()
        self._arrived.clear()
        self._abandoned.clear()


_MISSING = object()


def raise_for_error_response(response: object) -> object:
    """Return ``response``, or raise the typed error of an ``ErrorResponse``."""
    if isinstance(response, ErrorResponse):
        raise error_for_code(response.error_code, response.error_message or "the request failed")
    return response
