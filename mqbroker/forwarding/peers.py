"""Pooled native connections from this broker to the other brokers, for requests forwarded on behalf
of the front ends (Twisted).

One connection per remote broker, kept by a ``ClientService`` (reconnects with backoff; versions
are negotiated before the connection is handed out), many requests in flight over it. Long-poll
fetches (and share fetches) may hold at most ``LONG_POLLS_MAX`` of the codec's in-flight slots, so a produce never
queues behind them. A request that gets no answer within its wait plus ``limits.peer_request_slack_s`` drops
the connection (the peer is paused or cut off) and fails with ``RequestTimedOutError``.

Each new connection's handshake (version negotiation, then the inter-broker login) is run by its first
request and shared by the requests behind it. A peer that accepts the connection but does not finish
the handshake within ``limits.peer_handshake_timeout_s`` is dropped and dialled again; the requests
waiting fail with ``BrokerUnavailableError``. (The handshake is not the ``ClientService``'s
``prepareConnection``: closing a connection that step rejected reaches the service in a state with no
transition for it.)
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from twisted.application.internet import ClientService
from twisted.internet import defer
from twisted.internet.defer import Deferred, DeferredSemaphore, fail, gatherResults
from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import Factory
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker import errors, limits
from mqbroker.client.backoff import PEER_RECONNECT
from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.client.twisted import NativeClientProtocol
from mqbroker.protocols.native import messages as m
from mqbroker.protocols.native import share_messages

#: In-flight slots long-poll fetches may hold on one connection; the rest stay free for other requests.
LONG_POLLS_MAX = limits.native_inflight_requests_max * 3 // 4


class _Peer:
    """One remote broker: its address, its reconnecting connection and the in-flight slots over it."""

    def __init__(self, address: tuple[str, int], service: ClientService) -> None:
        self.address = address
        self.service = service
        self.slots = DeferredSemaphore(limits.native_inflight_requests_max)
        self.long_polls = DeferredSemaphore(LONG_POLLS_MAX)
        #: The current connection and its handshake, shared by every request over it.
        self.handshake: tuple[object, Deferred[None]] | None = None


class PeerConnections:
    """Sends native requests to other brokers by node id over one pooled connection each."""

    log = Logger()

    def __init__(
        self, *, reactor: IReactorTime, client_id: str, address_of: Callable[[int], tuple[str, int] | None],
        endpoint_for: Callable[[str, int], Any], authenticate: Callable[[Any], Deferred[None]] | None = None,
    ) -> None:
        """``authenticate(protocol)`` runs after version negotiation on each new connection (inter-broker SCRAM)."""
        self._reactor = reactor
        self._authenticate = authenticate
        self.client_id = client_id
        self._address_of = address_of
        self._endpoint_for = endpoint_for
        self._peers: dict[int, _Peer] = {}

    def request(self, node_id: int, request: object, wait_s: float) -> Deferred[Any]:
        """Send ``request`` to broker ``node_id``; fire with its response (None for a Produce with acks=0).

        Fails with ``BrokerUnavailableError`` when the broker is unknown or cannot be reached, with
        ``RequestTimedOutError`` after ``wait_s`` plus the slack, else with the leader's typed error.
        """
        try:
            peer = self._peer(node_id)
        except errors.BrokerError as error:
            return fail(error)
        long_poll = isinstance(request, (m.FetchRequest, share_messages.ShareFetchRequest)) and request.max_wait_ms > 0
        if long_poll:
            return peer.long_polls.run(peer.slots.run, self._send, peer, node_id, request, wait_s)
        return peer.slots.run(self._send, peer, node_id, request, wait_s)

    def _send(self, peer: _Peer, node_id: int, request: object, wait_s: float) -> Deferred[Any]:
        return Deferred.fromCoroutine(self._exchange(peer, node_id, request, wait_s))

    async def _exchange(self, peer: _Peer, node_id: int, request: object, wait_s: float) -> Any:
        connecting = peer.service.whenConnected(failAfterFailures=1)
        try:
            protocol = await connecting
        except Exception as error:  # every connect failure is one typed, retriable error
            raise BrokerUnavailableError(f"cannot reach broker {node_id} at {peer.address}: {error}") from None
        await self._handshake(peer, protocol)
        pending = protocol.request(request)
        pending.addTimeout(wait_s + limits.peer_request_slack_s, self._reactor,
                           onTimeoutCancel=lambda result, timeout: self._drop(protocol, node_id, timeout))
        return await pending

    @staticmethod
    def _drop(protocol: NativeClientProtocol, node_id: int, timeout_s: float) -> Any:
        protocol.transport.abortConnection()
        raise errors.RequestTimedOutError(f"broker {node_id} did not answer a forwarded request within {timeout_s:.1f}s")

    def _peer(self, node_id: int) -> _Peer:
        """The pooled connection to ``node_id``, (re)built when its registered address changed."""
        address = self._address_of(node_id)
        if address is None:
            raise BrokerUnavailableError(f"broker {node_id} is not registered in the cluster metadata")
        peer = self._peers.get(node_id)
        if peer is not None and peer.address == address:
            return peer
        if peer is not None:
            peer.service.stopService()
        factory = Factory.forProtocol(lambda: NativeClientProtocol(self.client_id))
        service = ClientService(self._endpoint_for(*address), factory,
                                retryPolicy=PEER_RECONNECT.retry_policy(random.Random()),
                                clock=self._reactor)
        service.startService()
        peer = self._peers[node_id] = _Peer(address, service)
        return peer

    def _handshake(self, peer: _Peer, protocol: NativeClientProtocol) -> Deferred[None]:
        """The connection's handshake, started by its first request; fires for each request that waits on it."""
        if peer.handshake is None or peer.handshake[0] is not protocol:
            handshake = _negotiate(protocol)
            if self._authenticate is not None:
                authenticate = self._authenticate
                handshake.addCallback(lambda _: authenticate(protocol))
            handshake.addTimeout(limits.peer_handshake_timeout_s, self._reactor)
            handshake.addErrback(self._handshake_failed, peer, protocol)
            peer.handshake = (protocol, handshake)
        return _follow(peer.handshake[1])

    def _handshake_failed(self, failure: Any, peer: _Peer, protocol: NativeClientProtocol) -> Any:
        if failure.check(defer.TimeoutError):
            reason = f"no handshake answer within {limits.peer_handshake_timeout_s:.1f}s"
        else:
            reason = f"the handshake failed: {failure.getErrorMessage()}"
        self.log.warn("forwarding connection to {host}:{port}: {reason}; dropping it and dialling again",
                      host=peer.address[0], port=peer.address[1], reason=reason)
        protocol.transport.abortConnection()
        raise BrokerUnavailableError(f"broker at {peer.address[0]}:{peer.address[1]}: {reason}")

    def stop(self) -> Deferred[Any]:
        """Close every connection (broker shutdown); requests in flight fail."""
        peers, self._peers = self._peers, {}
        return gatherResults([peer.service.stopService() for peer in peers.values()])


def _follow(deferred: Deferred[None]) -> Deferred[None]:
    """A new Deferred with ``deferred``'s outcome, leaving ``deferred``'s own result for the next follower."""
    follower: Deferred[None] = Deferred()

    def relay(outcome: Any) -> Any:
        if isinstance(outcome, Failure):
            follower.errback(outcome)
        else:
            follower.callback(outcome)
        return outcome

    deferred.addBoth(relay)
    return follower


def _negotiate(protocol: NativeClientProtocol) -> Deferred[None]:
    """Agree on API versions before the connection serves forwarded requests."""
    negotiated = protocol.request(m.ApiVersionsRequest())
    negotiated.addCallback(protocol.codec.use_broker_versions)
    return negotiated

