"""The Twisted consumer's group membership driver on a fake clock and a scripted coordinator."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.client.group_member import GroupMember, GroupSettings
from mqbroker.client.twisted.group import COMMITS, MEMBERSHIP, TwistedGroupMembership
from mqbroker.errors import BrokerError, NotCoordinatorError, RebalanceInProgressError
from mqbroker.protocols.native import consumer_protocol
from mqbroker.protocols.native import messages as m

HEARTBEAT_S = 0.25  # and fake-clock steps of 0.125 s: exact in binary, so no float drift


def _assignment(*partitions: int) -> m.SyncGroupResponse:
    assignment = consumer_protocol.ConsumerAssignment(
        assigned_partitions=(consumer_protocol.TopicPartitions(topic="t", partitions=partitions),) if partitions else ()
    )
    return m.SyncGroupResponse(protocol_type="consumer", protocol_name="cooperative-sticky",
                               assignment=consumer_protocol.encode_assignment(assignment))


class ScriptedCoordinator:
    """Answers the membership's requests at once (joins may be parked); records what it was sent."""

    def __init__(self, partitions: tuple[int, ...] = (0, 1)) -> None:
        self.partitions = partitions
        self.sent: list[tuple[str, object]] = []
        self.heartbeat_error: BrokerError | None = None
        self.park_joins = False
        self.parked: list[Deferred[Any]] = []
        self.dropped: list[str] = []
        self.generation = 0

    def count(self, kind: type) -> int:
        return sum(isinstance(request, kind) for _, request in self.sent)

    async def coordinator_request(self, role: str, request: object) -> Any:
        self.sent.append((role, request))
        if isinstance(request, m.JoinGroupRequest):
            if self.park_joins:
                parked: Deferred[Any] = Deferred()
                self.parked.append(parked)
                return await parked
            self.generation += 1
            return m.JoinGroupResponse(generation_id=self.generation, protocol_type="consumer",
                                       protocol_name="cooperative-sticky", leader="", member_id="m-1")
        if isinstance(request, m.SyncGroupRequest):
            return _assignment(*self.partitions)
        if isinstance(request, m.HeartbeatRequest) and self.heartbeat_error is not None:
            error, self.heartbeat_error = self.heartbeat_error, None
            raise error
        if isinstance(request, m.OffsetCommitRequest):
            return m.OffsetCommitResponse(topics=())
        return None

    def drop_coordinator(self, role: str) -> None:
        self.dropped.append(role)
        parked, self.parked = self.parked, []
        for join in parked:
            join.errback(BrokerUnavailableError("connection lost"))

    async def all_topics(self) -> m.MetadataResponse:
        raise AssertionError("no pattern subscription in these tests")


def _membership(coordinator: ScriptedCoordinator, clock: Clock, instance: str | None = None) -> TwistedGroupMembership:
    settings = GroupSettings(group_id="g", group_instance_id=instance, session_timeout_ms=3_000,
                             heartbeat_interval_ms=int(HEARTBEAT_S * 1000))
    return TwistedGroupMembership(GroupMember(settings, ["t"]), links=coordinator, clock=clock)


def _apply_all(membership: TwistedGroupMembership) -> list[Any]:
    changes = membership.take_changes()
    membership.changes_applied(len(changes))
    return changes


def test_member_joins_then_heartbeats_on_the_injected_clock() -> None:
    clock, coordinator = Clock(), ScriptedCoordinator()
    membership = _membership(coordinator, clock)
    [change] = _apply_all(membership)
    assert change.assigned == {("t", 0), ("t", 1)}
    assert coordinator.count(m.HeartbeatRequest) == 0
    clock.pump([0.125] * 24)  # three seconds
    assert coordinator.count(m.HeartbeatRequest) == 12
    assert all(role == MEMBERSHIP for role, _ in coordinator.sent)


def test_member_rejoins_only_after_the_consumer_applied_its_changes() -> None:
    clock, coordinator = Clock(), ScriptedCoordinator()
    membership = _membership(coordinator, clock)
    _apply_all(membership)
    coordinator.heartbeat_error = RebalanceInProgressError("rejoin")
    coordinator.partitions = (1,)
    clock.advance(HEARTBEAT_S)
    assert coordinator.count(m.JoinGroupRequest) == 2  # nothing unapplied: rejoins at once
    clock.pump([0.1] * 10)
    assert coordinator.count(m.JoinGroupRequest) == 2
    [change] = membership.take_changes()
    assert change.revoked == {("t", 0)} and not change.assigned
    coordinator.heartbeat_error = RebalanceInProgressError("rejoin")
    clock.advance(HEARTBEAT_S)
    clock.pump([0.1] * 10)
    assert coordinator.count(m.JoinGroupRequest) == 2, "rejoined before the revocation was applied"
    membership.changes_applied(1)
    assert coordinator.count(m.JoinGroupRequest) == 3


def test_poll_waiting_for_an_assignment_wakes_when_the_sync_completes() -> None:
    clock, coordinator = Clock(), ScriptedCoordinator()
    coordinator.park_joins = True
    membership = _membership(coordinator, clock)
    woken = membership.wait_for_change(5.0)
    assert not woken.called
    coordinator.park_joins = False
    coordinator.parked.pop().callback(m.JoinGroupResponse(generation_id=1, protocol_type="consumer",
                                                          protocol_name="cooperative-sticky", leader="", member_id="m-1"))
    assert woken.called and membership.take_changes()
    timed_out = membership.wait_for_change(0.5)
    clock.advance(0.5)
    assert timed_out.called


def test_close_leaves_the_group_and_closes_both_coordinator_connections() -> None:
    clock, coordinator = Clock(), ScriptedCoordinator()
    membership = _membership(coordinator, clock)
    _apply_all(membership)
    committed = membership.commit({("t", 0): 5})
    assert committed.called and coordinator.sent[-1][0] == COMMITS
    closed = membership.close()
    assert closed.called
    assert coordinator.count(m.LeaveGroupRequest) == 1 and set(coordinator.dropped) == {MEMBERSHIP, COMMITS}
    clock.pump([HEARTBEAT_S] * 5)
    assert coordinator.count(m.HeartbeatRequest) == 0  # stopped


def test_static_member_does_not_leave_on_close() -> None:
    clock, coordinator = Clock(), ScriptedCoordinator()
    membership = _membership(coordinator, clock, instance="host-1")
    _apply_all(membership)
    membership.close()
    assert coordinator.count(m.LeaveGroupRequest) == 0


def test_close_during_a_parked_join_fails_the_join_and_ends() -> None:
    clock, coordinator = Clock(), ScriptedCoordinator()
    coordinator.park_joins = True
    membership = _membership(coordinator, clock)
    assert coordinator.parked
    closed = membership.close()
    assert closed.called and MEMBERSHIP in coordinator.dropped and membership.error is None


def test_not_coordinator_drops_the_connection_and_rejoins_keeping_the_partitions() -> None:
    clock, coordinator = Clock(), ScriptedCoordinator()
    membership = _membership(coordinator, clock)
    _apply_all(membership)
    coordinator.heartbeat_error = NotCoordinatorError("the group's offsets partition moved")
    clock.advance(HEARTBEAT_S)
    assert coordinator.dropped == [MEMBERSHIP]  # the next request finds the coordinator again
    assert coordinator.count(m.JoinGroupRequest) == 1
    clock.pump([0.125] * 4)  # after the retry pause it rejoins, as the same member
    assert coordinator.count(m.JoinGroupRequest) == 2
    assert membership.take_changes() == [] and membership.member.owned == {("t", 0), ("t", 1)}


def test_commit_retries_on_the_new_coordinator_after_not_coordinator() -> None:
    clock, coordinator = Clock(), ScriptedCoordinator()
    membership = _membership(coordinator, clock)
    _apply_all(membership)
    refusals = [NotCoordinatorError("moved")]
    answer = coordinator.coordinator_request

    async def refusing(role: str, request: object) -> Any:
        if isinstance(request, m.OffsetCommitRequest) and refusals:
            raise refusals.pop()
        return await answer(role, request)

    coordinator.coordinator_request = refusing  # type: ignore[method-assign]
    committed = membership.commit({("t", 0): 5})
    assert not committed.called and coordinator.dropped == [COMMITS]
    clock.advance(0.2)
    assert committed.called and coordinator.count(m.OffsetCommitRequest) == 1
