"""The Twisted producer's transactions: the blocking producer's sequence, as Deferreds on the reactor.

``TwistedProducer`` with a ``transactional_id`` delegates here. Calls are serialized (a
``DeferredLock``), so concurrent sends add each partition once; a call meeting a coordinator that
moved, is loading, is unreachable or still finishing the previous transaction finds it again and
retries with backoff until ``max_block_ms``. The pure ``TransactionTracker`` decides what is
allowed and ``client/transaction_requests.py`` builds the requests.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from twisted.internet.defer import Deferred, DeferredLock
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater

from mqbroker import errors
from mqbroker.client.backoff import Backoff
from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.client.group_member import ConsumerGroupMetadata
from mqbroker.client.transaction_requests import FIND_AGAIN, WAIT, TransactionRequests, raise_first_partition_error
from mqbroker.client.transaction_state import ProducerTransactionState, TopicPartition, TransactionTracker
from mqbroker.client.twisted.cluster import TwistedCluster
from mqbroker.protocols.native.messages import CoordinatorType

#: The coordinator connections' roles in ``TwistedCluster``.
_TRANSACTION_ROLE = "transaction"
_GROUP_ROLE = "transaction-group"


class TwistedTransactions:
    """A ``TwistedProducer``'s transactions (see the module docstring)."""

    def __init__(
        self, *, clock: IReactorTime, cluster: TwistedCluster, requests: TransactionRequests, deadline_s: float,
        flush: Callable[[], Awaitable[Any]], take_failure: Callable[[], errors.BrokerError | None],
        set_identity: Callable[[int, int], None],
    ) -> None:
        self.tracker = TransactionTracker(requests.transactional_id)
        self._clock = clock
        self._cluster = cluster
        self._requests = requests
        self._deadline_s = deadline_s
        self._flush = flush
        self._take_failure = take_failure
        self._set_identity = set_identity
        self._lock = DeferredLock()
        self._backoff = Backoff(initial_ms=20, max_ms=500)
        self._random = random.Random()

    def _locked(self, action: Callable[[], Awaitable[Any]]) -> Deferred[Any]:
        return self._lock.run(lambda: Deferred.fromCoroutine(action()))

    async def _call(self, request: object, role: str = _TRANSACTION_ROLE, key: str | None = None,
                    key_type: CoordinatorType = CoordinatorType.TRANSACTION,
                    check: Callable[[object], None] = lambda _: None) -> Any:
        """Send to the coordinator, retrying moves and CONCURRENT_TRANSACTIONS; a failure moves the tracker."""
        deadline_s = self._clock.seconds() + self._deadline_s
        attempt = 0
        while True:
            try:
                response = await self._cluster.coordinator_request(
                    role, request, key or self._requests.transactional_id, key_type)
                check(response)
                return response
            except errors.BrokerError as error:
                if isinstance(error, BrokerUnavailableError) or error.code in FIND_AGAIN:
                    self._cluster.drop_coordinator(role)
                elif error.code not in WAIT:
                    self.tracker.failed(error)
                    raise
                attempt += 1
                delay_s = self._backoff.delay_ms(attempt, self._random) / 1000
                if self._clock.seconds() + delay_s >= deadline_s:
                    self.tracker.failed(error)
                    raise
                await deferLater(self._clock, delay_s, lambda: None)

    def init(self) -> Deferred[None]:
        """InitProducerId with the transactional id: fences older producers of it, aborts what they left open."""
        async def init() -> None:
            self.tracker.check_init()
            self._requests.initialized(await self._call(self._requests.init_producer_id()))
            self._set_identity(self._requests.producer_id, self._requests.producer_epoch)
            self.tracker.initialized()
        return self._locked(init)

    def before_send(self, topic: str, partition: int) -> Deferred[None]:
        """Refuse a send outside a transaction; add its partition to the transaction first if it is new."""
        async def add() -> None:
            self.tracker.check_send()
            new = self.tracker.to_add({(topic, partition)})
            if new:
                await self._call(self._requests.add_partitions(new), check=raise_first_partition_error)
                self.tracker.added(new)
        return self._locked(add)

    def send_offsets(self, offsets: Mapping[TopicPartition, int], group: ConsumerGroupMetadata) -> Deferred[None]:
        """AddOffsetsToTxn once per group and transaction, then TxnOffsetCommit at the group's coordinator."""
        async def send() -> None:
            self.tracker.check_offsets()
            if group.group_id not in self.tracker.groups:
                await self._call(self._requests.add_offsets(group.group_id))
                self.tracker.groups.add(group.group_id)
            await self._call(self._requests.commit_offsets(offsets, group), _GROUP_ROLE, group.group_id,
                             CoordinatorType.GROUP, raise_first_partition_error)
        return self._locked(send)

    def end(self, committed: bool) -> Deferred[None]:
        """Flush the transaction's records, then EndTxn; a commit with a failed record fails instead."""
        async def end() -> None:
            if self.tracker.state in (ProducerTransactionState.IN_TRANSACTION,
                                      ProducerTransactionState.ABORTABLE_ERROR):
                await self._flush()
                failure = self._take_failure()
                if failure is not None:
                    self.tracker.failed(failure)
                    if committed:
                        raise errors.InvalidTxnStateError(
                            f"a record of the transaction could not be written ({failure}); abort the transaction"
                            if self.tracker.state is not ProducerTransactionState.FATAL_ERROR else
                            f"the producer was fenced ({failure}); close it")
            if self.tracker.ending(committed):
                await self._call(self._requests.end(committed))
            self.tracker.ended()
        return self._locked(end)
