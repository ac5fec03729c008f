"""Authenticated controller connections (Twisted): endpoints that run the broker handshake first.

``AuthenticatedServerEndpoint`` and ``AuthenticatedClientEndpoint`` wrap the controller's TCP (or
TLS) endpoints. Every connection starts with the ``inter_broker`` handshake in length-prefixed
frames of at most ``limits.controller_handshake_frame_bytes_max`` bytes, which must finish within
``limits.controller_handshake_s_max``; only then does the wrapped protocol (the Raft transport's) see the
connection, and its transport provides ``IAuthenticatedPeer`` with the node id the peer proved.
A peer that fails is sent the reason, logged to the audit log and disconnected.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from twisted.internet.interfaces import (
    IProtocolFactory,
    IReactorTime,
    IStreamClientEndpoint,
    IStreamServerEndpoint,
)
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory
from zope.interface import directlyProvides, implementer, providedBy

from mqbroker import limits
from mqbroker.errors import BrokerError
from mqbroker.interfaces import IAuthenticatedPeer
from mqbroker.protocols.framing import FrameTooLarge, LengthPrefixedFrames, frame
from mqbroker.security.inter_broker import (
    BrokerCertificateRules,
    ClientHandshake,
    HandshakeMethod,
    InterBrokerLogin,
    PeerAuthenticationError,
    PeerPolicy,
    ServerHandshake,
    refusal,
)
from mqbroker.security.service import audit_authentication_failure
from mqbroker.security.tls import peer_identity

log = Logger()


def _tls_identity(transport: Any) -> tuple[str, tuple[str, ...]] | None:
    identity = peer_identity(transport)
    return None if identity is None else (identity.subject, identity.alternative_names)


@implementer(IAuthenticatedPeer)
class _Handshaking(ProtocolWrapper):
    """Runs the handshake, then hands the connection (and any bytes after the handshake) to the wrapped protocol."""

    def __init__(self, factory: WrappingFactory, wrapped: Any) -> None:
        super().__init__(factory, wrapped)
        self.peer_node_id: int | None = None
        self._frames = LengthPrefixedFrames(limits.controller_handshake_frame_bytes_max)
        self._timer: Any = None
        self._handed_over = False

    def makeConnection(self, transport: Any) -> None:
        """Connect this wrapper only: the wrapped protocol is connected once the handshake succeeds."""
        directlyProvides(self, providedBy(transport))  # e.g. ISSLTransport; IAuthenticatedPeer stays (the class's)
        Protocol.makeConnection(self, transport)

    def connectionMade(self) -> None:
        self.factory.registerProtocol(self)
        self._timer = self.factory.reactor.callLater(limits.controller_handshake_s_max, self._timed_out)
        self._begin()

    def _begin(self) -> None:
        """Send the first frame, if this side speaks first."""

    def _step(self, body: bytes) -> list[bytes]:
        raise NotImplementedError

    def dataReceived(self, data: bytes) -> None:
        if self._handed_over:
            self.wrappedProtocol.dataReceived(data)
            return
        try:
            bodies = self._frames.feed(data)
            for index, body in enumerate(bodies):
                for reply in self._step(body):
                    self.transport.write(frame(reply))
                if self.peer_node_id is not None:
                    self._hand_over(bodies[index + 1 :])
                    return
        except (BrokerError, FrameTooLarge) as error:  # PeerAuthenticationError, or SCRAM's own SASL errors
            self._refuse(error)

    def _hand_over(self, later_frames: list[bytes]) -> None:
        self._cancel_timer()
        self._handed_over = True
        self.wrappedProtocol.makeConnection(self)
        rest = b"".join(frame(body) for body in later_frames)
        leftover = self._frames.take_buffered()
        if rest or leftover:
            self.wrappedProtocol.dataReceived(rest + leftover)

    def _refuse(self, error: Exception) -> None:
        peer = self.transport.getPeer()
        audit_authentication_failure("controller", getattr(peer, "host", ""), "", str(error))
        self.transport.write(frame(refusal(error)))
        self.transport.loseConnection()

    def _timed_out(self) -> None:
        self._timer = None
        self._refuse(PeerAuthenticationError(f"no controller handshake within {limits.controller_handshake_s_max:.0f}s"))

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def connectionLost(self, reason: Any) -> None:
        self._cancel_timer()
        self.factory.unregisterProtocol(self)
        # Also when the handshake failed: a ClientService's protocol must hear of it to reconnect.
        self.wrappedProtocol.connectionLost(reason)


class _ServerHandshaking(_Handshaking):
    _handshake: ServerHandshake | None = None

    def _step(self, body: bytes) -> list[bytes]:
        if self._handshake is None:  # the first frame: TLS is done, the certificate (if any) is known
            self._handshake = ServerHandshake(self.factory.policy, _tls_identity(self.transport), os.urandom)
        replies = self._handshake.receive(body)
        self.peer_node_id = self._handshake.node_id
        return replies


class _ClientHandshaking(_Handshaking):
    def _begin(self) -> None:
        self._handshake: ClientHandshake = self.factory.make_handshake()
        self.transport.write(frame(self._handshake.start()))

    def _step(self, body: bytes) -> list[bytes]:
        self._handshake.tls_identity = _tls_identity(self.transport)  # the listener's certificate, once TLS is up
        reply = self._handshake.receive(body)
        if self._handshake.complete:
            self.peer_node_id = self.factory.peer_id
        return [reply] if reply is not None else []

    def _refuse(self, error: Exception) -> None:
        log.warn("controller connection to node {peer} failed its handshake: {error}", peer=self.factory.peer_id,
                 error=error)
        self.transport.loseConnection()


class _HandshakeFactory(WrappingFactory):
    noisy = False

    def __init__(self, wrapped: IProtocolFactory, reactor: IReactorTime) -> None:
        super().__init__(wrapped)
        self.reactor = reactor


@implementer(IStreamServerEndpoint)
class AuthenticatedServerEndpoint:
    """The controller's listening endpoint: a connection reaches the Raft transport only once its peer
    proved a voter's identity under ``policy``."""

    def __init__(self, endpoint: IStreamServerEndpoint, policy: PeerPolicy, reactor: IReactorTime,
                 wrap_factory: Callable[[Any], Any] = lambda factory: factory) -> None:
        """``wrap_factory`` adds what sits below the handshake (connection limits, TLS)."""
        self._endpoint = endpoint
        self._policy = policy
        self._reactor = reactor
        self._wrap_factory = wrap_factory

    def listen(self, protocolFactory: Any) -> Any:
        """Listen with ``protocolFactory`` behind the handshake."""
        factory = _HandshakeFactory(protocolFactory, self._reactor)
        factory.protocol = _ServerHandshaking
        factory.policy = self._policy
        return self._endpoint.listen(self._wrap_factory(factory))


@implementer(IStreamClientEndpoint)
class AuthenticatedClientEndpoint:
    """How this broker dials voter ``peer_id``'s controller: proves ``node_id`` with ``method``."""

    def __init__(self, endpoint: IStreamClientEndpoint, *, reactor: IReactorTime, node_id: int, peer_id: int,
                 method: HandshakeMethod,
                 login: InterBrokerLogin | None = None, certificate_rules: BrokerCertificateRules | None = None) -> None:
        self._endpoint = endpoint
        self._reactor = reactor
        self.node_id = node_id
        self.peer_id = peer_id
        self._method = method
        self._login = login
        self._certificate_rules = certificate_rules

    def connect(self, protocolFactory: Any) -> Any:
        """Connect; the Deferred fires with the wrapped protocol (it sees the connection after the handshake)."""
        factory = _HandshakeFactory(protocolFactory, self._reactor)
        factory.protocol = _ClientHandshaking
        factory.peer_id = self.peer_id
        factory.make_handshake = lambda: ClientHandshake(
            node_id=self.node_id, peer_id=self.peer_id, method=self._method, random_bytes=os.urandom,
            login=self._login, certificate_rules=self._certificate_rules)
        connected = self._endpoint.connect(factory)
        return connected.addCallback(lambda protocol: protocol.wrappedProtocol)
