# -*- test-case-name: tests.unit.core.test_transactions -*-
"""The transaction calls of ``IBroker`` (tx-light): authorized here, answered by the id's coordinator or the partition leader.

Permissions follow Kafka: WRITE on the transactional id to use it (and to produce with it), READ
on the group and its topics for offsets, DESCRIBE on the id to see it, the cluster's own
principals (ALTER on the cluster) for WriteTxnMarkers. A transactional produce is verified
before its transaction's first batch goes into a partition (KIP-890 part 1): the leader takes a
verification guard from the log, asks the coordinator (here, or over ``TransactionPeers``) whether
the partition belongs to the producer's ongoing transaction, and appends only with that guard;
a marker in between voids it. One producer's produces to one partition wait behind its
verification, so they keep their order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from twisted.internet.defer import Deferred, DeferredLock, fail, gatherResults, succeed
from twisted.python.failure import Failure

from mqbroker import errors
from mqbroker.core.guards import broker_error, errors_as_failures, require_permission
from mqbroker.core.produce import ProduceService
from mqbroker.core.txn_markers import MarkerAppender, TransactionPeers
from mqbroker.groups.hosting import GroupHosting
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.service import OFFSETS_TOPIC
from mqbroker.interfaces import IAuthorizer
from mqbroker.model import (
    BrokerEndpoint,
    Operation,
    Principal,
    ProduceResult,
    ProducerIdentity,
    ResourceType,
)
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import TRANSACTIONAL_MASK, read_header
from mqbroker.replication.replica_manager import ReplicaManager
from mqbroker.storage.manager import LogManager
from mqbroker.transactions.hosting import TransactionHosting
from mqbroker.transactions.messages import (
    AddOffsetsRequest,
    AddPartitionsRequest,
    EndTxnRequest,
    InitTransactionsRequest,
    MarkerOutcome,
    ProducerIdAndEpoch,
    TransactionDescription,
    TransactionListing,
    TransactionMarker,
    TransactionState,
    TxnOffsetCommitRequest,
)
from mqbroker.transactions.stats import TransactionMetrics

#: How long a transactional offset commit waits for the in-sync replicas.
TXN_OFFSET_COMMIT_TIMEOUT_MS = 5_000
#: A producer's default transaction timeout when InitProducerId does not give one (Kafka's transaction.timeout.ms).
TRANSACTION_TIMEOUT_MS_DEFAULT = 60_000
#: The byte of a batch that holds the low bits of its attributes, the transactional bit among them (Kafka's
#: RecordBatch v2: attributes are the big-endian int16 at bytes 21-22).
_ATTRIBUTES_LOW_BYTE = 22


class TransactionRequests:
    """Checks each transaction call's permission, then hands it to the coordinator or the partition's log."""

    def __init__(
        self, *, node_id: int, authorizer: IAuthorizer, hosting: TransactionHosting, groups: GroupHosting,
        replicas: ReplicaManager, produce: ProduceService, markers: MarkerAppender,
        peers: Callable[[], TransactionPeers | None], logs: LogManager,
    ) -> None:
        self._node_id = node_id
        self._logs = logs
        self._authorizer = authorizer
        self._hosting = hosting
        self._groups = groups
        self._replicas = replicas
        self._produce = produce
        self._markers = markers
        self._peers = peers
        #: (topic, partition, producer id) -> the lock its produces take while its transaction is verified there.
        self._verifying: dict[tuple[str, int, int], DeferredLock] = {}

    def _require(self, principal: Principal, operation: Operation, transactional_id: str) -> None:
        require_permission(self._authorizer, principal, operation, ResourceType.TRANSACTIONAL_ID, transactional_id)

    # -- the coordinator's calls -----------------------------------------------------------

    @errors_as_failures
    def find_coordinator(self, principal: Principal, transactional_id: str) -> Deferred[BrokerEndpoint]:
        """The broker coordinating ``transactional_id``; see ``IBroker.find_transaction_coordinator``."""
        self._require(principal, Operation.DESCRIBE, transactional_id)
        return succeed(self._hosting.coordinator_of(transactional_id))

    @errors_as_failures
    def init_producer_id(
        self, principal: Principal, transactional_id: str, transaction_timeout_ms: int
    ) -> Deferred[ProducerIdentity]:
        """The id's producer id and a new epoch; see ``IBroker.init_producer_id``."""
        self._require(principal, Operation.WRITE, transactional_id)
        timeout_ms = transaction_timeout_ms if transaction_timeout_ms > 0 else TRANSACTION_TIMEOUT_MS_DEFAULT
        request = InitTransactionsRequest(transactional_id=transactional_id, transaction_timeout_ms=timeout_ms)
        initialized = self._hosting.service_for(transactional_id).init_producer_id(request)
        return initialized.addCallback(
            lambda answer: ProducerIdentity(producer_id=answer.producer_id, producer_epoch=answer.producer_epoch))

    @errors_as_failures
    def add_partitions(self, principal: Principal, request: AddPartitionsRequest) -> Deferred[None]:
        """Add partitions to (or verify them in) the ongoing transaction; see ``IBroker.add_partitions_to_txn``."""
        if request.verify_only:
            require_permission(self._authorizer, principal, Operation.ALTER, ResourceType.CLUSTER, "kafka-cluster")
        else:
            self._require(principal, Operation.WRITE, request.transactional_id)
            for topic in sorted({tp.topic for tp in request.partitions}):
                require_permission(self._authorizer, principal, Operation.WRITE, ResourceType.TOPIC, topic)
        return self._hosting.service_for(request.transactional_id).add_partitions(request)

    @errors_as_failures
    def add_offsets(self, principal: Principal, request: AddOffsetsRequest) -> Deferred[None]:
        """Add a group's offsets partition to the transaction; see ``IBroker.add_offsets_to_txn``."""
        self._require(principal, Operation.WRITE, request.transactional_id)
        require_permission(self._authorizer, principal, Operation.READ, ResourceType.GROUP, request.group_id)
        return self._hosting.service_for(request.transactional_id).add_offsets(request)

    @errors_as_failures
    def end_txn(self, principal: Principal, request: EndTxnRequest) -> Deferred[ProducerIdAndEpoch | None]:
        """Commit or abort; see ``IBroker.end_txn``."""
        self._require(principal, Operation.WRITE, request.transactional_id)
        return self._hosting.service_for(request.transactional_id).end_txn(request)

    @errors_as_failures
    def describe(self, principal: Principal, transactional_ids: Sequence[str]) -> Deferred[list[object]]:
        """A description or the typed error per id; see ``IBroker.describe_transactions``."""
        answers: list[Deferred[object]] = []
        for transactional_id in transactional_ids:
            try:
                self._require(principal, Operation.DESCRIBE, transactional_id)
                described = self._hosting.service_for(transactional_id).describe(transactional_id)
                partition = self._hosting.partition_of(transactional_id)
                described.addCallback(_with_partition, partition)
            except errors.BrokerError as error:
                described = succeed(error)
            answers.append(described.addErrback(_error_as_value))
        return gatherResults(answers, consumeErrors=True)

    @errors_as_failures
    def list_transactions(
        self, principal: Principal, states: frozenset[TransactionState], producer_ids: frozenset[int]
    ) -> Deferred[list[TransactionListing]]:
        """The ids coordinated here that the principal may describe; see ``IBroker.list_transactions``."""
        listed = [listing for service in self._hosting.services()
                  for listing in service.list_transactions(states, producer_ids)
                  if self._authorizer.authorize(principal, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                                listing.transactional_id)]
        return succeed(sorted(listed, key=lambda listing: listing.transactional_id))

    def metrics(self) -> TransactionMetrics:
        """Decisions, commit latencies and open transactions of the coordinators here; the LSO lag of the
        partitions led here (scrape time: one look per partition, none per record)."""
        stable_lag = {}
        for topic, partition in self._logs.partitions():
            if self._replicas.leading((topic, partition)) is None:
                continue
            partition_log = self._logs.get(topic, partition)
            high_watermark = self._replicas.high_watermark(partition_log)
            lag = high_watermark - partition_log.last_stable_offset(high_watermark)
            if lag > 0:
                stable_lag[topic, partition] = lag
        return TransactionMetrics(stats=self._hosting.stats, open_transactions=self._hosting.open_transactions(),
                                  stable_lag=stable_lag)

    # -- the partition leader's calls ------------------------------------------------------

    @errors_as_failures
    def write_markers(self, principal: Principal, markers: Sequence[TransactionMarker]) -> Deferred[list[MarkerOutcome]]:
        """Append a coordinator's markers here; see ``IBroker.write_txn_markers``."""
        require_permission(self._authorizer, principal, Operation.ALTER, ResourceType.CLUSTER, "kafka-cluster")
        return self._markers.write(markers)

    def produce(
        self, principal: Principal, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int,
        transactional_id: str | None, front_end_batches: bool = False, add_to_transaction: bool = False,
    ) -> Deferred[ProduceResult]:
        """A produce: straight to the log unless its batches open a transaction there, which is verified (or,
        ``add_to_transaction``, added) first (``front_end_batches``: see ``IBroker.produce``)."""
        if len(records) <= _ATTRIBUTES_LOW_BYTE or not records[_ATTRIBUTES_LOW_BYTE] & TRANSACTIONAL_MASK:
            # nearly every produce: one byte says so, without decoding the header (the log decodes it once)
            return self._produce.produce(principal, topic, partition, records, acks, timeout_ms,
                                         front_end_batches=front_end_batches)
        try:
            header = read_header(records, require_whole=False)
        except CorruptRecordError:
            header = None  # the log refuses it with the precise error
        if header is None or not header.is_transactional:
            return self._produce.produce(principal, topic, partition, records, acks, timeout_ms,
                                         front_end_batches=front_end_batches)
        return self._verified(topic, partition, header.producer_id, header.producer_epoch, transactional_id,
                              principal, lambda guard: self._produce.produce(principal, topic, partition, records, acks,
                                                                             timeout_ms, verification_guard=guard),
                              add_to_transaction)

    @errors_as_failures
    def _verified(
        self, topic: str, partition: int, producer_id: int, producer_epoch: int, transactional_id: str | None,
        principal: Principal, append: Callable[[object | None], Deferred[object]], add: bool = False,
    ) -> Deferred[object]:
        """``append(guard)`` once the coordinator confirmed the partition is in the producer's transaction.

        While a verification of this producer and partition is in flight, its later produces wait
        behind it (a lock per key, dropped when idle), so their batches keep their order. With
        ``add`` (transaction version 2) the coordinator first adds the partition; it answers once the
        producer's previous transaction is complete, so its marker (which voids a guard) is in the
        log before the guard of the verification that follows is taken. A batch of a newer epoch
        than the transaction open here opens a new one, so it is verified too.
        """
        if transactional_id is None:
            raise errors.InvalidRecordError(
                f"a transactional batch for {topic}-{partition} came without its transactional id")
        self._require(principal, Operation.WRITE, transactional_id)
        partition_log, _ = self._replicas.leader(topic, partition)
        key = (topic, partition, producer_id)
        lock = self._verifying.get(key)
        if lock is None:
            if not partition_log.needs_verification(producer_id, producer_epoch):
                return append(None)  # the transaction is open here: nothing to verify
            lock = self._verifying[key] = DeferredLock()
        request = AddPartitionsRequest(transactional_id=transactional_id, producer_id=producer_id,
                                       producer_epoch=producer_epoch,
                                       partitions=frozenset({TopicPartition(topic, partition)}), verify_only=True)

        def verify_then_append(_: object = None) -> Deferred[list[Deferred[object]]]:
            if not partition_log.needs_verification(producer_id, producer_epoch):
                return succeed([append(None)])  # an earlier produce opened it
            guard = partition_log.start_verification(producer_id)
            # The append's own wait (acks) is boxed: the next produce may go once this one is appended.
            return self._verify(request).addCallback(lambda _: [append(guard)])

        def add_then_append() -> Deferred[list[Deferred[object]]]:
            if not partition_log.needs_verification(producer_id, producer_epoch):
                return succeed([append(None)])
            return self._verify(replace(request, verify_only=False)).addCallback(verify_then_append)

        def release_if_idle(result: object) -> object:
            if not lock.locked and not lock.waiting and self._verifying.get(key) is lock:
                del self._verifying[key]
            return result

        appended = lock.run(add_then_append if add else verify_then_append).addBoth(release_if_idle)
        return appended.addCallback(lambda box: box[0])

    def _verify(self, request: AddPartitionsRequest) -> Deferred[None]:
        """Ask the transactional id's coordinator, here or on its broker."""
        try:
            coordinator = self._hosting.coordinator_of(request.transactional_id)
            if coordinator.node_id == self._node_id:
                return self._hosting.service_for(request.transactional_id).add_partitions(request)
        except errors.BrokerError as error:
            return _failed(error)
        peers = self._peers()
        if peers is None:
            return _failed(errors.CoordinatorNotAvailableError(
                f"the coordinator of {request.transactional_id!r} is broker {coordinator.node_id}, which cannot be "
                "reached from here"))
        return peers.verify(coordinator.node_id, request)

    # -- offsets inside a transaction ------------------------------------------------------

    @errors_as_failures
    def txn_commit_offsets(self, principal: Principal, request: TxnOffsetCommitRequest) -> Deferred[None]:
        """Offsets visible once the transaction commits; see ``IBroker.txn_commit_offsets``."""
        offsets = request.offsets
        self._require(principal, Operation.WRITE, request.transactional_id)
        require_permission(self._authorizer, principal, Operation.READ, ResourceType.GROUP, offsets.group_id)
        for commit in offsets.offsets:
            require_permission(self._authorizer, principal, Operation.READ, ResourceType.TOPIC,
                               commit.topic_partition.topic)
        service = self._groups.service_for(offsets.group_id)
        records = service.txn_offset_records(offsets)
        if not records:
            return succeed(None)
        builder = BatchBuilder(producer_id=request.producer_id, producer_epoch=request.producer_epoch,
                               is_transactional=True)
        now_ms = service.now_ms()
        for record in records:
            builder.append(now_ms, record.key, record.value)
        batch = builder.build()
        partition = self._groups.partition_of(offsets.group_id)
        written = self._verified(
            OFFSETS_TOPIC, partition, request.producer_id, request.producer_epoch, request.transactional_id,
            principal, lambda guard: self._produce.append_replicated(
                OFFSETS_TOPIC, partition, batch, TXN_OFFSET_COMMIT_TIMEOUT_MS, verification_guard=guard),
            request.add_to_transaction)
        written.addCallback(lambda _: service.txn_offsets_written(request.producer_id, records))
        return written


def _with_partition(described: TransactionDescription, partition: int) -> TransactionDescription:
    return replace(described, coordinator_partition=partition)


def _error_as_value(failure: Failure) -> errors.BrokerError:
    failure.trap(errors.BrokerError)
    return failure.value  # type: ignore[no-any-return]


def _failed(error: Exception) -> Deferred[None]:
    return fail(broker_error(error))
