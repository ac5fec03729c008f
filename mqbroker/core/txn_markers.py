# -*- test-case-name: tests.unit.core.test_txn_markers -*-
"""Transaction markers (tx-light): a coordinator's markers written by the partition leaders, until every partition has one.

``MarkerAppender`` is the partition leader's side of WriteTxnMarkers: it appends each COMMIT or
ABORT control batch (acks=all, like any broker write; the markers of one request share one fsync
round) and, for a ``__consumer_offsets`` partition,
has the group coordinator make the transaction's offsets visible or drop them. ``PartitionMarkers``
is the coordinator's side: it sends each marker to its partition's current leader (this broker's
appender, or another broker over ``TransactionPeers``) and retries, with backoff and fresh
leaders, until every partition has it, so no decided transaction is left hanging. A marker a
partition answers with INVALID_PRODUCER_EPOCH is obsolete (a later decision already fenced that
epoch there) and counts as written; TRANSACTION_COORDINATOR_FENCED means a newer coordinator
owns the id, and this one stops. A leader refusing a marker at once (not the leader any more, too
few in-sync replicas) answers that partition with the error, like a slow one: the coordinator
retries it, and the other partitions of the request keep their outcomes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol

from twisted.internet.defer import Deferred, DeferredList, fail, gatherResults
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater

from mqbroker import errors
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.service import OFFSETS_TOPIC
from mqbroker.interfaces import IClusterView
from mqbroker.records.control import ControlType, encode_control_batch
from mqbroker.transactions.messages import AddPartitionsRequest, MarkerOutcome, TransactionMarker

#: A marker waits this long for the in-sync replicas of its partition (then the coordinator retries). Long, like
#: Kafka's request.timeout.ms (30 s) that bounds its WriteTxnMarkers appends: a marker already in the log is
#: credited (and a group's offsets apply) when its fsync round and replicas have it, and a retry could only
#: append another one behind the same round. What a retry can fix ends the wait at once: a lost leadership
#: fails it, a follower too slow for the ISR is dropped from it (``replica_lag_time_max_ms``, 10 s).
MARKER_APPEND_TIMEOUT_MS = 30_000
#: Backoff between rounds for the partitions whose marker could not be written yet.
RETRY_BACKOFF_S_MIN = 0.02
RETRY_BACKOFF_S_MAX = 1.0


class TransactionPeers(Protocol):
    """The transaction calls this broker makes on other brokers (``forwarding.transaction_peers``)."""

    def verify(self, node_id: int, request: AddPartitionsRequest) -> Deferred[None]:
        """Ask broker ``node_id``, the transaction's coordinator, whether the partitions are in it (KIP-890), or
        to add them (``request.verify_only`` false)."""

    def write_markers(self, node_id: int, markers: Sequence[TransactionMarker]) -> Deferred[list[MarkerOutcome]]:
        """Have broker ``node_id`` append markers to the partitions it leads."""


#: Appends one batch with acks=all as the broker (topic, partition, records, timeout_ms, markers_allowed).
MarkerAppend = Callable[..., "Deferred[None]"]
#: Tells the group coordinator of a ``__consumer_offsets`` partition that a producer's transaction ended.
TransactionEnded = Callable[[int, int, bool], None]


class MarkerAppender:
    """Appends markers to the partitions this broker leads (the WriteTxnMarkers handler's work)."""

    def __init__(
        self, *, clock: IReactorTime, append: MarkerAppend, transaction_ended: TransactionEnded,
        one_round: Callable[[], AbstractContextManager[None]] = nullcontext,
    ) -> None:
        """``one_round``: the flusher's ``one_round``, so the appends of one request share an fsync round."""
        self._clock = clock
        self._append = append
        self._transaction_ended = transaction_ended
        self._one_round = one_round
        #: Markers appended, by decision (metrics).
        self.committed = 0
        self.aborted = 0

    def write(self, markers: Sequence[TransactionMarker]) -> Deferred[list[MarkerOutcome]]:
        """Append every marker to each of its partitions; one outcome per partition."""
        with self._one_round():
            outcomes = [self._write_one(marker, topic_partition)
                        for marker in markers for topic_partition in sorted(marker.partitions)]
        return gatherResults(outcomes, consumeErrors=True)

    def _write_one(self, marker: TransactionMarker, topic_partition: TopicPartition) -> Deferred[MarkerOutcome]:
        kind = ControlType.COMMIT if marker.committed else ControlType.ABORT
        batch = encode_control_batch(kind, marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                                     int(self._clock.seconds() * 1000))
        try:
            appended = self._append(topic_partition.topic, topic_partition.partition, batch, MARKER_APPEND_TIMEOUT_MS,
                                    markers_allowed=True)
        except errors.BrokerError as error:  # refused at once: this partition's outcome, retried like a slow one
            appended = fail(error)

        def done(_: object) -> MarkerOutcome:
            if marker.committed:
                self.committed += 1
            else:
                self.aborted += 1
            if topic_partition.topic == OFFSETS_TOPIC:
                self._transaction_ended(topic_partition.partition, marker.producer_id, marker.committed)
            return MarkerOutcome(producer_id=marker.producer_id, topic_partition=topic_partition)

        def failed(failure: object) -> MarkerOutcome:
            failure.trap(errors.BrokerError)  # type: ignore[attr-defined]
            return MarkerOutcome(producer_id=marker.producer_id, topic_partition=topic_partition,
                                 error=failure.value)  # type: ignore[attr-defined]

        return appended.addCallbacks(done, failed)


class PartitionMarkers:
    """Has every partition of a transaction take its marker, retrying until it has (the coordinator's ``MarkerWriter``)."""

    def __init__(
        self, *, clock: IReactorTime, node_id: int, cluster: IClusterView, local: MarkerAppender,
        peers: Callable[[], TransactionPeers | None],
    ) -> None:
        self._clock = clock
        self._node_id = node_id
        self._cluster = cluster
        self._local = local
        self._peers = peers

    def write(self, marker: TransactionMarker) -> Deferred[None]:
        """Fire once every partition of ``marker`` has it (cancel to stop trying)."""
        return Deferred.fromCoroutine(self._write(marker))

    async def _write(self, marker: TransactionMarker) -> None:
        remaining = set(marker.partitions)
        backoff_s = RETRY_BACKOFF_S_MIN
        while remaining:
            remaining -= {tp for tp in remaining if self._gone(tp)}
            by_leader: dict[int, set[TopicPartition]] = {}
            for topic_partition in remaining:
                leader = self._leader_of(topic_partition)
                if leader >= 0:
                    by_leader.setdefault(leader, set()).add(topic_partition)
            rounds = [self._send(node_id, marker, partitions) for node_id, partitions in by_leader.items()]
            for succeeded, outcomes in await DeferredList(rounds, consumeErrors=True):
                for outcome in outcomes if succeeded else ():
                    if outcome.error is None or isinstance(outcome.error, errors.InvalidProducerEpochError):
                        remaining.discard(outcome.topic_partition)
                    elif isinstance(outcome.error, errors.TransactionCoordinatorFencedError):
                        raise outcome.error
            if remaining:
                await deferLater(self._clock, backoff_s, lambda: None)
                backoff_s = min(backoff_s * 2, RETRY_BACKOFF_S_MAX)

    def _send(self, node_id: int, marker: TransactionMarker, partitions: set[TopicPartition]) -> Deferred[list[MarkerOutcome]]:
        subset = TransactionMarker(producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                                   coordinator_epoch=marker.coordinator_epoch, committed=marker.committed,
                                   partitions=frozenset(partitions))
        if node_id == self._node_id:
            return self._local.write([subset])
        peers = self._peers()
        if peers is None:
            return Deferred.fromCoroutine(_no_peers(node_id))
        return peers.write_markers(node_id, [subset])

    def _gone(self, topic_partition: TopicPartition) -> bool:
        """The partition's topic was deleted (or shrank): no marker is owed to it."""
        record = self._cluster.topic(topic_partition.topic)
        return record is None or topic_partition.partition >= len(record.partitions)

    def _leader_of(self, topic_partition: TopicPartition) -> int:
        record = self._cluster.topic(topic_partition.topic)
        assert record is not None
        return record.partitions[topic_partition.partition].leader_id


async def _no_peers(node_id: int) -> list[MarkerOutcome]:
    raise errors.CoordinatorNotAvailableError(f"broker {node_id} cannot be reached: no inter-broker connections")
