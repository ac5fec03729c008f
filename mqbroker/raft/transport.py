"""Controller connections between Raft nodes (Twisted): one outgoing connection per peer.

Each node dials every peer on its controller port (9395 by default) and writes its frames
there; it reads the frames peers send on the connections it accepts. Outgoing connections
reconnect with exponential backoff (``ClientService``). Frames are length-prefixed
(``mqbroker.protocols.framing``) encodings of ``mqbroker.raft.forwarded_proposals.encode_frame``.
Sending never blocks: a frame for a peer that is not connected, or whose socket buffer is
full, is dropped — Raft retries on its own. Endpoints are injected, so TLS is a matter of
passing TLS endpoints (``wrapClientTLS`` / ``SSL4ServerEndpoint``).

Whom it trusts: a frame is delivered only if its sender (``from_id``) is one of the configured
voters (the peers this node dials); on a connection whose transport provides
``IAuthenticatedPeer`` (the broker handshake of ``mqbroker.security.peer_handshake``, which
the service always puts in front), only if the sender is the node the peer proved it is. A
frame that breaks either rule closes the connection and goes to the audit log: it is forged.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

from twisted.application.internet import ClientService, StreamServerEndpointService
from twisted.application.service import MultiService
from twisted.internet.interfaces import IPushProducer, IReactorTime, IStreamClientEndpoint, IStreamServerEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from mqbroker import limits
from mqbroker.client.backoff import PEER_RECONNECT
from mqbroker.interfaces import IAuthenticatedPeer
from mqbroker.protocols.framing import FrameTooLarge, LengthPrefixedFrames, frame
from mqbroker.raft.errors import RaftCodecError
from mqbroker.raft.forwarded_proposals import PeerFrame, decode_frame, encode_frame

audit = Logger(namespace="mqbroker.audit")


@implementer(IPushProducer)
class _OutgoingProtocol(Protocol):
    """Writes frames to one peer; pauses (drops) while the peer's socket buffer is full."""

    def __init__(self, peer_id: int, connections: dict[int, _OutgoingProtocol]) -> None:
        self.paused = False
        self._peer_id = peer_id
        self._connections = connections

    def connectionMade(self) -> None:
        self.transport.registerProducer(self, True)
        self._connections[self._peer_id] = self

    def connectionLost(self, reason: Failure = None) -> None:
        if self._connections.get(self._peer_id) is self:
            del self._connections[self._peer_id]

    def dataReceived(self, data: bytes) -> None:
        """Peers never write on a connection they accepted; ignore stray bytes."""

    def send(self, body: bytes) -> bool:
        """Write one frame; False if it was dropped because the buffer is full."""
        if self.paused:
            return False
        self.transport.write(frame(body))
        return True

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False

    def stopProducing(self) -> None:
        self.paused = True


class _IncomingProtocol(Protocol):
    """Reads frames a peer sends; garbage or a forged sender closes the connection (the peer reconnects)."""

    log = Logger()

    def __init__(self, deliver: Callable[[PeerFrame], None], voters: frozenset[int] | None = None) -> None:
        """``voters``: the node ids frames may come from (None: any, for tests of the framing alone)."""
        self._frames = LengthPrefixedFrames(limits.controller_frame_bytes_max)
        self._deliver = deliver
        self._voters = voters

    def dataReceived(self, data: bytes) -> None:
        try:
            bodies = self._frames.feed(data)
            decoded = [decode_frame(body) for body in bodies]
        except (FrameTooLarge, RaftCodecError) as error:
            self.log.warn("closing controller connection from {peer}: {error}", peer=self.transport.getPeer(), error=error)
            self.transport.loseConnection()
            return
        for item in decoded:
            refusal = self._refusal(item.from_id)
            if refusal is not None:
                peer = self.transport.getPeer()
                audit.warn("FORGED CONTROLLER FRAME host={host}: {reason}; connection closed",
                           host=getattr(peer, "host", "-"), reason=refusal)
                self.transport.loseConnection()
                return
            self._deliver(item)

    def _refusal(self, from_id: int) -> str | None:
        """Why a frame from ``from_id`` may not be delivered on this connection (None: it may)."""
        if self._voters is not None and from_id not in self._voters:
            return f"a frame from node {from_id}, which is not a voter ({sorted(self._voters)})"
        authenticated = IAuthenticatedPeer(self.transport, None)
        if authenticated is not None and authenticated.peer_node_id != from_id:
            return f"a frame from node {from_id} on a connection authenticated as node {authenticated.peer_node_id}"
        return None


class RaftTransport(MultiService):
    """Listens for peers and keeps a reconnecting connection to each; ``send`` routes by ``to_id``."""

    log = Logger()

    def __init__(
        self,
        *,
        node_id: int,
        server_endpoint: IStreamServerEndpoint | None,
        peer_endpoints: Mapping[int, IStreamClientEndpoint],
        deliver: Callable[[PeerFrame], None],
        clock: IReactorTime | None = None,
    ) -> None:
        """``deliver`` receives every frame addressed to ``node_id``; ``clock`` drives reconnect delays."""
        super().__init__()
        self.node_id = node_id
        self.dropped_frames = 0
        self._deliver = deliver
        self._connected: dict[int, _OutgoingProtocol] = {}
        if server_endpoint is not None:
            voters = frozenset(peer_endpoints)
            factory = Factory.forProtocol(lambda: _IncomingProtocol(self._deliver_own, voters))
            listener = StreamServerEndpointService(server_endpoint, factory)
            listener._raiseSynchronously = True  # a controller port in use must stop start-up
            listener.setServiceParent(self)
        for peer_id, endpoint in sorted(peer_endpoints.items()):
            assert peer_id != node_id, "a node does not dial itself"
            factory = Factory.forProtocol(lambda peer_id=peer_id: _OutgoingProtocol(peer_id, self._connected))
            service = ClientService(
                endpoint,
                factory,
                retryPolicy=PEER_RECONNECT.retry_policy(random.Random()),
                clock=clock,
            )
            service.setServiceParent(self)

    def connected_peers(self) -> list[int]:
        """The peers with an open outgoing connection."""
        return sorted(self._connected)

    def send(self, item: PeerFrame) -> bool:
        """Send ``item`` to ``item.to_id`` if connected; False if it was dropped."""
        protocol = self._connected.get(item.to_id)
        if protocol is None or not protocol.send(encode_frame(item)):
            self.dropped_frames += 1
            return False
        return True

    def _deliver_own(self, item: PeerFrame) -> None:
        if item.to_id != self.node_id:
            self.log.warn("dropping a controller frame for node {to} (this is node {node})", to=item.to_id, node=self.node_id)
            return
        self._deliver(item)
