"""The blocking producer's transaction calls: to the transactional id's coordinator and the group's coordinator.

Each call runs on the application's thread over its own connections (the producer's I/O thread
keeps its sockets to the partition leaders). A call meeting a coordinator that moved, is
loading, is unreachable or is still finishing the previous transaction (CONCURRENT_TRANSACTIONS)
finds the coordinator again and retries, with backoff, until ``max_block_ms``; other errors are
raised typed. The pure ``TransactionTracker`` decides what is allowed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping

from mqbroker import errors
from mqbroker.client.backoff import Backoff
from mqbroker.client.blocking.group import coordinator_connection
from mqbroker.client.connection import BlockingConnection, BrokerUnavailableError
from mqbroker.client.group_member import COORDINATOR_MOVED, ConsumerGroupMetadata
from mqbroker.client.security import ClientSecurity
from mqbroker.client.transaction_state import TopicPartition
from mqbroker.protocols.native import txn_messages as t
from mqbroker.protocols.native.messages import CoordinatorType, InitProducerIdRequest, InitProducerIdResponse

#: Retried after a new look-up of the coordinator (it moved or is not ready).
_FIND_AGAIN = COORDINATOR_MOVED
#: Retried on the same coordinator: it is still writing the previous transaction's markers.
_WAIT = frozenset({errors.ErrorCode.CONCURRENT_TRANSACTIONS})


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, tuple[int, ...]]:
    grouped: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        grouped.setdefault(topic, []).append(partition)
    return {topic: tuple(numbers) for topic, numbers in grouped.items()}


def _raise_first_partition_error(response: object) -> None:
    """Raise the typed error of the first refused partition of an AddPartitionsToTxn or TxnOffsetCommit answer."""
    topics = response.results if isinstance(response, t.AddPartitionsToTxnResponse) else response.topics  # type: ignore[attr-defined]
    for topic in topics:
        for result in topic.partitions:
            if result.error_code:
                raise errors.error_for_code(result.error_code, result.error_message
                                            or f"{topic.name}-{result.partition_index} was refused")


class CoordinatorCalls:
    """Sends requests to the coordinator of a key (transactional id or group), finding it again as it moves."""

    def __init__(
        self, *, bootstrap: list[tuple[str, int]], client_id: str, timeout_s: float, deadline_s: float,
        security: ClientSecurity | None,
    ) -> None:
        self._bootstrap = bootstrap
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._deadline_s = deadline_s
        self._security = security
        self._connections: dict[tuple[str, int], BlockingConnection] = {}
        self._backoff = Backoff(initial_ms=20, max_ms=500)
        self._random = random.Random()

    def request(
        self, key: str, key_type: CoordinatorType, request: object, check: Callable[[object], None] = lambda _: None
    ) -> object:
        """Send ``request`` to the coordinator of ``key``; retry what is retriable until the deadline."""
        deadline = time.monotonic() + self._deadline_s
        attempt = 0
        while True:
            try:
                response = self._connection(key, key_type).request(request, self._timeout_s)
                check(response)
                return response
            except errors.BrokerError as error:
                moved = isinstance(error, (BrokerUnavailableError, errors.RequestTimedOutError)) or (
                    error.code in _FIND_AGAIN)
                if moved:
                    self._drop(key, key_type)
                elif error.code not in _WAIT:
                    raise
                attempt += 1
                delay_s = self._backoff.delay_ms(attempt, self._random) / 1000
                if time.monotonic() + delay_s >= deadline:
                    raise
                time.sleep(delay_s)

    def _connection(self, key: str, key_type: CoordinatorType) -> BlockingConnection:
        connection = self._connections.get((key, key_type))
        if connection is None:
            connection = coordinator_connection(self._bootstrap, key, self._client_id, self._timeout_s,
                                                self._security, key_type)
            self._connections[key, key_type] = connection
        return connection

    def _drop(self, key: str, key_type: CoordinatorType) -> None:
        connection = self._connections.pop((key, key_type), None)
        if connection is not None:
            connection.close()

    def close(self) -> None:
        """Close every coordinator connection."""
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()


class BlockingTransactions:
    """The transaction requests of one transactional producer (``Producer`` calls these)."""

    def __init__(self, calls: CoordinatorCalls, transactional_id: str, transaction_timeout_ms: int) -> None:
        self._calls = calls
        self.transactional_id = transactional_id
        self._transaction_timeout_ms = transaction_timeout_ms
        self.producer_id = -1
        self.producer_epoch = -1

    def _to_coordinator(self, request: object, check: Callable[[object], None] = lambda _: None) -> object:
        return self._calls.request(self.transactional_id, CoordinatorType.TRANSACTION, request, check)

    def init_producer_id(self) -> tuple[int, int]:
        """Fence earlier incarnations; the id's producer id and new epoch."""
        response = self._to_coordinator(InitProducerIdRequest(
            transactional_id=self.transactional_id, transaction_timeout_ms=self._transaction_timeout_ms))
        assert isinstance(response, InitProducerIdResponse)
        self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
        return self.producer_id, self.producer_epoch

    def add_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        """Have the coordinator list ``partitions`` in the ongoing transaction."""
        self._to_coordinator(t.AddPartitionsToTxnRequest(
            transactional_id=self.transactional_id, producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            topics=tuple(t.AddPartitionsToTxnTopic(name=name, partitions=numbers)
                         for name, numbers in _by_topic(partitions).items())), _raise_first_partition_error)

    def add_offsets(self, group_id: str) -> None:
        """Have the coordinator include the group's offsets partition in the transaction."""
        self._to_coordinator(t.AddOffsetsToTxnRequest(
            transactional_id=self.transactional_id, producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            group_id=group_id))

    def commit_offsets(self, offsets: Mapping[TopicPartition, int], group: ConsumerGroupMetadata) -> None:
        """Commit ``offsets`` for the group inside the transaction (at the group's coordinator)."""
        request = t.TxnOffsetCommitRequest(
            transactional_id=self.transactional_id, group_id=group.group_id, producer_id=self.producer_id,
            producer_epoch=self.producer_epoch, generation_id=group.generation_id, member_id=group.member_id,
            group_instance_id=group.group_instance_id,
            topics=tuple(t.TxnOffsetCommitRequestTopic(name=name, partitions=tuple(
                t.TxnOffsetCommitRequestPartition(partition_index=number, committed_offset=offsets[name, number])
                for number in numbers)) for name, numbers in _by_topic(offsets).items()))
        self._calls.request(group.group_id, CoordinatorType.GROUP, request, _raise_first_partition_error)

    def end(self, committed: bool) -> None:
        """Commit or abort; returns once the coordinator made the decision durable."""
        self._to_coordinator(t.EndTxnRequest(
            transactional_id=self.transactional_id, producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            committed=committed))
