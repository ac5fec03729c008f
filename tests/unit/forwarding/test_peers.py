"""Peer connections in-process: forwarded native requests to another broker over in-memory connections."""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from mqbroker import errors, limits
from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.cluster.metadata_records import CreateTopic
from mqbroker.forwarding import wire
from mqbroker.forwarding.peers import PeerConnections
from mqbroker.model import Acks, FetchPosition, FetchRequest
from tests.fakes import (
    BrokerRig,
    FakeClusterView,
    MemoryEndpoint,
    build_broker,
    fired,
    native_server,
)
from tests.unit.storage.logtools import make_batch

BATCH = make_batch([b"a", b"b"])


class Peers:
    """Broker 1's peer connections to broker 2 (a whole broker behind an in-memory native listener)."""

    def __init__(self, tmp_path: Path) -> None:
        self.clock = Clock()
        cluster = FakeClusterView(broker_ids=(1, 2))
        self.remote: BrokerRig = build_broker(tmp_path, cluster, node_id=2, clock=self.clock,
                                              settings={"log.flush.policy": "interval"})
        cluster.apply(CreateTopic(name="t", assignment=(2,), replicas=((2,),)))
        self.endpoint = MemoryEndpoint(native_server(self.remote.broker, self.remote.config, self.clock), self.clock)
        self.peers = PeerConnections(reactor=self.clock, client_id="broker-1-frontends",
                                     address_of=lambda node_id: ("127.0.0.1", 9395) if node_id == 2 else None,
                                     endpoint_for=lambda host, port: self.endpoint)

    def produce(self) -> object:
        return self.peers.request(2, wire.produce_request("t", 0, BATCH, Acks.LEADER, 1_000), 1.0)

    def long_poll(self) -> object:
        position = FetchPosition(topic="t", partition=0, offset=0, max_bytes=1 << 20)
        return self.peers.request(2, wire.fetch_request(FetchRequest(positions=(position,), wait_ms_max=5_000)), 5.0)


def test_a_forwarded_produce_is_answered_by_the_peer_after_versions_are_agreed(tmp_path: Path) -> None:
    peers = Peers(tmp_path)
    answered = peers.produce()
    peers.endpoint.flush()
    assert wire.produce_result(fired(answered), "t", 0, BATCH).last_offset == 1
    assert peers.remote.log("t").log_end_offset == 2
    second = peers.produce()
    peers.endpoint.flush()
    assert wire.produce_result(fired(second), "t", 0, BATCH).base_offset == 2
    assert len(peers.endpoint.pumps) == 1  # one pooled connection


def test_a_broker_missing_from_the_metadata_is_unavailable(tmp_path: Path) -> None:
    peers = Peers(tmp_path)
    with pytest.raises(BrokerUnavailableError, match="not registered"):
        fired(peers.peers.request(3, wire.produce_request("t", 0, BATCH, Acks.LEADER, 1_000), 1.0))


def test_a_peer_that_does_not_answer_in_time_is_dropped_with_a_timeout(tmp_path: Path) -> None:
    peers = Peers(tmp_path)
    first = peers.produce()
    peers.endpoint.flush()
    fired(first)  # connected, versions agreed
    answered = peers.produce()  # written, never delivered
    peers.clock.advance(1.0 + limits.peer_request_slack_s + 0.1)
    with pytest.raises(errors.RequestTimedOutError, match="did not answer a forwarded request"):
        fired(answered)
    assert peers.endpoint.pumps[0].client.transport.disconnecting


def test_long_polls_leave_slots_free_for_produces(tmp_path: Path) -> None:
    peers = Peers(tmp_path)
    answers: list[object] = []
    for _ in range(limits.native_inflight_requests_max + 5):  # more long polls than the connection has slots
        peers.long_poll().addBoth(answers.append)
    peers.endpoint.flush()
    assert answers == []
    produced = peers.produce()
    peers.endpoint.flush()
    assert wire.produce_result(fired(produced), "t", 0, BATCH).last_offset == 1  # not queued behind the polls
    peers.endpoint.flush()
    assert len(answers) == limits.native_inflight_requests_max + 5  # the batch answered the polls, then the rest
    assert not [answer for answer in answers if isinstance(answer, Failure)]


def test_a_peer_that_accepts_but_never_finishes_the_handshake_is_dropped_and_the_request_fails(tmp_path: Path) -> None:
    peers = Peers(tmp_path)
    answered = peers.produce()  # connected; the version negotiation is written but never delivered
    peers.clock.advance(limits.peer_handshake_timeout_s + 0.1)
    with pytest.raises(BrokerUnavailableError, match="no handshake answer"):
        fired(answered)
    assert peers.endpoint.pumps[0].client.transport.disconnecting
    peers.endpoint.flush()  # the connection is gone
    peers.clock.advance(2.0)  # dialled again (backoff) and, this time, answered
    retried = peers.produce()
    peers.endpoint.flush()
    assert wire.produce_result(fired(retried), "t", 0, BATCH).last_offset == 1
