"""The broker's GroupService on a fake clock: parked joins, the eviction timer, durable commits.

The coordinator is the real pure one and ``__consumer_offsets`` is real storage (a
``PartitionLog`` per partition); only the flusher is played by the test, which decides when an
append becomes durable.
"""

from __future__ import annotations

import itertools
import pathlib
from typing import Any

import pytest
from twisted.internet.defer import Deferred, fail
from twisted.internet.task import Clock

from mqbroker import errors
from mqbroker.groups.service import CoordinatedPartitions, GroupService, offsets_partition, read_offsets_records
from mqbroker.groups.coordinator import GroupCoordinator
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
from mqbroker.groups.offsets import CommittedOffset, OffsetStore, offset_commit_record
from mqbroker.records.builder import BatchBuilder
from mqbroker.storage.config import LogConfig
from mqbroker.records.errors import CorruptRecordError
from mqbroker.storage.log import PartitionLog
from tests.poison import poison_batch

OFFSETS_PARTITIONS = 3
DELAY_S = 3.0
SESSION_MS = 6_000


class OffsetsTopic:
    """Real partition logs; appends are durable when the test says so (or fail when told to)."""

    def __init__(self, directory: pathlib.Path, clock: Clock) -> None:
        self.clock = clock
        self.logs = [PartitionLog.open(str(directory / f"__consumer_offsets-{n}"), LogConfig(), 0)
                     for n in range(OFFSETS_PARTITIONS)]
        self.pending: list[Deferred[Any]] = []
        self.failure: errors.BrokerError | None = None

    def append(self, partition: int, batch: bytes) -> Deferred[Any]:
        if self.failure is not None:
            return fail(self.failure)
        self.logs[partition].append(batch, int(self.clock.seconds() * 1000))
        durable: Deferred[Any] = Deferred()
        self.pending.append(durable)
        return durable

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        for durable in pending:
            durable.callback(None)

    def replay(self) -> OffsetStore:
        return OffsetStore.replay(record for log in self.logs for record in read_offsets_records(log))


def _service(clock: Clock, topic: OffsetsTopic, store: OffsetStore | None = None) -> GroupService:
    ids = itertools.count(1)
    coordinator = GroupCoordinator(
        config=GroupConfig(session_timeout_ms_min=1_000, initial_rebalance_delay_ms=int(DELAY_S * 1000)),
        partitions_per_topic=lambda topic_name: 2, new_member_id=lambda client_id: f"{client_id}-{next(ids)}",
        store=store, now_ms=int(clock.seconds() * 1000),
    )
    return GroupService(coordinator=coordinator, clock=clock, append=topic.append, offsets_partitions=OFFSETS_PARTITIONS)


def _join(service: GroupService, client_id: str = "c", member_id: str = "") -> Deferred[JoinResponse]:
    return service.join(JoinRequest(group_id="g", member_id=member_id, client_id=client_id,
                                    session_timeout_ms=SESSION_MS, rebalance_timeout_ms=30_000,
                                    topics=frozenset({"events"})))


def _result(deferred: Deferred[Any]) -> Any:
    results: list[Any] = []
    deferred.addBoth(results.append)
    assert results, "the Deferred has not fired"
    return results[0]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def topic(tmp_path: pathlib.Path, clock: Clock) -> OffsetsTopic:
    return OffsetsTopic(tmp_path, clock)


def _stable_member(service: GroupService, clock: Clock) -> MemberRequest:
    joined = _join(service)
    clock.advance(DELAY_S)
    response = _result(joined)
    member = MemberRequest(group_id="g", member_id=response.member_id, generation_id=response.generation_id)
    assert _result(service.sync(member)).assignment == {("events", 0), ("events", 1)}
    return member


def test_join_stays_parked_until_the_initial_rebalance_delay_passes_on_the_clock(
    clock: Clock, topic: OffsetsTopic
) -> None:
    service = _service(clock, topic)
    joined = _join(service)
    clock.advance(DELAY_S - 0.01)
    assert not joined.called
    clock.advance(0.01)
    assert _result(joined).generation_id == 1


def test_member_that_stops_heartbeating_is_evicted_by_the_session_timer(clock: Clock, topic: OffsetsTopic) -> None:
    service = _service(clock, topic)
    member = _stable_member(service, clock)
    clock.advance(SESSION_MS / 1000 - 1)
    assert _result(service.heartbeat(member, polled=True)) is None  # renews the session
    clock.advance(SESSION_MS / 1000 - 0.01)
    assert _result(service.describe_group("g")).members
    clock.advance(0.01)
    assert _result(service.describe_group("g")).members == ()
    refused = _result(service.heartbeat(member, polled=True))
    assert refused.check(errors.UnknownMemberIdError)


def test_heartbeat_during_a_rebalance_fails_with_rebalance_in_progress(clock: Clock, topic: OffsetsTopic) -> None:
    service = _service(clock, topic)
    member = _stable_member(service, clock)
    _join(service, client_id="other")
    assert _result(service.heartbeat(member, polled=True)).check(errors.RebalanceInProgressError)


def test_commit_fires_only_once_its_records_are_durable_and_survives_replay(clock: Clock, topic: OffsetsTopic) -> None:
    service = _service(clock, topic)
    member = _stable_member(service, clock)
    topic.flush()  # the group metadata record
    committed = service.commit(OffsetCommitRequest(
        group_id="g", member_id=member.member_id, generation_id=member.generation_id,
        offsets=(PartitionCommit(topic_partition=TopicPartition("events", 0), offset=42, metadata="m"),),
    ))
    assert not committed.called
    assert _result(service.fetch_offsets("g", [("events", 0)])) == {("events", 0): None}  # not visible yet
    topic.flush()
    assert _result(committed) is None
    assert _result(service.fetch_offsets("g", [("events", 0)]))[("events", 0)].offset == 42
    assert topic.logs[offsets_partition("g", OFFSETS_PARTITIONS)].log_end_offset >= 2
    restarted = _service(clock, topic, store=topic.replay())
    assert _result(restarted.fetch_offsets("g", [("events", 0)]))[("events", 0)].metadata == "m"


def test_failed_append_fails_the_commit_with_the_storage_error_itself(clock: Clock, topic: OffsetsTopic) -> None:
    service = _service(clock, topic)
    member = _stable_member(service, clock)
    topic.failure = errors.NotEnoughReplicasError("only one replica in sync")
    committed = service.commit(OffsetCommitRequest(
        group_id="g", member_id=member.member_id, generation_id=member.generation_id,
        offsets=(PartitionCommit(topic_partition=TopicPartition("events", 1), offset=7),),
    ))
    assert _result(committed).check(errors.NotEnoughReplicasError)


def test_zombie_commit_fails_at_once_and_nothing_is_written(clock: Clock, topic: OffsetsTopic) -> None:
    service = _service(clock, topic)
    member = _stable_member(service, clock)
    topic.flush()
    written = [log.log_end_offset for log in topic.logs]
    refused = service.commit(OffsetCommitRequest(
        group_id="g", member_id=member.member_id, generation_id=member.generation_id + 1,
        offsets=(PartitionCommit(topic_partition=TopicPartition("events", 1), offset=7),),
    ))
    assert _result(refused).check(errors.IllegalGenerationError)
    assert [log.log_end_offset for log in topic.logs] == written


def test_timer_follows_the_coordinator_deadline_and_stop_cancels_it(clock: Clock, topic: OffsetsTopic) -> None:
    service = _service(clock, topic)
    _join(service)
    [timer] = clock.getDelayedCalls()
    assert timer.getTime() == DELAY_S
    clock.advance(DELAY_S)
    [timer] = clock.getDelayedCalls()
    assert timer.getTime() == DELAY_S + SESSION_MS / 1000  # now the member's session deadline
    service.stop()
    assert clock.getDelayedCalls() == []
    assert _result(service.describe_group("g")).state is GroupState.COMPLETING_REBALANCE


def test_replay_stops_at_the_given_end_offset(clock: Clock, topic: OffsetsTopic) -> None:
    service = _service(clock, topic)
    member = _stable_member(service, clock)
    topic.flush()
    partition_log = topic.logs[offsets_partition("g", OFFSETS_PARTITIONS)]
    metadata_end = partition_log.log_end_offset
    service.commit(OffsetCommitRequest(
        group_id="g", member_id=member.member_id, generation_id=member.generation_id,
        offsets=(PartitionCommit(topic_partition=TopicPartition("events", 0), offset=42),),
    ))
    # A new coordinator replays only what is below the high watermark: the commit above it is not seen.
    store = OffsetStore.replay(read_offsets_records(partition_log, metadata_end))
    assert store.group_metadata("g") is not None and store.committed("g", TopicPartition("events", 0)) is None
    full = OffsetStore.replay(read_offsets_records(partition_log))
    assert full.committed("g", TopicPartition("events", 0)).offset == 42  # type: ignore[union-attr]


def test_groups_route_to_their_partitions_service_and_elsewhere_answer_not_coordinator(
    clock: Clock, topic: OffsetsTopic
) -> None:
    coordinators = CoordinatedPartitions(OFFSETS_PARTITIONS)
    partition = coordinators.partition_of("g")
    assert partition == offsets_partition("g", OFFSETS_PARTITIONS)
    with pytest.raises(errors.NotCoordinatorError):
        coordinators.service_for("g")
    coordinators.loading(partition, leader_epoch=4)
    with pytest.raises(errors.CoordinatorLoadInProgressError):
        coordinators.service_for("g")
    service = _service(clock, topic)
    coordinators.serve(partition, 4, service)
    assert coordinators.service_for("g") is service and coordinators.epoch_of(partition) == 4
    other = next(f"g{n}" for n in range(100) if offsets_partition(f"g{n}", OFFSETS_PARTITIONS) != partition)
    with pytest.raises(errors.NotCoordinatorError):
        coordinators.service_for(other)


def test_resigning_a_partition_fails_its_parked_joins_with_not_coordinator(clock: Clock, topic: OffsetsTopic) -> None:
    coordinators = CoordinatedPartitions(OFFSETS_PARTITIONS)
    partition = coordinators.partition_of("g")
    service = _service(clock, topic)
    coordinators.loading(partition, 0)
    coordinators.serve(partition, 0, service)
    parked = _join(service)
    coordinators.resign(partition)
    assert _result(parked).check(errors.NotCoordinatorError)
    assert clock.getDelayedCalls() == [] and coordinators.epoch_of(partition) is None
    with pytest.raises(errors.NotCoordinatorError):
        coordinators.service_for("g")


def test_the_offsets_replay_skips_batches_and_records_it_cannot_read(tmp_path: pathlib.Path) -> None:
    """A poison batch, a record without a key and one whose value is garbage are reported with their offsets;
    the commits around them are loaded (the coordinator starts instead of failing for ever)."""
    partition_log = PartitionLog.open(str(tmp_path / "__consumer_offsets-0"), LogConfig(), 0)
    commit = offset_commit_record("g", TopicPartition("events", 0), CommittedOffset(offset=5, metadata="",
                                                                                  commit_timestamp_ms=0))
    later = offset_commit_record("g", TopicPartition("events", 1), CommittedOffset(offset=9, metadata="",
                                                                                 commit_timestamp_ms=0))
    for key, value in ((commit.key, commit.value), (None, b"keyless"), (later.key[:3], b"\xff"),
                       (later.key, later.value)):
        builder = BatchBuilder()
        builder.append(0, key, value)
        partition_log.append(builder.build(), 0)
        if key is None:
            partition_log.append(poison_batch(), 0)
    skipped: list[tuple[int, int]] = []
    records = read_offsets_records(partition_log, partition=0,
                                   skipped=lambda batch: skipped.append((batch.first_offset, batch.last_offset)))
    store = OffsetStore.replay(records, skipped=lambda record, error: skipped.append((record.offset, record.offset)))
    assert store.committed("g", TopicPartition("events", 0)).offset == 5  # type: ignore[union-attr]
    assert store.committed("g", TopicPartition("events", 1)).offset == 9  # type: ignore[union-attr]
    assert skipped == [(1, 1), (2, 2), (3, 3)]  # the keyless record, the poison batch, the garbage key
    with pytest.raises(CorruptRecordError):  # without a reporter the replay refuses, as before
        list(read_offsets_records(partition_log))
