"""The blocking producer's transaction calls: to the transactional id's coordinator and the group's coordinator.

The calls run on their own connections (the producer's I/O thread keeps its sockets to the
partition leaders), on the application's thread, or the I/O thread's for AddPartitionsToTxn. A call meeting a coordinator that moved, is
loading, is unreachable or is still finishing the previous transaction (CONCURRENT_TRANSACTIONS)
finds the coordinator again and retries, with backoff, until ``max_block_ms``; other errors are
raised typed. ``client/transaction_requests.py`` builds the requests; the pure
``TransactionTracker`` decides what is allowed.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from mqbroker import errors
from mqbroker.client.backoff import Backoff
from mqbroker.client.blocking.group import coordinator_connection
from mqbroker.client.connection import BlockingConnection, BrokerUnavailableError
from mqbroker.client.security import ClientSecurity
from mqbroker.client.group_member import ConsumerGroupMetadata
from mqbroker.client.producer_batch import ProducerBatch
from mqbroker.client.transaction_requests import FIND_AGAIN, WAIT, TransactionRequests, raise_first_partition_error
from mqbroker.client.transaction_state import ProducerTransactionState, TopicPartition, TransactionTracker
from mqbroker.protocols.native.messages import ApiKey, CoordinatorType

if TYPE_CHECKING:
    from mqbroker.client.blocking.producer import Producer


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
        #: The application's and the I/O thread's calls share the connections: one at a time.
        self._one_at_a_time = threading.Lock()

    def request(
        self, key: str, key_type: CoordinatorType, request: object, check: Callable[[object], None] = lambda _: None
    ) -> object:
        """Send ``request`` to the coordinator of ``key``; retry what is retriable until the deadline."""
        with self._one_at_a_time:
            return self._request(key, key_type, request, check)

    def version_of(self, key: str, key_type: CoordinatorType, api_key: ApiKey) -> int | None:
        """The version the coordinator of ``key`` is sent ``api_key`` at (None: it speaks none this client does)."""
        with self._one_at_a_time:
            return self._connection(key, key_type).codec.version_of(api_key)

    def _request(self, key: str, key_type: CoordinatorType, request: object, check: Callable[[object], None]) -> object:
        deadline = time.monotonic() + self._deadline_s
        attempt = 0
        while True:
            try:
                response = self._connection(key, key_type).request(request, self._timeout_s)
                check(response)
                return response
            except errors.BrokerError as error:
                if isinstance(error, BrokerUnavailableError) or error.code in FIND_AGAIN:
                    self._drop(key, key_type)
                elif error.code not in WAIT:
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
        with self._one_at_a_time:
            for connection in self._connections.values():
                connection.close()
            self._connections.clear()


class ProducerTransactions:
    """A transactional ``Producer``'s side of its transactions: the tracker's checks, then the coordinator calls.

    ``send`` only marks a new partition as waiting (its batches are held: ``core.gated``); the I/O
    thread adds every waiting partition in one AddPartitionsToTxn before it sends their batches
    (``add_waiting_partitions``), as Kafka's sender does; in transaction version 2 it sends them at
    once and the partition leaders add the partitions. ``_state`` guards the tracker (never held
    across a request or a flush); ``_calls_in_order`` serializes the application's own calls.

    A partition the open transaction already took is in ``sendable``: ``send`` checks only that (a set
    lookup, no lock of its own per record) and appends while it holds the producer's lock. ``end``
    empties it under that lock before it flushes, and so does a failure that leaves the transaction
    unable to take records: a record is either appended before that (and flushed by ``end``) or refused.
    """

    def __init__(self, requests: TransactionRequests, calls: CoordinatorCalls, producer: Producer) -> None:
        self.tracker = TransactionTracker(requests.transactional_id)
        self._requests = requests
        self._calls = calls
        self._producer = producer
        self._state = threading.Lock()
        self._calls_in_order = threading.Lock()
        #: The partitions ``send`` may append to without asking the tracker (read by ``send`` under the
        #: producer's lock; replaced under ``_state`` and the producer's lock).
        self.sendable: set[TopicPartition] = set()
        #: ``end`` is flushing or ending the transaction: sends are refused (Kafka's committing and aborting
        #: states; the tracker moves only once the records are flushed). Guarded by ``_state``.
        self._ending = False

    def _call(self, request: object, key: str | None = None, key_type: CoordinatorType = CoordinatorType.TRANSACTION,
              check: Callable[[object], None] = lambda _: None) -> object:
        """Send to the coordinator (of the transactional id, or of ``key``); a failure moves the tracker (fatal
        when fenced) and is raised."""
        try:
            return self._calls.request(key or self._requests.transactional_id, key_type, request, check)
        except errors.BrokerError as error:
            with self._state:
                self._failed(error)
            raise

    def _failed(self, error: errors.BrokerError) -> None:
        """Move the tracker after a failure (call under ``_state``): a transaction that can no longer take records
        takes none through ``sendable`` either."""
        self.tracker.failed(error)
        if self.tracker.state is not ProducerTransactionState.IN_TRANSACTION:
            self._refuse_sends()

    def _refuse_sends(self) -> None:
        """Empty ``sendable`` (call under ``_state``): every send asks the tracker again."""
        with self._producer._lock:
            self.sendable = set()

    def init(self) -> None:
        """InitProducerId with the transactional id; the producer's batches take the id and epoch. A coordinator
        speaking EndTxn version 1 serves transaction version 2 (partitions added by the produce, epoch bumps)."""
        with self._calls_in_order:
            with self._state:
                self.tracker.check_init()
            requests = self._requests
            requests.initialized(self._call(requests.init_producer_id()))
            end_version = self._calls.version_of(requests.transactional_id, CoordinatorType.TRANSACTION,
                                                 ApiKey.END_TXN)
            requests.transaction_version = 2 if end_version is not None and end_version >= 1 else 1
            producer = self._producer
            with producer._lock:
                producer._core.set_producer_identity(requests.producer_id, requests.producer_epoch)
                producer._core.adds_to_transaction = requests.transaction_version >= 2
            with self._state:
                self.tracker.initialized()

    def before_send(self, topic: str, partition: int) -> None:
        """(A send to a partition not in ``sendable``.) Refuse a send outside an open transaction; take the
        partition into ``sendable``: one new to the transaction waits to be added."""
        with self._state:
            if self._ending:
                raise errors.InvalidTxnStateError(
                    f"send() while the transaction of {self.tracker.transactional_id!r} is being committed or "
                    "aborted (from another thread); send the record in the next transaction")
            self.tracker.check_send()
            key = (topic, partition)
            new = self.tracker.to_add({key})
            if new:
                self.tracker.adding(new)
            with self._producer._lock:
                self._producer._core.gated |= new
                self.sendable.add(key)

    def send_refused(self) -> errors.InvalidTxnStateError:
        """The error of a send whose transaction began to end between ``before_send`` and its append."""
        return errors.InvalidTxnStateError(
            f"send() raced the commit or abort of the transaction of {self.tracker.transactional_id!r} (from "
            "another thread) and was not sent; send the record in the next transaction")

    def add_waiting_partitions(self) -> list[ProducerBatch]:
        """(The I/O thread.) One AddPartitionsToTxn for every waiting partition, then let their batches go; if it
        is refused, fail those batches (the transaction must be aborted) and return them. In transaction
        version 2 their first batches add them at the partition leaders: they go at once, no request."""
        with self._state:
            waiting = set(self.tracker.pending)
        if not waiting:
            return []
        core = self._producer._core
        try:
            if self._requests.transaction_version < 2:
                self._calls.request(self._requests.transactional_id, CoordinatorType.TRANSACTION,
                                    self._requests.add_partitions(waiting), raise_first_partition_error)
        except errors.BrokerError as error:
            with self._state:
                self.tracker.add_failed(waiting, error)
                self._refuse_sends()
            with self._producer._lock:
                return core.fail_gated(waiting, error)
        with self._state:
            self.tracker.added(waiting)
        with self._producer._lock:
            core.open_gates(waiting)
        return []

    def send_offsets(self, offsets: Mapping[TopicPartition, int], group: ConsumerGroupMetadata) -> None:
        """AddOffsetsToTxn once per group and transaction, then TxnOffsetCommit at the group's coordinator."""
        with self._calls_in_order:
            with self._state:
                self.tracker.check_offsets()
                new_group = group.group_id not in self.tracker.groups
            if new_group:
                self._call(self._requests.add_offsets(group.group_id))
                with self._state:
                    self.tracker.groups.add(group.group_id)
            self._call(self._requests.commit_offsets(offsets, group), group.group_id, CoordinatorType.GROUP,
                       raise_first_partition_error)

    def end(self, committed: bool) -> None:
        """Flush the transaction's records, then EndTxn; a commit with a failed record raises instead. Sends from
        other threads are refused from here on."""
        with self._calls_in_order:
            with self._state:
                open_transaction = self.tracker.state in (ProducerTransactionState.IN_TRANSACTION,
                                                          ProducerTransactionState.ABORTABLE_ERROR)
                self._ending = True
                self._refuse_sends()  # the records appended until now are flushed below
            try:
                self._end(committed, open_transaction)
            finally:
                with self._state:
                    self._ending = False

    def _end(self, committed: bool, open_transaction: bool) -> None:
        producer = self._producer
        if open_transaction:
            producer.flush()  # the I/O thread adds the waiting partitions meanwhile
            with producer._lock:
                failure, producer._core.failure = producer._core.failure, None
            if failure is not None:
                with self._state:
                    self._failed(failure)
                    fatal = self.tracker.state is ProducerTransactionState.FATAL_ERROR
                if committed:
                    raise errors.InvalidTxnStateError(
                        f"the producer was fenced ({failure}); close it" if fatal else
                        f"a record of the transaction could not be written ({failure}); abort the transaction"
                    ) from failure
        with self._state:
            needs_call = self.tracker.ending(committed)
        if needs_call:
            answer = self._call(self._requests.end(committed))
            if self._requests.ended(answer):  # version 2: the next transaction starts at the next epoch
                with producer._lock:
                    producer._core.set_producer_identity(self._requests.producer_id, self._requests.producer_epoch)
        with self._state:
            self.tracker.ended()

    def close(self) -> None:
        """Close the coordinator connections."""
        self._calls.close()
