"""Sending push requests: HTTP/1.1 POSTs over a subscription's own persistent connections.

Each subscription has its own connections (at most ``push.max.outstanding``), so an endpoint that
hangs or refuses holds only its own subscription's. A request goes to an idle connection, or opens
one while the bound allows: one request per connection at a time (pipelining several would leave
those behind an unanswered one in doubt when its connection closes, and the endpoint may already
have taken them: each would be delivered twice).
HTTPS endpoints are verified (certificate chain and host name) against ``push.ca.file``, or the
system's trust store without it. A request that has no answer within the ack deadline is
cancelled, closing its connection.
Responses are read by ``responses.ResponseReader`` (at most ``limits.push_response_bytes_max`` of a
body; the rest is not read and the connection closes). Requests are written as one buffer each:
``twisted.web.client.Agent`` cost four times the CPU per request (parsing the URL, validating
headers, a body producer, a pool lookup), which capped a subscription near 5,000 requests/s.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any

from twisted.internet.defer import CancelledError, Deferred, TimeoutError
from twisted.internet.endpoints import HostnameEndpoint, connectProtocol, wrapClientTLS
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IDelayedCall, IStreamClientEndpoint
from twisted.internet.protocol import Protocol, connectionDone
from twisted.internet.ssl import Certificate, trustRootFromCertificates
from twisted.python.failure import Failure
from twisted.web.client import URI, BrowserLikePolicyForHTTPS

from mqbroker.shares.push.responses import PushResponseError, ResponseReader
from mqbroker.shares.push.signing import PushRequest

_PEM_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)
#: Seconds an idle connection is kept.
IDLE_CONNECTION_S = 60
#: Seconds allowed to open a connection (within the ack deadline).
CONNECT_TIMEOUT_S = 10


def load_trust_root(ca_file: str) -> Any:
    """The certificates of a PEM file as a trust root; ``ValueError`` if it holds none."""
    with open(ca_file, "rb") as handle:
        pem = handle.read()
    certificates = [Certificate.loadPEM(block) for block in _PEM_CERTIFICATE.findall(pem)]
    if not certificates:
        raise ValueError(f"{ca_file} holds no PEM certificate")
    return trustRootFromCertificates(certificates)


def _endpoint(reactor: Any, uri: URI, ca_file: str) -> IStreamClientEndpoint:
    """Where a subscription's connections go: ``HostnameEndpoint``, in TLS verified by the browser-like policy for
    ``https`` (against ``ca_file``, or the system's trust store without it)."""
    endpoint: IStreamClientEndpoint = HostnameEndpoint(reactor, uri.host, uri.port, timeout=CONNECT_TIMEOUT_S)
    if uri.scheme == b"https":
        policy = BrowserLikePolicyForHTTPS(trustRoot=load_trust_root(ca_file)) if ca_file else BrowserLikePolicyForHTTPS()
        endpoint = wrapClientTLS(policy.creatorForNetloc(uri.host, uri.port), endpoint)
    return endpoint


def _header_value(value: str) -> bytes:
    """A header value as sent: line breaks become spaces (as Twisted's ``Headers`` does), so none splits a header."""
    if "\r" in value or "\n" in value:
        value = value.replace("\r\n", " ").replace("\r", " ").replace("\n", " ")
    return value.encode("utf-8")


class _PushConnection(Protocol):
    """One persistent connection carrying one request at a time."""

    def __init__(self, sender: PushSender) -> None:
        self._sender = sender
        self._reader = ResponseReader()
        #: The request waiting for its answer.
        self.answer: Deferred[int] | None = None
        self.idle_since = 0.0

    def connectionMade(self) -> None:  # noqa: N802 (Twisted's name)
        """Ready for a request."""
        self._sender._ready(self)

    def send(self, data: bytes, answer: Deferred[int]) -> None:
        """Write one request; ``answer`` fires with its status."""
        self.answer = answer
        self.transport.write(data)

    def dataReceived(self, data: bytes) -> None:  # noqa: N802 (Twisted's name)
        """Answer the request once its response is complete."""
        try:
            statuses = self._reader.feed(data)
            if len(statuses) > (self.answer is not None):
                raise PushResponseError("the endpoint sent a response to no request")
        except PushResponseError as error:
            self.abort(error)
            return
        if statuses:
            self._answered(statuses[0])
        if self._reader.must_close and not self._reader.in_response:
            self.abort(ConnectionDone("the endpoint closes the connection"))
        elif statuses:
            self._sender._ready(self)

    def _answered(self, status: int) -> None:
        answer, self.answer = self.answer, None
        if answer is not None and not answer.called:
            answer.callback(status)

    def abort(self, error: Exception | Failure) -> None:
        """Close now; the request waiting for its answer fails with ``error``."""
        answer, self.answer = self.answer, None
        if answer is not None and not answer.called:
            answer.errback(error)
        self.transport.abortConnection()

    def connectionLost(self, reason: Failure = connectionDone) -> None:  # noqa: N802 (Twisted's name)
        """Answer a response the close delimits, else fail the request with the close."""
        status = self._reader.connection_ended()
        if status is not None:
            self._answered(status)
        answer, self.answer = self.answer, None
        if answer is not None and not answer.called:
            answer.errback(reason)
        self._sender._lost(self)


class PushSender:
    """POSTs one subscription's requests to its endpoint over at most ``connections_max`` persistent connections."""

    def __init__(self, reactor: Any, *, endpoint: str, connections_max: int, ca_file: str = "") -> None:
        self._reactor = reactor
        uri = URI.fromBytes(endpoint.encode("utf-8"))
        default_port = 443 if uri.scheme == b"https" else 80
        host = uri.host if uri.port == default_port else b"%s:%d" % (uri.host, uri.port)
        self._head = b"POST " + (uri.originForm or b"/") + b" HTTP/1.1\r\nHost: " + host + b"\r\n"
        self._endpoint = _endpoint(reactor, uri, ca_file)
        self._connections_max = connections_max
        self._connections: set[_PushConnection] = set()
        self._idle: list[_PushConnection] = []
        self._connecting = 0
        self._queued: deque[tuple[bytes, Deferred[int]]] = deque()
        #: (deadline, answer) in the order sent: one timeout is the same for every request of a subscription.
        self._deadlines: deque[tuple[float, Deferred[int]]] = deque()
        self._deadline_timer: IDelayedCall | None = None
        self._sweep: IDelayedCall | None = None
        self._closed = False

    def post(self, request: PushRequest, timeout_s: float) -> Deferred[int]:
        """Send ``request``; fires with the response's status code (fails with ``TimeoutError`` after ``timeout_s``,
        or with the connection's error)."""
        parts = [self._head, b"Content-Length: %d\r\n" % len(request.body)]
        parts += [name.encode("ascii") + b": " + _header_value(value) + b"\r\n" for name, value in request.headers.items()]
        parts += [b"\r\n", request.body]
        answer: Deferred[int] = Deferred(self._cancelled)
        if self._closed:
            answer.errback(ConnectionDone("the subscription stopped"))
            return answer
        self._queued.append((b"".join(parts), answer))
        self._dispatch()
        self._deadlines.append((self._reactor.seconds() + timeout_s, answer))
        if self._deadline_timer is None:
            self._deadline_timer = self._reactor.callLater(timeout_s, self._expire)
        return answer

    def _expire(self) -> None:
        """Requests past their deadline fail with ``TimeoutError`` (a sent one's connection closes)."""
        self._deadline_timer = None
        now = self._reactor.seconds()
        deadlines = self._deadlines
        while deadlines and (deadlines[0][1].called or deadlines[0][0] <= now):
            _, answer = deadlines.popleft()
            if not answer.called:
                answer.cancel()
        if deadlines:
            self._deadline_timer = self._reactor.callLater(max(0.0, deadlines[0][0] - now), self._expire)

    def _cancelled(self, answer: Deferred[int]) -> None:
        """A request that ran out of time: dropped if still queued, else its connection is closed."""
        for index, (_, queued) in enumerate(self._queued):
            if queued is answer:
                del self._queued[index]
                break
        else:
            for connection in self._connections:
                if connection.answer is answer:
                    connection.answer = None
                    connection.abort(CancelledError())
                    break
        answer.errback(TimeoutError("no answer from the endpoint within its ack deadline"))

    def _dispatch(self) -> None:
        """Send queued requests on idle connections, opening connections while allowed."""
        queued, idle = self._queued, self._idle
        while queued and idle:
            data, answer = queued.popleft()
            if not answer.called:
                idle.pop().send(data, answer)
        wanted = min(len(queued), self._connections_max - len(self._connections)) - self._connecting
        for _ in range(max(0, wanted)):
            self._connecting += 1
            connected = connectProtocol(self._endpoint, _PushConnection(self))
            connected.addErrback(self._connect_failed)

    def _connect_failed(self, failure: Failure) -> None:
        self._connecting -= 1
        if not self._connections and not self._connecting:  # nothing will carry these: they fail and are retried
            waiting, self._queued = self._queued, deque()
            for _, answer in waiting:
                if not answer.called:
                    answer.errback(failure)

    def _ready(self, connection: _PushConnection) -> None:
        """A connection opened, or answered its request: it takes the next queued one, or waits idle."""
        if connection not in self._connections:
            self._connecting -= 1
            self._connections.add(connection)
            if self._closed:
                connection.abort(ConnectionDone("the subscription stopped"))
                return
        if self._queued:
            self._idle.append(connection)
            self._dispatch()
            return
        connection.idle_since = self._reactor.seconds()
        self._idle.append(connection)
        if self._sweep is None:
            self._sweep = self._reactor.callLater(IDLE_CONNECTION_S, self._close_idle)

    def _lost(self, connection: _PushConnection) -> None:
        if connection in self._connections:
            self._connections.discard(connection)
            if connection in self._idle:
                self._idle.remove(connection)
        else:
            self._connecting -= 1  # it closed before it was ready
        self._dispatch()

    def _close_idle(self) -> None:
        """Close connections idle for ``IDLE_CONNECTION_S``; look again later while others remain."""
        self._sweep = None
        now = self._reactor.seconds()
        for connection in [c for c in self._idle if now - c.idle_since >= IDLE_CONNECTION_S]:
            connection.abort(ConnectionDone("idle"))
        if self._connections:
            self._sweep = self._reactor.callLater(IDLE_CONNECTION_S, self._close_idle)

    def close(self) -> None:
        """Close every connection; requests not answered yet fail."""
        self._closed = True
        for timer in (self._sweep, self._deadline_timer):
            if timer is not None and timer.active():
                timer.cancel()
        self._sweep = self._deadline_timer = None
        waiting, self._queued = self._queued, deque()
        for _, answer in waiting:
            if not answer.called:
                answer.errback(ConnectionDone("the subscription stopped"))
        for connection in list(self._connections):
            connection.abort(ConnectionDone("the subscription stopped"))
