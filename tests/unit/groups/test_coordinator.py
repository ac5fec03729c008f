"""Group coordinator behaviour: rebalances, fencing, liveness clocks, static members, offsets, admin."""

from __future__ import annotations

import itertools

import pytest

from mqbroker.errors import (
    ErrorCode,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InvalidSessionTimeoutError,
    NonEmptyGroupError,
    OffsetMetadataTooLargeError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from mqbroker.groups.coordinator import GroupCoordinator, MemberIdGenerator
from mqbroker.groups.group import Group
from mqbroker.groups.messages import (
    GroupConfig,
    GroupState,
    JoinRequest,
    JoinResponse,
    MemberRequest,
    OffsetCommitRequest,
    PartitionCommit,
)
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.offsets import GroupKey, OffsetKey, OffsetStore, decode_group_value, decode_key

SESSION_MS = 10_000
POLL_MS = 30_000
TOPIC = "events"


def coordinator(delay_ms: int = 0, store: OffsetStore | None = None, now_ms: int = 0,
                check_interval_ms: int = 600_000) -> GroupCoordinator:
    counter = itertools.count(1)
    return GroupCoordinator(
        config=GroupConfig(initial_rebalance_delay_ms=delay_ms, offsets_retention_ms=60_000,
                           offsets_retention_check_interval_ms=check_interval_ms),
        partitions_per_topic=lambda topic: 6 if topic == TOPIC else 0,
        new_member_id=lambda client_id: f"{client_id}-{next(counter)}",
        store=store,
        now_ms=now_ms,
    )


def join(c: GroupCoordinator, key: str, now_ms: int, member_id: str = "", instance: str | None = None) -> None:
    c.join(JoinRequest(group_id="g", member_id=member_id, group_instance_id=instance, client_id=key,
                       session_timeout_ms=SESSION_MS, rebalance_timeout_ms=POLL_MS, topics=frozenset({TOPIC})),
           key, now_ms)


def responses(c: GroupCoordinator, log: list | None = None) -> dict[str, JoinResponse]:
    ready = c.ready()
    if log is not None:
        log += ready.records
    replies = ready.replies
    assert all(r.error is None for r in replies), replies
    return {r.request_key: r.response for r in replies}


def who(response: JoinResponse, instance: str | None = None) -> MemberRequest:
    return MemberRequest(group_id="g", member_id=response.member_id, generation_id=response.generation_id,
                         group_instance_id=instance)


def form(c: GroupCoordinator, **instances: str | None) -> dict[str, JoinResponse]:
    """Join every member at time 0, let the initial delay (100 ms) pass, and sync them all."""
    for key, instance in instances.items():
        join(c, key, 0, instance=instance)
    c.tick(100)
    formed = responses(c)
    for key, response in formed.items():
        c.sync(who(response, instances[key]), 100)
    return formed


def partitions(*numbers: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(TOPIC, n) for n in numbers)


def test_a_lone_member_gets_every_partition_and_the_group_becomes_stable() -> None:
    c = coordinator()
    join(c, "a", 0)
    a = responses(c)["a"]
    assert a.generation_id == 1 and a.assignor == "cooperative-sticky"
    assert c.sync(who(a), 0).assignment == partitions(0, 1, 2, 3, 4, 5)
    assert c.describe_group("g").state is GroupState.STABLE


def test_the_first_rebalance_waits_for_the_initial_delay_and_gathers_late_joiners() -> None:
    c = coordinator(delay_ms=3_000)
    join(c, "a", 0)
    join(c, "b", 2_000)
    assert c.ready().replies == () and c.next_deadline_ms() == 5_000
    c.tick(4_999)
    assert c.ready().replies == ()
    c.tick(5_000)
    answered = responses(c)
    assert {r.generation_id for r in answered.values()} == {1}
    sizes = [len(c.sync(who(r), 5_000).assignment) for r in answered.values()]
    assert sizes == [3, 3]


def test_a_new_member_takes_partitions_in_two_phases_while_the_owner_keeps_the_rest() -> None:
    c = coordinator()
    join(c, "a", 0)
    a = responses(c)["a"]
    c.sync(who(a), 0)
    join(c, "b", 100)
    assert c.heartbeat(who(a), polled=True, now_ms=200) is ErrorCode.REBALANCE_IN_PROGRESS
    join(c, "a", 300, member_id=a.member_id)
    phase_one = responses(c)
    a2, b2 = phase_one["a"], phase_one["b"]
    # Phase one: a gives up what moves and keeps the rest; b waits for the revoked partitions.
    kept = c.sync(who(a2), 300).assignment
    assert len(kept) == 3 and kept < partitions(0, 1, 2, 3, 4, 5)
    assert c.sync(who(b2), 300).assignment == frozenset()
    # Everyone collected phase one, so the follow-up rebalance starts on its own.
    assert c.heartbeat(who(a2), polled=True, now_ms=400) is ErrorCode.REBALANCE_IN_PROGRESS
    join(c, "a", 500, member_id=a2.member_id)
    join(c, "b", 500, member_id=b2.member_id)
    phase_two = responses(c)
    assert c.sync(who(phase_two["a"]), 500).assignment == kept
    assert c.sync(who(phase_two["b"]), 500).assignment == partitions(0, 1, 2, 3, 4, 5) - kept
    assert c.describe_group("g").state is GroupState.STABLE


def test_an_evicted_zombie_cannot_commit_or_heartbeat() -> None:
    c = coordinator()
    join(c, "a", 0)
    a = responses(c)["a"]
    c.sync(who(a), 0)
    c.tick(SESSION_MS)
    assert c.describe_group("g").state is GroupState.EMPTY
    commit = OffsetCommitRequest(group_id="g", member_id=a.member_id, generation_id=a.generation_id,
                                 offsets=(PartitionCommit(topic_partition=TopicPartition(TOPIC, 0), offset=5),))
    with pytest.raises(UnknownMemberIdError) as raised:
        c.commit_offsets(commit, SESSION_MS + 1)
    assert raised.value.code is ErrorCode.UNKNOWN_MEMBER_ID
    with pytest.raises(UnknownMemberIdError):
        c.heartbeat(who(a), polled=True, now_ms=SESSION_MS + 1)


def test_a_commit_from_a_stale_generation_is_refused() -> None:
    c = coordinator()
    join(c, "a", 0)
    a = responses(c)["a"]
    join(c, "b", 10)
    join(c, "a", 10, member_id=a.member_id)
    responses(c)
    stale = OffsetCommitRequest(group_id="g", member_id=a.member_id, generation_id=a.generation_id,
                                offsets=(PartitionCommit(topic_partition=TopicPartition(TOPIC, 0), offset=5),))
    with pytest.raises(IllegalGenerationError) as raised:
        c.commit_offsets(stale, 20)
    assert raised.value.code is ErrorCode.ILLEGAL_GENERATION


def test_members_may_commit_revoked_partitions_while_the_group_rebalances() -> None:
    c = coordinator()
    join(c, "a", 0)
    a = responses(c)["a"]
    c.sync(who(a), 0)
    join(c, "b", 10)
    assert c.describe_group("g").state is GroupState.PREPARING_REBALANCE
    commit = OffsetCommitRequest(group_id="g", member_id=a.member_id, generation_id=a.generation_id,
                                 offsets=(PartitionCommit(topic_partition=TopicPartition(TOPIC, 4), offset=9),))
    c.offsets_written(c.commit_offsets(commit, 20))
    assert c.fetch_offsets("g", [TopicPartition(TOPIC, 4)])[TopicPartition(TOPIC, 4)].offset == 9
    with pytest.raises(RebalanceInProgressError):
        c.sync(who(a), 20)


def test_a_member_that_heartbeats_but_never_polls_is_evicted_after_the_max_poll_interval() -> None:
    c = coordinator()
    join(c, "a", 0)
    a = responses(c)["a"]
    c.sync(who(a), 0)
    for now_ms in range(5_000, POLL_MS, 5_000):
        assert c.heartbeat(who(a), polled=False, now_ms=now_ms) is ErrorCode.NONE
        c.tick(now_ms)
    assert c.next_deadline_ms() == POLL_MS
    c.tick(POLL_MS)
    with pytest.raises(UnknownMemberIdError, match="max poll interval|left or was evicted"):
        c.heartbeat(who(a), polled=True, now_ms=POLL_MS + 1)


def test_a_member_that_heartbeats_and_polls_outlives_both_timeouts() -> None:
    c = coordinator()
    join(c, "a", 0)
    a = responses(c)["a"]
    c.sync(who(a), 0)
    for now_ms in range(5_000, 3 * POLL_MS, 5_000):
        assert c.heartbeat(who(a), polled=True, now_ms=now_ms) is ErrorCode.NONE
        c.tick(now_ms)
    assert c.describe_group("g").state is GroupState.STABLE


def test_a_static_member_restarting_within_its_session_timeout_causes_no_rebalance() -> None:
    c = coordinator(delay_ms=100)
    first = form(c, a="host-a", b="host-b")
    a, b = first["a"], first["b"]
    owned_by_a = c.sync(who(a, "host-a"), 100).assignment
    # a's process dies without leaving and comes back 5 s later with an empty member id.
    c.heartbeat(who(b, "host-b"), polled=True, now_ms=4_000)
    join(c, "a", 5_000, instance="host-a")
    log: list = []
    restarted = responses(c, log)["a"]
    assert restarted.member_id != a.member_id and restarted.generation_id == a.generation_id
    persisted = decode_group_value(log[-1].value)
    assert restarted.member_id in [m.member_id for m in persisted.members]
    assert c.sync(who(restarted, "host-a"), 5_000).assignment == owned_by_a
    assert c.heartbeat(who(b, "host-b"), polled=True, now_ms=6_000) is ErrorCode.NONE
    with pytest.raises(FencedInstanceIdError) as raised:
        c.heartbeat(who(a, "host-a"), polled=True, now_ms=6_000)
    assert raised.value.code is ErrorCode.FENCED_INSTANCE_ID


def test_a_static_member_gone_longer_than_its_session_timeout_is_rebalanced_away() -> None:
    c = coordinator(delay_ms=100)
    first = form(c, a="host-a", b="host-b")
    c.heartbeat(who(first["b"], "host-b"), polled=True, now_ms=9_000)
    c.tick(SESSION_MS + 99)
    assert c.describe_group("g").state is GroupState.STABLE
    c.tick(SESSION_MS + 100)
    assert c.heartbeat(who(first["b"], "host-b"), polled=True, now_ms=SESSION_MS + 100) is ErrorCode.REBALANCE_IN_PROGRESS
    assert [m.group_instance_id for m in c.describe_group("g").members] == ["host-b"]


def test_leaving_rebalances_at_once_and_the_last_leave_empties_the_group() -> None:
    c = coordinator(delay_ms=100)
    first = form(c, a=None, b=None)
    c.leave(who(first["a"]), 10)
    join(c, "b", 20, member_id=first["b"].member_id)
    b = responses(c)["b"]
    assert c.sync(who(b), 20).assignment == partitions(0, 1, 2, 3, 4, 5)
    c.leave(who(b), 30)
    assert c.describe_group("g").state is GroupState.EMPTY


def test_offsets_of_an_empty_group_expire_after_retention_and_the_group_is_dropped() -> None:
    c = coordinator(check_interval_ms=1)
    join(c, "a", 0)
    a = responses(c)["a"]
    commit = OffsetCommitRequest(group_id="g", member_id=a.member_id, generation_id=a.generation_id,
                                 offsets=(PartitionCommit(topic_partition=TopicPartition(TOPIC, 0), offset=3),))
    c.offsets_written(c.commit_offsets(commit, 10))
    c.leave(who(a), 1_000)
    c.ready()
    c.tick(60_999)
    assert c.fetch_offsets("g") != {} and c.ready().records == ()
    c.tick(61_000)
    keys = [decode_key(r.key) for r in c.ready().records]
    assert keys == [OffsetKey(group_id="g", topic_partition=TopicPartition(TOPIC, 0)), GroupKey(group_id="g")]
    assert c.list_groups() == [] and c.describe_group("g").state is GroupState.DEAD


def test_only_a_group_without_members_can_be_deleted() -> None:
    c = coordinator()
    join(c, "a", 0)
    a = responses(c)["a"]
    with pytest.raises(NonEmptyGroupError):
        c.delete_group("g", 10)
    with pytest.raises(GroupIdNotFoundError):
        c.delete_group("nobody", 10)
    c.leave(who(a), 20)
    c.delete_group("g", 30)
    assert c.list_groups() == []


def test_offsets_are_deleted_only_for_topics_no_member_subscribes_to() -> None:
    c = coordinator()
    join(c, "a", 0)
    a = responses(c)["a"]
    c.sync(who(a), 0)
    subscribed, other = TopicPartition(TOPIC, 1), TopicPartition("other", 0)
    c.offsets_written(c.commit_offsets(OffsetCommitRequest(
        group_id="g", member_id=a.member_id, generation_id=a.generation_id, group_instance_id=None,
        offsets=tuple(PartitionCommit(topic_partition=tp, offset=5, metadata="", leader_epoch=None)
                      for tp in (subscribed, other))), 10))
    c.ready()
    outcomes = c.delete_offsets("g", [subscribed, other, TopicPartition("other", 3)])
    assert isinstance(outcomes[subscribed], GroupSubscribedToTopicError)
    assert outcomes[other] is None and outcomes[TopicPartition("other", 3)] is None  # nothing committed: done
    assert [decode_key(r.key) for r in c.ready().records] == [OffsetKey(group_id="g", topic_partition=other)]
    assert set(c.fetch_offsets("g")) == {subscribed}
    with pytest.raises(GroupIdNotFoundError):
        c.delete_offsets("nobody", [other])
    c.leave(who(a), 20)
    c.ready()
    assert c.delete_offsets("g", [subscribed]) == {subscribed: None}
    assert c.fetch_offsets("g") == {}


def test_a_new_coordinator_replaying_the_offsets_topic_restores_members_and_offsets() -> None:
    c = coordinator()
    log: list = []
    join(c, "a", 0, instance="host-a")
    a = responses(c, log)["a"]
    owned = c.sync(who(a, "host-a"), 0).assignment
    commit = OffsetCommitRequest(group_id="g", member_id=a.member_id, generation_id=a.generation_id,
                                 group_instance_id="host-a", offsets=(
                                     PartitionCommit(topic_partition=TopicPartition(TOPIC, 2), offset=42,
                                                     metadata="m", leader_epoch=7),))
    committed = c.commit_offsets(commit, 50)
    log += committed
    c2 = coordinator(store=OffsetStore.replay(log), now_ms=100_000)
    assert c2.fetch_offsets("g")[TopicPartition(TOPIC, 2)].offset == 42
    # The member heartbeats to the new coordinator with the generation it had, as if nothing happened.
    assert c2.heartbeat(who(a, "host-a"), polled=True, now_ms=100_001) is ErrorCode.NONE
    assert c2.sync(who(a, "host-a"), 100_002).assignment == owned


def test_settings_the_coordinator_cannot_honour_are_refused_with_their_codes() -> None:
    c = coordinator()
    with pytest.raises(InvalidSessionTimeoutError) as raised:
        c.join(JoinRequest(group_id="g", session_timeout_ms=1, rebalance_timeout_ms=POLL_MS,
                           topics=frozenset({TOPIC})), "k", 0)
    assert raised.value.code is ErrorCode.INVALID_SESSION_TIMEOUT
    with pytest.raises(OffsetMetadataTooLargeError):
        c.commit_offsets(OffsetCommitRequest(group_id="solo", offsets=(
            PartitionCommit(topic_partition=TopicPartition(TOPIC, 0), offset=1, metadata="x" * 5000),)), 0)


def test_a_standalone_commit_is_refused_while_the_group_has_members() -> None:
    c = coordinator()
    join(c, "a", 0)
    responses(c)
    with pytest.raises(UnknownMemberIdError):
        c.commit_offsets(OffsetCommitRequest(group_id="g", offsets=(
            PartitionCommit(topic_partition=TopicPartition(TOPIC, 0), offset=1),)), 0)


def test_an_illegal_state_transition_is_a_crash_not_an_error() -> None:
    group = Group("g", protocol_type="consumer", now_ms=0)
    with pytest.raises(AssertionError, match="invalid transition EMPTY -> STABLE"):
        group.transition(GroupState.STABLE, 0)


def test_member_ids_come_from_the_injected_source() -> None:
    class Fixed:
        def getrandbits(self, k: int, /) -> int:
            return 255

    assert MemberIdGenerator(Fixed())("billing") == "billing-00000000000000ff"
