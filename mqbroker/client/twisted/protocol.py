"""One broker connection for the Twisted client: bytes in and out of a sans-I/O ``ClientConnection``.

Also used by the broker itself to talk to its peers (follower fetches, forwarded requests).
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure

from mqbroker.client.connection import BrokerUnavailableError, raise_for_error_response
from mqbroker.errors import BrokerError
from mqbroker.protocols.native.connection import ClientConnection, ConnectionFailed


class NativeClientProtocol(Protocol):
    """Bytes <-> ``ClientConnection``; each request's Deferred fires with its response."""

    def __init__(self, client_id: str) -> None:
        self.codec = ClientConnection(client_id)
        self._waiting: dict[int, Deferred[Any]] = {}
        self.lost: Deferred[None] = Deferred()

    def request(self, request: object) -> Deferred[Any]:
        """Send ``request``; fire with its response (None for one that expects none)."""
        correlation_id, data = self.codec.send_request(request)
        self.transport.write(data)
        if correlation_id not in self.codec.inflight_correlation_ids:
            return succeed(None)
        waiting: Deferred[Any] = Deferred()
        self._waiting[correlation_id] = waiting
        return waiting

    def dataReceived(self, data: bytes) -> None:
        """Feed the codec; fire the Deferreds of completed responses."""
        for event in self.codec.receive_data(data):
            if isinstance(event, ConnectionFailed):
                self.transport.loseConnection()
                return
            waiting = self._waiting.pop(event.correlation_id)
            try:
                waiting.callback(raise_for_error_response(event.response))
            except BrokerError as error:
                waiting.errback(Failure(error))

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        """Fail every request still waiting."""
        waiting, self._waiting = self._waiting, {}
        for deferred in waiting.values():
            deferred.errback(Failure(BrokerUnavailableError(f"connection lost: {reason.getErrorMessage()}")))
        self.lost.callback(None)
