"""Share-group calls at the group's host: admin and member calls answered locally or forwarded after NOT_COORDINATOR
and translated back, listings cluster-wide."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.defer import Deferred, fail, succeed

from mqbroker import errors
from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.forwarding import share_wire
from mqbroker.forwarding.share_routing import ShareGroupRouting
from mqbroker.groups.model import TopicPartition
from mqbroker.model import AcknowledgeType, BrokerEndpoint, ClusterMetadata, Principal
from mqbroker.protocols.native import share_messages as wire
from mqbroker.protocols.native.share_handlers import (
    handle_share_acknowledge,
    handle_share_fetch,
    handle_share_group_describe,
    handle_share_group_heartbeat,
)
from mqbroker.shares import messages as shares
from mqbroker.shares.partition_values import AcquiredRange, PartitionStats
from tests.fakes import fired

ALICE = Principal("User", "alice")


def _endpoint(node_id: int) -> BrokerEndpoint:
    return BrokerEndpoint(node_id=node_id, host="127.0.0.1", port=9000 + node_id)


class Local:
    """The local broker's share-group calls: it hosts the groups in ``hosted`` and authorizes alice only."""

    def __init__(self, hosted: dict[str, shares.ShareGroupDescription], host_of: dict[str, int]) -> None:
        self.hosted = hosted
        self.host_of = host_of
        self.created: list[str] = []
        #: What the member calls answer, by group id; the member requests received.
        self.answers: dict[str, Any] = {}
        self.fetched: list[Any] = []

    def _here(self, principal: Principal, group_id: str) -> None:
        if principal != ALICE:
            raise errors.GroupAuthorizationError(f"{principal} may not touch {group_id!r}")
        if group_id not in self.hosted and self.host_of.get(group_id, 1) != 1:
            raise errors.NotCoordinatorError(f"{group_id!r} is hosted elsewhere")

    def describe_share_group(self, principal: Principal, group_id: str) -> Deferred[Any]:
        self._here(principal, group_id)
        return succeed(self.hosted[group_id])

    def create_share_group(self, principal: Principal, group_id: str, topics: Any, configs: Any) -> Deferred[None]:
        self._here(principal, group_id)
        self.created.append(group_id)
        return succeed(None)

    def delete_share_group(self, principal: Principal, group_id: str) -> Deferred[None]:
        self._here(principal, group_id)
        return succeed(None)

    def alter_share_group(self, principal: Principal, group_id: str, *rest: Any) -> Deferred[None]:
        self._here(principal, group_id)
        return succeed(None)

    def share_group_heartbeat(self, principal: Principal, request: shares.ShareHeartbeatRequest) -> Deferred[Any]:
        self._here(principal, request.group_id)
        return succeed(self.answers[request.group_id])

    def share_fetch(self, principal: Principal, request: shares.ShareFetchRequest) -> Deferred[Any]:
        self._here(principal, request.group_id)
        self.fetched.append(request)
        return succeed(self.answers[request.group_id])

    def share_acknowledge(self, principal: Principal, request: shares.ShareAcknowledgeRequest) -> Deferred[Any]:
        self._here(principal, request.group_id)
        self.fetched.append(request)
        return succeed(self.answers[request.group_id])

    def find_share_coordinator(self, principal: Principal, group_id: str) -> Deferred[BrokerEndpoint]:
        return succeed(_endpoint(self.host_of[group_id]))

    def list_share_groups(self, principal: Principal) -> Deferred[list[shares.ShareGroupListing]]:
        return succeed([shares.ShareGroupListing(group_id=g, topics=("t",), members=0, push_endpoint="")
                        for g in self.hosted])

    def metadata(self, principal: Principal, topics: Any, allow_auto_create: bool) -> Deferred[ClusterMetadata]:
        return succeed(ClusterMetadata(cluster_id="c", controller_id=1, topics=(),
                                       brokers=tuple(_endpoint(n) for n in (1, 2, 3))))


class Peers:
    """Answers forwarded requests from ``answers[node_id]``; records what was sent where."""

    def __init__(self, answers: dict[int, Any]) -> None:
        self.answers = answers
        self.sent: list[tuple[int, Any]] = []
        self.waits: list[float] = []

    def request(self, node_id: int, request: object, wait_s: float) -> Deferred[Any]:
        self.sent.append((node_id, request))
        self.waits.append(wait_s)
        answer = self.answers[node_id]
        return fail(answer) if isinstance(answer, Exception) else succeed(answer)


class Authorizer:
    """Alice may describe every group but ``secret``."""

    def authorize(self, principal: Principal, operation: Any, resource_type: Any, resource_name: str) -> bool:
        return principal == ALICE and resource_name != "secret"


def _description(group_id: str) -> shares.ShareGroupDescription:
    stats = PartitionStats(start_offset=3, end_offset=9, available=2, acquired=4, dead_lettering=0, due=0,
                           delivery_counts={1: 3, 2: 1})
    return shares.ShareGroupDescription(
        group_id=group_id, topics=("jobs",), configs={"lease.ms": "1000"},
        members=(shares.ShareMemberDescription(member_id="m", client_id="c", client_host="h", topics=("jobs",),
                                               acquired=4),),
        partitions=(shares.SharePartitionDescription(topic="jobs", partition=0, stats=stats, scheduled=1, lag=6),),
        dead_lettered=2, dead_letter_depth=-1)


def _routing(local: Local, peers: Peers) -> ShareGroupRouting:
    return ShareGroupRouting(local=local, node_id=1, peers=peers, authorizer=Authorizer())


def _result(coroutine: Any) -> Any:
    return fired(Deferred.fromCoroutine(coroutine))


def test_a_group_hosted_here_is_answered_locally() -> None:
    peers = Peers({})
    routing = _routing(Local({"here": _description("here")}, {}), peers)
    assert _result(routing.describe(ALICE, "here")) == _description("here")
    assert peers.sent == []


def test_a_group_hosted_elsewhere_is_asked_of_its_host_and_translated_back() -> None:
    answer = _result(handle_share_group_describe(
        Local({"far": _description("far")}, {}), ALICE, wire.ShareGroupDescribeRequest(group_ids=("far",))))
    peers = Peers({3: answer, 2: wire.CreateShareGroupResponse()})
    local = Local({}, {"far": 3, "new": 2})
    routing = _routing(local, peers)
    assert _result(routing.describe(ALICE, "far")) == _description("far")
    _result(routing.create(ALICE, "new", ["jobs"], {"lease.ms": "5"}))
    assert peers.sent == [(3, wire.ShareGroupDescribeRequest(group_ids=("far",))),
                          (2, wire.CreateShareGroupRequest(group_id="new", topics=("jobs",), configs={"lease.ms": "5"}))]


def test_the_caller_is_authorized_here_before_anything_is_forwarded() -> None:
    peers = Peers({3: wire.DeleteShareGroupResponse()})
    routing = _routing(Local({}, {"far": 3}), peers)
    with pytest.raises(errors.GroupAuthorizationError):
        _result(routing.delete(Principal("User", "mallory"), "far"))
    assert peers.sent == []


def test_the_hosts_refusal_arrives_as_its_typed_error() -> None:
    peers = Peers({2: wire.ShareGroupDescribeResponse(groups=(wire.DescribedShareGroup(
        group_id="gone", error_code=int(errors.ErrorCode.GROUP_ID_NOT_FOUND), error_message="no group 'gone'"),))})
    with pytest.raises(errors.GroupIdNotFoundError, match="no group 'gone'"):
        _result(_routing(Local({}, {"gone": 2}), peers).describe(ALICE, "gone"))


def test_a_group_that_moved_here_meanwhile_is_a_retriable_not_coordinator() -> None:
    local = Local({}, {"moving": 2})
    routing = _routing(local, Peers({}))
    local.find_share_coordinator = lambda principal, group_id: succeed(_endpoint(1))  # type: ignore[method-assign]
    with pytest.raises(errors.NotCoordinatorError):
        _result(routing.alter(ALICE, "moving", None, {}, []))


def test_the_listing_asks_every_broker_keeps_what_the_caller_may_see_and_skips_the_unreachable() -> None:
    listed = wire.ListShareGroupsResponse(groups=(
        wire.ListedShareGroup(group_id="hook", topics=("t",), members=0, push_endpoint="http://h/"),
        wire.ListedShareGroup(group_id="secret", topics=("t",), members=1)))
    peers = Peers({2: listed, 3: BrokerUnavailableError("broker 3 is down")})
    routing = _routing(Local({"here": _description("here")}, {}), peers)
    found = _result(routing.list(ALICE))
    assert [(g.group_id, g.push_endpoint) for g in found] == [("here", ""), ("hook", "http://h/")]
    assert [node for node, _ in peers.sent] == [2, 3]


_COUNTS = st.integers(0, 2**31 - 1)


@given(st.builds(
    shares.ShareGroupDescription, group_id=st.text(min_size=1), topics=st.lists(st.text()).map(tuple),
    configs=st.dictionaries(st.text(), st.text()),
    members=st.lists(st.builds(shares.ShareMemberDescription, member_id=st.text(), client_id=st.text(),
                               client_host=st.text(), topics=st.lists(st.text()).map(tuple),
                               acquired=_COUNTS)).map(tuple),
    partitions=st.lists(st.builds(
        shares.SharePartitionDescription, topic=st.text(), partition=_COUNTS, scheduled=_COUNTS, lag=_COUNTS,
        stats=st.builds(PartitionStats, start_offset=_COUNTS, end_offset=_COUNTS, available=_COUNTS,
                        acquired=_COUNTS, dead_lettering=_COUNTS, due=_COUNTS,
                        delivery_counts=st.dictionaries(st.integers(1, 2**15 - 1), _COUNTS)))).map(tuple),
    dead_lettered=_COUNTS, dead_letter_depth=st.integers(-1, 2**40)))
def test_a_description_survives_the_native_wire_and_back(group: shares.ShareGroupDescription) -> None:
    response = _result(handle_share_group_describe(
        Local({group.group_id: group}, {}), ALICE, wire.ShareGroupDescribeRequest(group_ids=(group.group_id,))))
    assert share_wire.description(response, group.group_id) == group


# -- a member's calls (AMQP share queues consumed through any broker) -------------------------------


def _at_host(host_answers: dict[str, Any], call: Any, request: Any) -> tuple[Any, Local]:
    """The native answer of a host whose broker answers ``host_answers``, and that broker (what it received)."""
    host = Local({}, {})
    host.answers = host_answers
    return _result(call(host, ALICE, request)), host


_FETCHED = shares.ShareFetchResponse(
    partitions=(shares.SharePartitionRecords(topic="jobs", partition=1, records=b"batch bytes",
                                             acquired=(AcquiredRange(4, 6, 1), AcquiredRange(9, 9, 3))),
                shares.SharePartitionRecords(topic="jobs", partition=2, records=b"", acquired=(),
                                             error=errors.NotLeaderError("jobs-2 moved"))),
    acknowledgements=(shares.AcknowledgeResult(topic="jobs", partition=1, first_offset=0, last_offset=3),
                      shares.AcknowledgeResult(topic="jobs", partition=1, first_offset=7, last_offset=7,
                                               error=errors.InvalidRecordStateError("lease expired"))))


def test_a_members_fetch_goes_to_the_groups_host_and_its_records_come_back_unchanged() -> None:
    request = shares.ShareFetchRequest(
        group_id="far", member_id="m-1", partitions=(TopicPartition("jobs", 1), TopicPartition("jobs", 2)),
        records_max=7, bytes_max=1000, wait_ms_max=800, lease_ms=5000,
        acknowledgements=(shares.Acknowledgement(topic="jobs", partition=1, first_offset=0, last_offset=3,
                                                 kind=AcknowledgeType.ACCEPT),
                          shares.Acknowledgement(topic="jobs", partition=1, first_offset=7, last_offset=7,
                                                 kind=AcknowledgeType.REJECT, error="poison")))
    forwarded = share_wire.fetch_request(request)
    answer, host = _at_host({"far": _FETCHED}, handle_share_fetch, forwarded)
    peers = Peers({3: answer})
    routing = _routing(Local({}, {"far": 3}), peers)
    fetched = _result(routing.fetch(ALICE, request))
    assert host.fetched == [request], "the host's broker got the member's request as it was sent"
    assert [type(error) for error in (fetched.partitions[1].error, fetched.acknowledgements[1].error)] == [
        errors.NotLeaderError, errors.InvalidRecordStateError]
    assert _without_errors(fetched) == _without_errors(_FETCHED)
    assert peers.sent == [(3, forwarded)]
    assert peers.waits[0] >= 0.8, "the forwarded long poll may wait at the host"


def _without_errors(response: shares.ShareFetchResponse) -> Any:
    return ([(p.topic, p.partition, p.records, p.acquired, str(p.error)) for p in response.partitions],
            [(a.topic, a.partition, a.first_offset, a.last_offset, str(a.error)) for a in response.acknowledgements])


def test_a_members_heartbeat_and_acknowledgement_go_to_the_groups_host() -> None:
    joined = shares.ShareHeartbeatResponse(member_id="m-1", member_epoch=3, heartbeat_interval_ms=500,
                                           assignment=(TopicPartition("jobs", 0), TopicPartition("jobs", 2)))
    heartbeat = shares.ShareHeartbeatRequest(group_id="far", member_id="m-1", member_epoch=2, topics=("jobs",))
    beat_answer, host = _at_host({"far": joined}, handle_share_group_heartbeat, share_wire.heartbeat_request(heartbeat))
    settled = (shares.AcknowledgeResult(topic="jobs", partition=0, first_offset=5, last_offset=8),)
    acknowledge = shares.ShareAcknowledgeRequest(group_id="far", member_id="m-1", lease_ms=9000, acknowledgements=(
        shares.Acknowledgement(topic="jobs", partition=0, first_offset=5, last_offset=8, kind=AcknowledgeType.RENEW),))
    ack_answer, acknowledging_host = _at_host({"far": settled}, handle_share_acknowledge,
                                              share_wire.acknowledge_request(acknowledge))
    peers = Peers({3: beat_answer})
    routing = _routing(Local({}, {"far": 3}), peers)
    assert _result(routing.heartbeat(ALICE, heartbeat)) == joined
    peers.answers[3] = ack_answer
    assert _result(routing.acknowledge(ALICE, acknowledge)) == settled
    assert acknowledging_host.fetched == [acknowledge]


def test_a_member_of_a_group_hosted_here_is_served_locally_and_a_stranger_is_refused_before_forwarding() -> None:
    local = Local({}, {"far": 3})
    local.answers = {"here": _FETCHED, "far": _FETCHED}
    peers = Peers({})
    routing = _routing(local, peers)
    assert _result(routing.fetch(ALICE, shares.ShareFetchRequest(group_id="here", member_id="m"))) is _FETCHED
    with pytest.raises(errors.GroupAuthorizationError):
        _result(routing.fetch(Principal("User", "mallory"), shares.ShareFetchRequest(group_id="far", member_id="m")))
    assert peers.sent == []


_ACKNOWLEDGEMENTS = st.lists(st.builds(
    shares.Acknowledgement, topic=st.text(min_size=1), partition=_COUNTS, first_offset=st.integers(0, 2**62),
    last_offset=st.integers(0, 2**62), kind=st.sampled_from(AcknowledgeType), error=st.text())).map(tuple)


@given(st.builds(shares.ShareFetchRequest, group_id=st.text(min_size=1), member_id=st.text(),
                 records_max=_COUNTS, bytes_max=_COUNTS, wait_ms_max=_COUNTS, lease_ms=st.integers(-1, 2**31 - 1),
                 acknowledgements=_ACKNOWLEDGEMENTS))
def test_a_fetch_request_survives_the_native_wire_and_back(request: shares.ShareFetchRequest) -> None:
    host = Local({}, {})
    host.answers = {request.group_id: shares.ShareFetchResponse(partitions=())}
    _result(handle_share_fetch(host, ALICE, share_wire.fetch_request(request)))
    assert host.fetched == [request]
