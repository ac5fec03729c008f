"""The coordinator's marker writer over this broker's appender: every partition gets its marker, whatever a leader answers."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock

from mqbroker import errors
from mqbroker.core.txn_markers import MarkerAppender, PartitionMarkers
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.service import OFFSETS_TOPIC
from mqbroker.transactions.messages import TransactionMarker

NODE_ID = 1
T0, T1, OFFSETS_3 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition(OFFSETS_TOPIC, 3)


class _Cluster:
    """Every partition of every topic led by this broker (4 partitions each), but the topics of ``leaders``: the
    leader of each of their partitions (-1: none), and those of ``deleted``: none."""

    def __init__(self, leaders: dict[str, list[int]] | None = None, deleted: frozenset[str] = frozenset()) -> None:
        self.leaders = leaders or {}
        self.deleted = deleted

    def topic(self, name: str) -> Any:
        if name in self.deleted:
            return None
        return SimpleNamespace(partitions=[SimpleNamespace(leader_id=leader)
                                           for leader in self.leaders.get(name, [NODE_ID] * 4)])


class _Leaders:
    """The partition leaders' appends: ``refusals`` of a partition are raised at once, then it takes the marker."""

    def __init__(self, refusals: dict[TopicPartition, list[errors.BrokerError]]) -> None:
        self.refusals = refusals
        self.appended: list[TopicPartition] = []

    def append(self, topic: str, partition: int, records: bytes, timeout_ms: int, *,
               markers_allowed: bool) -> Deferred[None]:
        assert markers_allowed
        topic_partition = TopicPartition(topic, partition)
        if self.refusals.get(topic_partition):
            raise self.refusals[topic_partition].pop(0)
        self.appended.append(topic_partition)
        return succeed(None)


def _writer(leaders: _Leaders, ended: list[tuple[int, int, bool]], clock: Clock,
            cluster: _Cluster | None = None) -> PartitionMarkers:
    local = MarkerAppender(clock=clock, append=leaders.append,
                           transaction_ended=lambda partition, producer_id, committed: ended.append(
                               (partition, producer_id, committed)))
    return PartitionMarkers(clock=clock, node_id=NODE_ID, cluster=cluster or _Cluster(),  # type: ignore[arg-type]
                            local=local, peers=lambda: None)


def _marker(*partitions: TopicPartition) -> TransactionMarker:
    return TransactionMarker(producer_id=42, producer_epoch=0, coordinator_epoch=0, committed=True,
                             partitions=frozenset(partitions))


def test_a_leader_refusing_a_marker_at_once_is_retried_and_the_others_keep_theirs() -> None:
    clock, ended = Clock(), []
    leaders = _Leaders({T1: [errors.NotLeaderError("t-1 is moving"),
                             errors.NotEnoughReplicasError("t-1 has 1 in-sync replica")]})
    written = _writer(leaders, ended, clock).write(_marker(T0, T1, OFFSETS_3))
    outcome: list[Any] = []
    written.addBoth(outcome.append)
    clock.advance(0)
    assert not outcome and sorted(leaders.appended) == [OFFSETS_3, T0]
    assert ended == [(3, 42, True)]  # the group's offsets apply with the marker, not after t-1's
    for _ in range(20):
        clock.advance(0.1)
    assert outcome == [None]
    assert sorted(leaders.appended) == [OFFSETS_3, T0, T1]


def test_a_marker_refused_as_obsolete_at_once_counts_as_written() -> None:
    clock, ended = Clock(), []
    leaders = _Leaders({T0: [errors.InvalidProducerEpochError("producer 42 epoch 0 is fenced by epoch 1")]})
    outcome: list[Any] = []
    _writer(leaders, ended, clock).write(_marker(T0)).addBoth(outcome.append)
    clock.advance(0)
    assert outcome == [None] and leaders.appended == []


def test_no_marker_is_owed_to_a_deleted_topic_and_a_partition_without_a_leader_waits_for_one() -> None:
    clock, ended = Clock(), []
    leaders = _Leaders({})
    cluster = _Cluster(leaders={"t": [NODE_ID, -1]}, deleted=frozenset({"gone"}))
    outcome: list[Any] = []
    shrunk, deleted = TopicPartition("t", 3), TopicPartition("gone", 0)
    _writer(leaders, ended, clock, cluster).write(_marker(T0, T1, shrunk, deleted)).addBoth(outcome.append)
    clock.advance(0)
    assert not outcome and leaders.appended == [T0]  # t-1 has no leader yet; t-3 and gone-0 are owed nothing
    clock.advance(0.1)
    assert not outcome
    cluster.leaders["t"] = [NODE_ID, NODE_ID]
    for _ in range(10):
        clock.advance(0.1)
    assert outcome == [None] and leaders.appended == [T0, T1]
