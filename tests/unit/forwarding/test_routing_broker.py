"""The routing broker: what it serves locally, what it forwards to a partition's leader, and how."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from zope.interface.verify import verifyObject

from mqbroker import errors
from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.forwarding.routing_broker import RoutingBroker
from mqbroker.interfaces import IBroker
from mqbroker.model import (
    Acks,
    FetchPosition,
    FetchRequest,
    FetchResult,
    Principal,
)
from mqbroker.protocols.native import messages as m
from mqbroker.records.builder import BatchBuilder
from tests.fake_broker import FakeBroker

ALICE = Principal("User", "alice")
MALLORY = Principal("User", "mallory")


class Peers:
    """Answers forwarded requests with ``answer(node_id, request)``; records them."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, Any]] = []
        self.answers: list[Any] = []

    def request(self, node_id: int, request: object, wait_s: float) -> Deferred[Any]:
        self.sent.append((node_id, request))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            return fail(answer)
        return answer if isinstance(answer, Deferred) else succeed(answer)


class Authorizer:
    def authorize(self, principal: Principal, operation: Any, resource_type: Any, resource_name: str) -> bool:
        return principal != MALLORY


def _batch() -> bytes:
    builder = BatchBuilder()
    builder.append(1_000, b"k", b"v", [])
    builder.append(1_000, b"k", b"w", [])
    return builder.build()


def _produced(base_offset: int, topic: str = "t", partition: int = 0, code: int = 0) -> m.ProduceResponse:
    return m.ProduceResponse(topics=(m.ProduceTopicResult(name=topic, partitions=(
        m.ProducePartitionResult(partition_index=partition, base_offset=base_offset, error_code=code),)),))


@pytest.fixture
def leaders() -> dict[tuple[str, int], int]:
    return {("t", 0): 1, ("t", 1): 2, ("t", 2): 3}


@pytest.fixture
def world(leaders: dict[tuple[str, int], int]) -> tuple[RoutingBroker, FakeBroker, Peers, Clock]:
    local, peers, clock = FakeBroker(authorizer=Authorizer()), Peers(), Clock()
    local.add_topic("t", 3)
    routing = RoutingBroker(local=local, node_id=1, leader_of=lambda topic, partition: leaders.get((topic, partition)),
                            peers=peers, authorizer=Authorizer(), clock=clock)
    return routing, local, peers, clock


def _result(deferred: Deferred[Any]) -> Any:
    outcome: list[Any] = []
    deferred.addBoth(outcome.append)
    assert outcome, "the Deferred has not fired"
    if hasattr(outcome[0], "raiseException"):
        outcome[0].raiseException()
    return outcome[0]


def test_the_routing_broker_provides_the_broker_interface(world: Any) -> None:
    routing, *_ = world
    assert verifyObject(IBroker, routing)


def test_a_locally_led_partition_and_admin_calls_go_to_the_local_broker_untouched(world: Any) -> None:
    routing, local, peers, _ = world
    assert _result(routing.produce(ALICE, "t", 0, _batch(), Acks.ALL, 1000)).last_offset == 1
    answer = object()
    local.script("metadata", answer)
    assert _result(routing.metadata(ALICE, None, False)) is answer
    assert [call[0] for call in local.calls] == ["produce", "metadata"]
    assert peers.sent == []


def test_a_produce_to_a_partition_led_elsewhere_is_forwarded_with_the_same_acks(world: Any) -> None:
    routing, local, peers, _ = world
    peers.answers.append(_produced(40, partition=1))
    result = _result(routing.produce(ALICE, "t", 1, _batch(), Acks.ALL, 1000))
    assert (result.base_offset, result.last_offset) == (40, 41)
    ((node_id, request),) = peers.sent
    assert node_id == 2 and request.acks == -1 and request.topics[0].partitions[0].partition_index == 1
    assert local.calls == []


def test_a_refused_principal_is_never_forwarded_and_gets_the_local_refusal(world: Any) -> None:
    routing, local, peers, _ = world
    with pytest.raises(errors.TopicAuthorizationError):
        _result(routing.produce(MALLORY, "t", 1, _batch(), Acks.ALL, 1000))
    assert peers.sent == [] and local.calls[0][0] == "produce"


def test_a_produce_meeting_a_moved_leader_is_routed_again_from_the_image(world: Any, leaders: dict) -> None:
    routing, local, peers, clock = world
    peers.answers += [_produced(-1, partition=1, code=errors.ErrorCode.NOT_LEADER_OR_FOLLOWER),
                      BrokerUnavailableError("connection refused")]
    produced = routing.produce(ALICE, "t", 1, _batch(), Acks.LEADER, 1000)
    assert not produced.called
    clock.advance(0.05)
    assert not produced.called and len(peers.sent) == 2
    leaders[("t", 1)] = 1  # this broker took the partition over
    clock.advance(0.05)
    assert _result(produced).base_offset == 0 and local.calls_of("produce")


def test_a_local_call_meeting_not_leader_is_routed_again_once_the_image_names_the_leader(
    world: Any, leaders: dict
) -> None:
    """Right after a leader change the image can name this broker a moment too early (or too long)."""
    routing, local, peers, clock = world
    local.script("list_offset", errors.NotLeaderError("t-0 is led by broker 2, not broker 1"))
    found = routing.list_offset(ALICE, "t", 0, -1)
    assert not found.called and [call[0] for call in local.calls] == ["list_offset"]
    leaders[("t", 0)] = 2  # the image catches up
    peers.answers.append(m.ListOffsetsResponse(topics=(m.ListOffsetsTopicResult(name="t", partitions=(
        m.ListOffsetsPartitionResult(partition_index=0, offset=7),)),)))
    clock.advance(0.05)
    assert _result(found).offset == 7
    assert [node_id for node_id, _ in peers.sent] == [2]


def test_rerouting_gives_up_with_the_last_error_at_the_deadline(world: Any) -> None:
    routing, _, peers, clock = world
    peers.answers += [errors.NotLeaderError("moved")] * 10
    produced = routing.produce(ALICE, "t", 1, _batch(), Acks.ALL, 200)
    clock.pump([0.05] * 10)
    with pytest.raises(errors.NotLeaderError):
        _result(produced)
    assert len(peers.sent) == 4


def test_a_fetch_spanning_leaders_is_split_and_merged_in_request_order(world: Any) -> None:
    routing, local, peers, _ = world
    positions = [FetchPosition(topic="t", partition=p, offset=5, max_bytes=100) for p in (2, 0, 1)]
    peers.answers += [
        m.FetchResponse(topics=(m.FetchTopicResult(name="t", partitions=(
            m.FetchPartitionResult(partition_index=2, records=b"from-3"),)),)),
        m.FetchResponse(topics=(m.FetchTopicResult(name="t", partitions=(
            m.FetchPartitionResult(partition_index=1, records=b"from-2"),)),)),
    ]
    local.script("fetch", [FetchResult(topic="t", partition=0, records=b"local")])
    results = _result(routing.fetch(ALICE, FetchRequest(positions=tuple(positions), response_bytes_max=1000)))
    assert [r.records for r in results] == [b"from-3", b"local", b"from-2"]
    assert sorted(node for node, _ in peers.sent) == [2, 3]
    assert [p.partition for p in local.calls[0][2].positions] == [0]


def test_a_split_fetch_answers_as_soon_as_one_leader_brings_data(world: Any) -> None:
    routing, local, peers, _ = world
    waiting_remote: Deferred[Any] = Deferred()
    peers.answers.append(waiting_remote)
    positions = [FetchPosition(topic="t", partition=p, offset=0, max_bytes=100) for p in (0, 1)]
    local.script("fetch", [FetchResult(topic="t", partition=0, records=b"local")])
    results = _result(routing.fetch(ALICE, FetchRequest(positions=tuple(positions), wait_ms_max=500,
                                                        response_bytes_max=1000)))
    assert [r.records for r in results] == [b"local", b""]
    waiting_remote.callback(m.FetchResponse(topics=()))  # a late answer is dropped quietly


def test_an_unreachable_leader_becomes_an_error_in_its_positions_only(world: Any) -> None:
    routing, local, peers, _ = world
    local.script("fetch", [FetchResult(topic="t", partition=0)])
    peers.answers.append(BrokerUnavailableError("connection refused"))
    positions = [FetchPosition(topic="t", partition=p, offset=0, max_bytes=100) for p in (0, 1)]
    results = _result(routing.fetch(ALICE, FetchRequest(positions=tuple(positions), wait_ms_max=500,
                                                        response_bytes_max=1000)))
    assert results[0].error is None and isinstance(results[1].error, BrokerUnavailableError)


def test_wait_for_records_watches_a_local_partition_and_answers_false_at_once_for_one_led_elsewhere(
        world: Any) -> None:
    routing, local, peers, _ = world
    local.script("wait_for_records", True)
    assert _result(routing.wait_for_records(ALICE, "t", 0, lambda: 0, 500)) is True
    assert _result(routing.wait_for_records(ALICE, "t", 2, lambda: 0, 500)) is False  # the caller long-polls fetch
    assert [call[2:] for call in local.calls] == [("t", 0)] and peers.sent == []


def test_a_list_offset_of_a_partition_led_elsewhere_asks_the_leader(world: Any) -> None:
    routing, local, peers, _ = world
    peers.answers.append(m.ListOffsetsResponse(topics=(m.ListOffsetsTopicResult(name="t", partitions=(
        m.ListOffsetsPartitionResult(partition_index=2, offset=77),)),)))
    assert _result(routing.list_offset(ALICE, "t", 2, -1)).offset == 77
    assert peers.sent[0][0] == 3 and local.calls == []


def test_an_unknown_or_leaderless_partition_is_answered_by_the_local_broker(world: Any, leaders: dict) -> None:
    routing, local, peers, _ = world
    leaders[("t", 1)] = -1
    _result(routing.list_offset(ALICE, "t", 1, -1))
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        _result(routing.list_offset(ALICE, "unknown", 0, -1))
    assert len(local.calls) == 2 and peers.sent == []
