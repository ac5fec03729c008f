"""Broker identities and the controller handshake (pure), and the transport's sender checks."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from zope.interface import directlyProvides

from mqbroker.errors import BrokerError
from mqbroker.interfaces import IAuthenticatedPeer
from mqbroker.protocols.framing import frame
from mqbroker.raft.forwarded_proposals import ForwardedProposal, decode_frame, encode_frame
from mqbroker.raft.messages import Heartbeat
from mqbroker.raft.transport import _IncomingProtocol
from mqbroker.security.auth import CredentialStore
from mqbroker.security.inter_broker import (
    BrokerCertificateRules,
    ClientHandshake,
    HandshakeMethod,
    InterBrokerLogin,
    PeerAuthenticationError,
    PeerPolicy,
    ServerHandshake,
    broker_uri,
    inter_broker_credentials,
)
from mqbroker.security.scram import DEFAULT_ITERATIONS, DecoyCredentials, ScramMechanism

PASSWORD = "inter-broker-password-123"
CREDENTIALS = inter_broker_credentials("cluster", "broker", PASSWORD)


def _random_bytes(seed: int = 7):  # type: ignore[no-untyped-def]
    source = random.Random(seed)
    return lambda count: bytes(source.getrandbits(8) for _ in range(count))


def _policy(**overrides) -> PeerPolicy:  # type: ignore[no-untyped-def]
    settings = dict(voters=frozenset({2, 3}), require_authentication=True, certificate_rules=BrokerCertificateRules(),
                    scram_username="broker", scram_credentials=CREDENTIALS)
    settings.update(overrides)
    return PeerPolicy(**settings)


def _run(server: ServerHandshake, client: ClientHandshake) -> None:
    pending = [client.start()]
    while pending:
        replies = server.receive(pending.pop())
        for reply in replies:
            answer = client.receive(reply)
            if answer is not None:
                pending.append(answer)


def _cert(node_id: int | None, subject: str = "CN=x") -> tuple[str, tuple[str, ...]]:
    return subject, ((f"URI:{broker_uri(node_id)}",) if node_id is not None else ("DNS:localhost",))


def test_a_broker_certificate_names_its_node_and_a_user_certificate_names_none() -> None:
    rules = BrokerCertificateRules()
    assert rules.node_id(*_cert(3)) == 3
    assert rules.node_id(*_cert(None, "CN=alice")) is None
    assert rules.node_id("CN=x", ("URI:urn:mqbroker:broker:3x",)) is None


def test_the_inter_broker_scram_handshake_proves_the_node_both_ways() -> None:
    server = ServerHandshake(_policy(), None, _random_bytes())
    client = ClientHandshake(node_id=2, peer_id=1, method=HandshakeMethod.SCRAM, random_bytes=_random_bytes(1),
                             login=InterBrokerLogin(username="broker", password=PASSWORD))
    _run(server, client)
    assert server.node_id == 2 and client.complete


def test_a_wrong_inter_broker_password_is_refused() -> None:
    server = ServerHandshake(_policy(), None, _random_bytes())
    client = ClientHandshake(node_id=2, peer_id=1, method=HandshakeMethod.SCRAM, random_bytes=_random_bytes(1),
                             login=InterBrokerLogin(username="broker", password="wrong"))
    with pytest.raises(BrokerError, match="invalid credentials"):
        _run(server, client)
    assert server.node_id is None


@pytest.mark.parametrize(("node_id", "method", "identity", "message"), [
    (9, HandshakeMethod.SCRAM, None, "not a controller voter"),
    (2, HandshakeMethod.NONE, None, "did not authenticate"),
    (2, HandshakeMethod.CERTIFICATE, None, "the connection has none"),
    (2, HandshakeMethod.CERTIFICATE, _cert(None, "CN=alice"), "not a broker certificate"),
    (2, HandshakeMethod.CERTIFICATE, _cert(3), "names broker 3"),
])
def test_a_peer_that_does_not_prove_a_voter_identity_is_refused(node_id, method, identity, message) -> None:
    server = ServerHandshake(_policy(), identity, _random_bytes())
    client = ClientHandshake(node_id=node_id, peer_id=1, method=method, random_bytes=_random_bytes(1),
                             login=InterBrokerLogin(username="broker", password=PASSWORD))
    with pytest.raises(PeerAuthenticationError, match=message):
        server.receive(client.start())


def test_a_broker_certificate_naming_the_node_is_accepted_and_checked_back() -> None:
    server = ServerHandshake(_policy(), _cert(2), _random_bytes())
    client = ClientHandshake(node_id=2, peer_id=1, method=HandshakeMethod.CERTIFICATE, random_bytes=_random_bytes(1),
                             certificate_rules=BrokerCertificateRules(), tls_identity=_cert(1))
    _run(server, client)
    assert server.node_id == 2 and client.complete
    impostor = ClientHandshake(node_id=2, peer_id=1, method=HandshakeMethod.CERTIFICATE,
                               random_bytes=_random_bytes(1), certificate_rules=BrokerCertificateRules(),
                               tls_identity=_cert(None, "CN=alice"))
    with pytest.raises(PeerAuthenticationError, match="did not present node 1's broker certificate"):
        _run(ServerHandshake(_policy(), _cert(2), _random_bytes()), impostor)


def test_an_open_controller_accepts_a_voter_without_credentials() -> None:
    server = ServerHandshake(_policy(require_authentication=False, scram_credentials={}), None, _random_bytes())
    client = ClientHandshake(node_id=3, peer_id=1, method=HandshakeMethod.NONE, random_bytes=_random_bytes(1))
    _run(server, client)
    assert server.node_id == 3


@given(st.lists(st.binary(max_size=80), max_size=4))
def test_handshake_garbage_raises_only_typed_errors(bodies: list[bytes]) -> None:
    server = ServerHandshake(_policy(), _cert(2), _random_bytes())
    try:
        for body in bodies:
            server.receive(body)
    except BrokerError:
        pass


def test_decoys_are_stable_per_name_and_cost_what_a_real_user_costs() -> None:
    decoys = DecoyCredentials(b"s" * 32)
    first = decoys.credential("nobody", ScramMechanism.SHA_512)
    assert first == decoys.credential("nobody", ScramMechanism.SHA_512)
    assert first.salt != decoys.credential("somebody", ScramMechanism.SHA_512).salt
    assert first.iterations == DEFAULT_ITERATIONS
    store = CredentialStore(_random_bytes())
    store.add("alice", "pw")
    store.use_decoy_secret(b"t" * 32)
    assert store.decoys.iterations == store.lookup("alice", ScramMechanism.SHA_256).iterations
    assert not store.verify_password("nobody", "pw") and store.verify_password("alice", "pw")


def test_forwarded_proposals_carry_their_principal() -> None:
    proposal = ForwardedProposal(from_id=2, to_id=1, request_id=5, principal="Broker:2", data=b"record")
    assert decode_frame(encode_frame(proposal)) == proposal


def _incoming(voters: frozenset[int], authenticated_as: int | None):  # type: ignore[no-untyped-def]
    delivered: list[object] = []
    protocol = _IncomingProtocol(delivered.append, voters)
    wire = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 5000))
    if authenticated_as is not None:
        directlyProvides(wire, IAuthenticatedPeer)
        wire.peer_node_id = authenticated_as  # type: ignore[attr-defined]
    protocol.makeConnection(wire)
    return protocol, wire, delivered


@pytest.mark.parametrize(("voters", "authenticated_as", "from_id", "delivered_ok"), [
    (frozenset({2, 3}), 2, 2, True),
    (frozenset({2, 3}), 2, 3, False),  # speaking for another voter
    (frozenset({2, 3}), None, 9, False),  # not a voter
    (frozenset({2, 3}), None, 3, True),  # an open controller: voters only
])
def test_the_transport_delivers_only_frames_from_the_proven_voter(voters, authenticated_as, from_id, delivered_ok) -> None:
    protocol, wire, delivered = _incoming(voters, authenticated_as)
    protocol.dataReceived(frame(encode_frame(Heartbeat(term=1, from_id=from_id, to_id=1, commit_index=0))))
    assert bool(delivered) is delivered_ok
    assert wire.disconnecting is not delivered_ok
