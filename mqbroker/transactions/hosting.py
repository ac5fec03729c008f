# -*- test-case-name: tests.unit.transactions.test_hosting -*-
"""Which transactional ids this broker coordinates (tx-light): those of the ``__transaction_state`` partitions it leads.

A transactional id belongs to one partition (``transaction_state_partition``); the broker leading
that partition coordinates it, with the partition's leader epoch as its coordinator epoch (every
marker carries it; partition leaders refuse markers of an older one). When this broker becomes
a partition's leader it waits until everything in the partition's log is replicated (below the
high watermark), replays it into a fresh ``TransactionCoordinator`` (which at once has the
markers of every decided but unfinished transaction written again) and serves its ids; when the
leadership moves away the service resigns and its parked requests answer NOT_COORDINATOR.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from mqbroker import errors
from mqbroker.config import BrokerConfig
from mqbroker.groups.model import TopicPartition
from mqbroker.interfaces import IClusterView
from mqbroker.model import BrokerEndpoint, TopicSpec
from mqbroker.records.decoder import decode_records
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import iter_batches
from mqbroker.replication.leadership import LeaderPartition
from mqbroker.replication.replica_manager import ReplicaManager
from mqbroker.storage.log import PartitionLog
from mqbroker.storage.manager import LogManager
from mqbroker.transactions.coordinator import TransactionCoordinator
from mqbroker.transactions.log_records import (
    TRANSACTION_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC_CONFIGS,
    TransactionLogRecord,
    replay,
    transaction_state_partition,
)
from mqbroker.transactions.messages import TransactionConfig
from mqbroker.transactions.service import MarkerWriter, TransactionService
from mqbroker.transactions.stats import TransactionStats

#: How long a ``__transaction_state`` append waits for the in-sync replicas.
TRANSACTION_STATE_APPEND_TIMEOUT_MS = 5_000
#: Bytes read per step while replaying a partition.
_REPLAY_READ_BYTES = 4 * 1024 * 1024

#: Appends a batch with acks=all: (topic, partition, records, timeout_ms) -> fires once replicated.
ReplicatedAppend = Callable[[str, int, bytes, int], "Deferred[None]"]


def read_transaction_records(
    partition_log: PartitionLog, end_offset: int, skipped: Callable[[int, Exception], None]
) -> Iterator[TransactionLogRecord]:
    """Every record of one ``__transaction_state`` partition below ``end_offset``; a batch that does not decode
    is reported to ``skipped(offset, error)`` and skipped."""
    offset = partition_log.log_start_offset
    end = min(end_offset, partition_log.log_end_offset)
    while offset < end:
        data = partition_log.read(offset, _REPLAY_READ_BYTES).records
        if not data:
            return
        for position, header in iter_batches(data, check=False):
            if header.base_offset >= end:
                return
            offset = header.next_offset
            if header.is_control:
                continue
            try:
                records = decode_records(data[position : position + header.size_bytes])
            except CorruptRecordError as error:
                skipped(header.base_offset, error)
                continue
            for record in records:
                if record.key is not None:
                    yield TransactionLogRecord(key=record.key, value=record.value)


class TransactionHosting:
    """Runs a ``TransactionService`` for each ``__transaction_state`` partition this broker leads."""

    log = Logger()

    def __init__(
        self, *, config: BrokerConfig, clock: IReactorTime, cluster: IClusterView, logs: LogManager,
        replicas: ReplicaManager, append_replicated: ReplicatedAppend, markers: MarkerWriter,
        allocate_producer_id: Callable[[], Deferred[int]], offsets_partition_of: Callable[[str], TopicPartition],
        replication_factor: int, one_round: Callable[[], AbstractContextManager[None]] = nullcontext,
    ) -> None:
        """``replication_factor``: how many live brokers ``__transaction_state`` waits for (error messages);
        ``one_round``: the flusher's, for the services (see ``TransactionService``)."""
        self._config = config
        self._clock = clock
        self._cluster = cluster
        self._logs = logs
        self._replicas = replicas
        self._append_replicated = append_replicated
        self._markers = markers
        self._one_round = one_round
        self._allocate_producer_id = allocate_producer_id
        self._offsets_partition_of = offsets_partition_of
        self._replication_factor = replication_factor
        #: Partition -> the leader epoch it is loaded or served for; partition -> its serving service.
        self._epochs: dict[int, int] = {}
        self._services: dict[int, TransactionService] = {}
        self._partition_count: int | None = None
        #: What the services here did, kept across their leaderships (metrics).
        self.stats = TransactionStats()
        self._started = False
        self._stopped = False

    def topic_spec(self) -> TopicSpec:
        """``__transaction_state`` as configured (compacted, ``transaction_state_partitions`` partitions)."""
        return TopicSpec(name=TRANSACTION_STATE_TOPIC, partitions=self._config.transaction_state_partitions,
                         configs=dict(TRANSACTION_STATE_TOPIC_CONFIGS))

    def start(self) -> None:
        """Coordinate from now on (call ``sync_coordinators`` next)."""
        self._started = True

    # -- which partitions ------------------------------------------------------------------

    def sync_coordinators(self) -> None:
        """Coordinate exactly the partitions this broker leads, each for its current leader epoch."""
        if not self._started or self._stopped:
            return
        if self._partition_count is None:
            record = self._cluster.topic(TRANSACTION_STATE_TOPIC)
            if record is None:
                return
            self._partition_count = len(record.partitions)
        for partition in range(self._partition_count):
            leader = self._replicas.leading((TRANSACTION_STATE_TOPIC, partition))
            epoch = None if leader is None else leader.leader_epoch
            if self._epochs.get(partition) == epoch:
                continue
            self._resign(partition)
            if leader is not None:
                self._epochs[partition] = leader.leader_epoch
                self._load(partition, leader)

    def _load(self, partition: int, leader: LeaderPartition) -> None:
        """Serve the partition's ids once everything in its log is replicated (below the high watermark)."""
        end_offset = self._logs.get(TRANSACTION_STATE_TOPIC, partition).log_end_offset
        committed = leader.wait_for_high_watermark(end_offset - 1, 1, TRANSACTION_STATE_APPEND_TIMEOUT_MS)
        committed.addCallbacks(lambda _: self._serve(partition, leader), self._load_failed,
                               errbackArgs=(partition, leader))

    def _load_failed(self, failure: Any, partition: int, leader: LeaderPartition) -> None:
        failure.trap(errors.BrokerError)
        if self._coordinating(partition, leader):  # timed out while still leading: keep waiting
            self._load(partition, leader)

    def _coordinating(self, partition: int, leader: LeaderPartition) -> bool:
        return (not self._stopped and self._replicas.leading((TRANSACTION_STATE_TOPIC, partition)) is leader
                and self._epochs.get(partition) == leader.leader_epoch)

    def _serve(self, partition: int, leader: LeaderPartition) -> None:
        """Replay the partition up to its high watermark and start its coordinator."""
        if not self._coordinating(partition, leader) or partition in self._services:
            return
        partition_log = self._logs.get(TRANSACTION_STATE_TOPIC, partition)
        state = replay(read_transaction_records(partition_log, leader.high_watermark, self._skipped))
        coordinator = TransactionCoordinator(
            config=self._transaction_config(), coordinator_epoch=leader.leader_epoch,
            offsets_partition_of=self._offsets_partition_of, state=state, now_ms=int(self._clock.seconds() * 1000),
        )
        self._services[partition] = TransactionService(
            coordinator=coordinator, clock=self._clock, markers=self._markers,
            append=lambda records: self._append(partition, records),
            allocate_producer_id=self._allocate_producer_id, stats=self.stats, one_round=self._one_round,
        )
        self.log.info("coordinating the transactions of {topic}-{partition} at epoch {epoch} ({count} id(s) loaded)",
                      topic=TRANSACTION_STATE_TOPIC, partition=partition, epoch=leader.leader_epoch, count=len(state))

    def _skipped(self, offset: int, error: Exception) -> None:
        self.log.warn("skipped an unreadable {topic} batch at offset {offset}: {error}",
                      topic=TRANSACTION_STATE_TOPIC, offset=offset, error=error)

    def _transaction_config(self) -> TransactionConfig:
        return TransactionConfig(transaction_timeout_ms_max=self._config.transaction_max_timeout_ms,
                                 transactional_id_expiration_ms=self._config.transactional_id_expiration_ms)

    def _append(self, partition: int, records: bytes) -> Deferred[None]:
        appended = self._append_replicated(TRANSACTION_STATE_TOPIC, partition, records,
                                           TRANSACTION_STATE_APPEND_TIMEOUT_MS)
        return appended.addErrback(_leadership_lost_to_not_coordinator)

    def _resign(self, partition: int) -> None:
        self._epochs.pop(partition, None)
        service = self._services.pop(partition, None)
        if service is not None:
            service.resign(errors.NotCoordinatorError(
                f"{TRANSACTION_STATE_TOPIC}-{partition}: its leadership moved; find the coordinator again and retry"))

    # -- serving ---------------------------------------------------------------------------

    def partition_of(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition of an id (COORDINATOR_NOT_AVAILABLE before the topic exists)."""
        record = self._cluster.topic(TRANSACTION_STATE_TOPIC)
        if record is None:
            raise errors.CoordinatorNotAvailableError(
                f"{TRANSACTION_STATE_TOPIC} does not exist yet (it is created once {self._replication_factor} "
                "brokers are live); retry"
            )
        return transaction_state_partition(transactional_id, len(record.partitions))

    def service_for(self, transactional_id: str) -> TransactionService:
        """The service coordinating ``transactional_id`` here (NOT_COORDINATOR or LOAD_IN_PROGRESS otherwise)."""
        partition = self.partition_of(transactional_id)
        service = self._services.get(partition)
        if service is not None:
            return service
        if partition in self._epochs:
            raise errors.CoordinatorLoadInProgressError(
                f"{TRANSACTION_STATE_TOPIC}-{partition} (transactional id {transactional_id!r}) is still being "
                "loaded here; retry"
            )
        raise errors.NotCoordinatorError(
            f"this broker does not lead {TRANSACTION_STATE_TOPIC}-{partition}, which holds transactional id "
            f"{transactional_id!r}; find the coordinator again and retry there"
        )

    def services(self) -> list[TransactionService]:
        """Every serving service here."""
        return list(self._services.values())

    def open_transactions(self) -> int:
        """Transactions Ongoing or deciding at the coordinators here (a metric)."""
        return sum(service.open_count() for service in self._services.values())

    def coordinator_of(self, transactional_id: str) -> BrokerEndpoint:
        """The broker leading the id's partition (COORDINATOR_NOT_AVAILABLE if none is live)."""
        partition = self.partition_of(transactional_id)
        record = self._cluster.topic(TRANSACTION_STATE_TOPIC)
        assert record is not None
        leader_id = record.partitions[partition].leader_id
        broker = self._cluster.image.brokers.get(leader_id)
        if broker is None or broker.fenced:
            raise errors.CoordinatorNotAvailableError(
                f"{TRANSACTION_STATE_TOPIC}-{partition} (transactional id {transactional_id!r}) has no live leader "
                "right now; retry"
            )
        return BrokerEndpoint(node_id=broker.node_id, host=broker.host, port=broker.port,
                              listeners=broker.listeners)

    def stop(self) -> None:
        """Stop every service (shutdown)."""
        self._stopped = True
        for service in self._services.values():
            service.stop()


def _leadership_lost_to_not_coordinator(failure: Any) -> Any:
    """A ``__transaction_state`` append that lost its partition's leadership: this broker no longer coordinates."""
    failure.trap(errors.NotLeaderError, errors.FencedLeaderEpochError)
    raise errors.NotCoordinatorError(f"{failure.getErrorMessage()} (the transaction coordinator moved; find it again)")
