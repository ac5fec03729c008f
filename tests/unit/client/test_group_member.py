"""The consumer's pure group-membership state machine."""

from __future__ import annotations

import pytest

from mqbroker.client.consumer import ConsumerConfig, ConsumerCore, OffsetReset
from mqbroker.client.group_member import (
    AssignmentChange,
    AutoCommit,
    GroupMember,
    GroupSettings,
    MemberState,
    Step,
    apply_change,
    committed_offsets,
    offset_fetch_request,
    revoked_positions,
)
from mqbroker.errors import FencedInstanceIdError, IllegalGenerationError, RebalanceInProgressError, UnknownMemberIdError
from mqbroker.protocols.native import consumer_protocol
from mqbroker.protocols.native.messages import (
    JoinGroupResponse,
    OffsetFetchPartitionResult,
    OffsetFetchResponse,
    OffsetFetchTopicResult,
    SyncGroupResponse,
)


def _assignment(*partitions: tuple[str, int]) -> SyncGroupResponse:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    encoded = consumer_protocol.encode_assignment(consumer_protocol.ConsumerAssignment(assigned_partitions=tuple(
        consumer_protocol.TopicPartitions(topic=t, partitions=tuple(p)) for t, p in by_topic.items()
    )))
    return SyncGroupResponse(protocol_type="consumer", protocol_name="cooperative-sticky", assignment=encoded)


def _stable(member: GroupMember, *partitions: tuple[str, int], generation: int = 1) -> None:
    member.join_request()
    member.join_completed(JoinGroupResponse(generation_id=generation, protocol_type="consumer",
                                            protocol_name="cooperative-sticky", leader="", member_id="m-1"))
    member.sync_completed(_assignment(*partitions), now_ms=0)


def test_sync_reports_gained_and_revoked_partitions() -> None:
    member = GroupMember(GroupSettings(group_id="g"), ["t"])
    _stable(member, ("t", 0), ("t", 1))
    member.failed(RebalanceInProgressError("rejoin"))
    member.join_request()
    member.join_completed(JoinGroupResponse(generation_id=2, protocol_type="consumer",
                                            protocol_name="cooperative-sticky", leader="", member_id="m-1"))
    change = member.sync_completed(_assignment(("t", 1), ("t", 2)), now_ms=10)
    assert change.assigned == {("t", 2)} and change.revoked == {("t", 0)} and not change.lost
    assert member.owned == {("t", 1), ("t", 2)}


def test_rebalance_in_progress_keeps_partitions_and_rejoins() -> None:
    member = GroupMember(GroupSettings(group_id="g"), ["t"])
    _stable(member, ("t", 0))
    assert not member.failed(RebalanceInProgressError("rejoin"))
    assert member.needs_join and member.owned == {("t", 0)}
    assert member.heartbeat_due_ms() is not None  # still heartbeats while waiting to rejoin


def test_eviction_loses_partitions_and_forgets_the_member_id() -> None:
    member = GroupMember(GroupSettings(group_id="g"), ["t"])
    _stable(member, ("t", 0))
    change = member.failed(UnknownMemberIdError("evicted"))
    assert change.lost == {("t", 0)} and member.member_id == "" and member.needs_join


def test_ended_generation_loses_partitions_but_keeps_the_member_id() -> None:
    member = GroupMember(GroupSettings(group_id="g"), ["t"])
    _stable(member, ("t", 0))
    assert member.failed(IllegalGenerationError("over")).lost == {("t", 0)}
    assert member.member_id == "m-1"


def test_fenced_static_member_stays_fenced() -> None:
    member = GroupMember(GroupSettings(group_id="g", group_instance_id="i-1"), ["t"])
    _stable(member, ("t", 0))
    with pytest.raises(FencedInstanceIdError):
        member.failed(FencedInstanceIdError("newer incarnation"))
    assert member.state is MemberState.FENCED and member.leave_request() is None


def test_static_member_does_not_leave_but_dynamic_one_does() -> None:
    static = GroupMember(GroupSettings(group_id="g", group_instance_id="i-1"), ["t"])
    _stable(static, ("t", 0))
    dynamic = GroupMember(GroupSettings(group_id="g"), ["t"])
    _stable(dynamic, ("t", 0))
    assert static.leave_request() is None
    request = dynamic.leave_request()
    assert request is not None and request.members[0].member_id == "m-1"


def test_heartbeat_interval_must_be_below_session_timeout() -> None:
    with pytest.raises(ValueError, match="heartbeat_interval_ms"):
        GroupMember(GroupSettings(group_id="g", session_timeout_ms=1000, heartbeat_interval_ms=1000), ["t"])


def test_commit_request_carries_member_and_generation() -> None:
    member = GroupMember(GroupSettings(group_id="g"), ["t"])
    _stable(member, ("t", 0), generation=7)
    request = member.commit_request({("t", 0): 42})
    assert (request.member_id, request.generation_id) == ("m-1", 7)
    assert request.topics[0].partitions[0].committed_offset == 42


def test_member_joins_first_then_heartbeats_on_the_interval() -> None:
    member = GroupMember(GroupSettings(group_id="g", heartbeat_interval_ms=300), ["t"])
    assert member.next_step(0) == (Step.JOIN, 0)
    _stable(member, ("t", 0))
    member.take_changes()
    member.changes_applied(1)
    assert member.next_step(100) == (Step.WAIT, 200)
    assert member.next_step(300) == (Step.HEARTBEAT, 0)
    assert member.heartbeat_request(now_ms=300).polled
    assert not member.heartbeat_request(now_ms=600).polled  # nobody polled in between


def test_member_rejoins_only_after_the_application_applied_its_changes() -> None:
    member = GroupMember(GroupSettings(group_id="g", heartbeat_interval_ms=300), ["t"])
    _stable(member, ("t", 0), ("t", 1))
    member.failed(RebalanceInProgressError("rejoin"))
    assert member.next_step(10)[0] is Step.WAIT  # the assignment from the sync is not applied yet
    changes = member.take_changes()
    assert changes == [AssignmentChange(assigned=frozenset({("t", 0), ("t", 1)}))]
    member.changes_applied(len(changes))
    assert member.next_step(10) == (Step.JOIN, 0)


def test_eviction_queues_the_lost_partitions_for_the_application() -> None:
    member = GroupMember(GroupSettings(group_id="g"), ["t"])
    _stable(member, ("t", 0))
    member.take_changes()
    member.failed(UnknownMemberIdError("evicted"))
    assert member.take_changes() == [AssignmentChange(lost=frozenset({("t", 0)}))]


def test_auto_commit_is_due_on_its_interval_and_never_when_disabled() -> None:
    auto = AutoCommit(200, now_ms=0)
    assert [auto.due(now) for now in (100, 200, 300, 400)] == [False, True, False, True]
    manual = AutoCommit(None, now_ms=0)
    assert not manual.enabled and not manual.due(10_000)


def test_applying_a_change_commits_revoked_and_reads_gained_partitions_from_their_commits() -> None:
    core = ConsumerCore(ConsumerConfig(auto_offset_reset=OffsetReset.EARLIEST))
    core.assign([("t", 0), ("t", 1)])
    core.seek(("t", 0), 5)
    change = AssignmentChange(assigned=frozenset({("t", 2), ("t", 3)}), revoked=frozenset({("t", 0)}),
                              lost=frozenset({("t", 1)}))
    assert revoked_positions(core, change) == {("t", 0): 5}
    apply_change(core, change, {("t", 2): 40, ("t", 3): None})
    assert core.assignment() == {("t", 2), ("t", 3)}
    assert core.position(("t", 2)) == 40 and core.position(("t", 3)) is None  # t-3 follows the reset policy


def test_committed_offsets_maps_missing_commits_to_none() -> None:
    request = offset_fetch_request("g", [("t", 1), ("t", 0), ("u", 0)])
    assert [(t.name, t.partition_indexes) for t in request.topics or ()] == [("t", (0, 1)), ("u", (0,))]
    response = OffsetFetchResponse(topics=(OffsetFetchTopicResult(name="t", partitions=(
        OffsetFetchPartitionResult(partition_index=0, committed_offset=7),
        OffsetFetchPartitionResult(partition_index=1, committed_offset=-1),
    )),))
    assert committed_offsets(response, [("t", 0), ("t", 1), ("u", 0)]) == {("t", 0): 7, ("t", 1): None, ("u", 0): None}
