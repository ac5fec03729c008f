"""The controller transport over StringTransport and MemoryReactor: framing, routing, drops, garbage."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.address import IPv4Address
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint
from twisted.internet.testing import MemoryReactorClock, StringTransport

from mqbroker.protocols.framing import frame
from mqbroker.raft.errors import RaftCodecError
from mqbroker.raft.forwarded_proposals import ForwardedProposal, ForwardedResult, PeerFrame, decode_frame, encode_frame
from mqbroker.raft.messages import Heartbeat, VoteRequest
from mqbroker.raft.transport import RaftTransport, _IncomingProtocol, _OutgoingProtocol

HEARTBEAT = Heartbeat(term=3, from_id=2, to_id=1, commit_index=7)


def _transport(reactor: MemoryReactorClock, delivered: list[PeerFrame]) -> RaftTransport:
    return RaftTransport(
        node_id=1,
        server_endpoint=TCP4ServerEndpoint(reactor, 9395),
        peer_endpoints={2: TCP4ClientEndpoint(reactor, "127.0.0.1", 9396), 3: TCP4ClientEndpoint(reactor, "127.0.0.1", 9397)},
        deliver=delivered.append,
        clock=reactor,
    )


def test_transport_listens_and_dials_every_peer() -> None:
    reactor = MemoryReactorClock()
    transport = _transport(reactor, [])
    transport.startService()
    assert [server[0] for server in reactor.tcpServers] == [9395]
    assert sorted(client[1] for client in reactor.tcpClients) == [9396, 9397]
    transport.stopService()


def test_a_frame_for_an_unconnected_peer_is_dropped() -> None:
    transport = _transport(MemoryReactorClock(), [])
    assert transport.send(HEARTBEAT.__class__(term=1, from_id=1, to_id=2, commit_index=0)) is False
    assert transport.dropped_frames == 1


def test_a_connected_peer_gets_length_prefixed_frames() -> None:
    connections: dict[int, _OutgoingProtocol] = {}
    protocol = _OutgoingProtocol(2, connections)
    wire = StringTransport()
    protocol.makeConnection(wire)
    assert connections == {2: protocol}
    vote = VoteRequest(term=2, from_id=1, to_id=2, last_log_index=4, last_log_term=1)
    assert protocol.send(encode_frame(vote))
    assert wire.value() == frame(encode_frame(vote))
    protocol.connectionLost(None)
    assert connections == {}


def test_a_paused_connection_drops_instead_of_buffering() -> None:
    protocol = _OutgoingProtocol(2, {})
    wire = StringTransport()
    protocol.makeConnection(wire)
    protocol.pauseProducing()
    assert not protocol.send(b"x")
    protocol.resumeProducing()
    assert protocol.send(b"x")


def test_incoming_frames_are_delivered_even_when_split() -> None:
    delivered: list[PeerFrame] = []
    protocol = _IncomingProtocol(delivered.append)
    protocol.makeConnection(StringTransport())
    data = frame(encode_frame(HEARTBEAT)) + frame(encode_frame(ForwardedProposal(from_id=2, to_id=1, request_id=9, data=b"d")))
    for byte in range(len(data)):
        protocol.dataReceived(data[byte : byte + 1])
    assert delivered == [HEARTBEAT, ForwardedProposal(from_id=2, to_id=1, request_id=9, data=b"d")]


def test_garbage_closes_the_incoming_connection() -> None:
    delivered: list[PeerFrame] = []
    protocol = _IncomingProtocol(delivered.append)
    wire = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 5000))
    protocol.makeConnection(wire)
    protocol.dataReceived(frame(b"\xff garbage"))
    assert wire.disconnecting and delivered == []


def test_frames_for_another_node_are_not_delivered() -> None:
    delivered: list[PeerFrame] = []
    transport = _transport(MemoryReactorClock(), delivered)
    transport._deliver_own(Heartbeat(term=1, from_id=2, to_id=3, commit_index=0))
    transport._deliver_own(HEARTBEAT)
    assert delivered == [HEARTBEAT]


def test_forwarding_frames_round_trip() -> None:
    result = ForwardedResult(from_id=1, to_id=2, request_id=5, error_code=6, leader_id=3, data=b"not leader")
    assert decode_frame(encode_frame(result)) == result


@settings(max_examples=200)
@given(st.binary(max_size=64))
def test_garbage_frames_raise_only_the_codec_error(data: bytes) -> None:
    try:
        decode_frame(data)
    except RaftCodecError:
        pass
