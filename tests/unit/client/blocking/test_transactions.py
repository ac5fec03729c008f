"""The blocking producer's transactions without a broker: which sends go through unchecked, and which are refused."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

import pytest

from mqbroker import errors
from mqbroker.client.backoff import Backoff
from mqbroker.client.blocking.transactions import ProducerTransactions
from mqbroker.client.producer import ADD_PARTITIONS_GATHER_MS, ProducerCore
from mqbroker.client.producer_config import ProducerConfig
from mqbroker.client.transaction_requests import TransactionRequests
from mqbroker.client.transaction_state import ProducerTransactionState
from mqbroker.protocols.native import txn_messages as t
from mqbroker.protocols.native.messages import InitProducerIdRequest, InitProducerIdResponse


class _Coordinator:
    """Answers InitProducerId and EndTxn (transaction version 2: every EndTxn bumps the epoch)."""

    def __init__(self) -> None:
        self.requests: list[object] = []
        self.epoch = 0
        self.fail_end: errors.BrokerError | None = None

    def request(self, key: str, key_type: object, request: object, check: object = None) -> object:
        self.requests.append(request)
        if isinstance(request, InitProducerIdRequest):
            return InitProducerIdResponse(producer_id=7, producer_epoch=self.epoch)
        assert isinstance(request, t.EndTxnRequest)
        if self.fail_end is not None:
            raise self.fail_end
        self.epoch += 1
        return t.EndTxnResponse(producer_id=7, producer_epoch=self.epoch)

    def version_of(self, key: str, key_type: object, api_key: object) -> int:
        return 1

    def close(self) -> None:
        pass


class _Producer:
    """What ``ProducerTransactions`` uses of the blocking ``Producer``: its lock, its core, ``flush``."""

    def __init__(self) -> None:
        config = ProducerConfig(backoff=Backoff(initial_ms=10, max_ms=100), transactional_id="tx", linger_ms=5)
        self._core = ProducerCore(config, random.Random(0))
        self._lock = threading.Lock()
        self.during_flush: Callable[[], None] = lambda: None

    def flush(self) -> int:
        self.during_flush()
        with self._lock:
            self._core.fail_pending(errors.RequestTimedOutError("no broker here"))  # nothing is pending in these tests
            self._core.failure = None
        return 0

    def send(self, transactions: ProducerTransactions, topic: str, partition: int) -> None:
        """``Producer.send``'s transaction checks around an append."""
        if (topic, partition) not in transactions.sendable:
            transactions.before_send(topic, partition)
        with self._lock:
            if (topic, partition) not in transactions.sendable:
                raise transactions.send_refused()


def _transactions() -> tuple[ProducerTransactions, _Producer, _Coordinator]:
    producer, coordinator = _Producer(), _Coordinator()
    transactions = ProducerTransactions(TransactionRequests("tx", 60_000), coordinator, producer)  # type: ignore[arg-type]
    transactions.init()
    return transactions, producer, coordinator


def test_a_partition_new_to_the_transaction_is_gated_and_then_sendable_without_the_tracker() -> None:
    transactions, producer, _ = _transactions()
    transactions.tracker.begin()
    producer.send(transactions, "events", 0)
    assert producer._core.gated == {("events", 0)} and transactions.tracker.pending == {("events", 0)}
    assert transactions.sendable == {("events", 0)}
    producer.send(transactions, "events", 1)
    assert producer._core.gated == {("events", 0), ("events", 1)}
    transactions.tracker.state = ProducerTransactionState.ABORTABLE_ERROR  # (what only ``sendable`` would miss)
    producer.send(transactions, "events", 0)  # a partition the transaction took: the fast path
    with pytest.raises(errors.InvalidTxnStateError, match="abort it"):
        producer.send(transactions, "events", 2)  # a new one asks the tracker


def test_a_committed_transaction_leaves_no_partition_sendable_for_the_next() -> None:
    transactions, producer, coordinator = _transactions()
    transactions.tracker.begin()
    producer.send(transactions, "events", 0)
    transactions.add_waiting_partitions()
    transactions.end(committed=True)
    assert transactions.sendable == set() and coordinator.epoch == 1
    with pytest.raises(errors.InvalidTxnStateError, match="begin_transaction"):
        producer.send(transactions, "events", 0)
    transactions.tracker.begin()
    producer.send(transactions, "events", 0)
    assert producer._core.gated == {("events", 0)}  # the next transaction adds it again


@pytest.mark.parametrize("committed", [True, False])
def test_a_send_racing_the_end_of_its_transaction_is_refused(committed: bool) -> None:
    transactions, producer, _ = _transactions()
    transactions.tracker.begin()
    producer.send(transactions, "events", 0)
    refused: list[BaseException] = []

    def send_from_another_thread() -> None:
        for partition in (0, 1):  # one the transaction took, one new to it
            try:
                producer.send(transactions, "events", partition)
            except errors.InvalidTxnStateError as error:
                refused.append(error)

    producer.during_flush = lambda: _run_on_thread(send_from_another_thread)
    transactions.end(committed)
    assert [str(error) for error in refused] == [
        "send() while the transaction of 'tx' is being committed or aborted (from another thread); send the record "
        "in the next transaction"] * 2
    assert transactions.tracker.state is ProducerTransactionState.READY


def test_a_send_that_checked_before_the_end_began_is_refused_at_its_append() -> None:
    transactions, producer, _ = _transactions()
    transactions.tracker.begin()
    producer.send(transactions, "events", 0)
    checked = ("events", 0) in transactions.sendable  # the send's first check passed ...
    producer.during_flush = lambda: None
    transactions.end(committed=True)  # ... then the commit began and ended on another thread
    with producer._lock:
        assert checked and ("events", 0) not in transactions.sendable
        assert "raced the commit or abort" in str(transactions.send_refused())


def test_an_end_that_failed_lets_sends_through_again_only_as_the_tracker_allows() -> None:
    transactions, producer, coordinator = _transactions()
    transactions.tracker.begin()
    producer.send(transactions, "events", 0)
    transactions.add_waiting_partitions()
    coordinator.fail_end = errors.ProducerFencedError("a newer producer has the id")
    with pytest.raises(errors.ProducerFencedError):
        transactions.end(committed=True)
    assert transactions.tracker.state is ProducerTransactionState.FATAL_ERROR and transactions.sendable == set()
    with pytest.raises(errors.InvalidTxnStateError, match="close it"):
        producer.send(transactions, "events", 0)


def test_the_gathering_of_gated_partitions_ends_at_a_time_the_driver_can_watch() -> None:
    producer = _Producer()
    core = producer._core
    core.set_producer_identity(7, 0)
    never = core.gates_open_ms
    core.gated |= {("events", 0), ("events", 1)}
    core.append("events", 0, 10, None, b"v", None, now_ms=10)
    core.append("events", 1, 12, None, b"v", None, now_ms=12)
    assert core.gates_open_ms == 10 + ADD_PARTITIONS_GATHER_MS
    assert core.gates_due(core.gates_open_ms) and not core.gates_due(core.gates_open_ms - 1)
    core.open_gates({("events", 0)})
    assert core.gates_open_ms == 12 + ADD_PARTITIONS_GATHER_MS
    core.fail_gated({("events", 1)}, errors.InvalidTxnStateError("refused"))
    assert core.gates_open_ms == never


def _run_on_thread(work: Callable[[], None]) -> None:
    thread = threading.Thread(target=work)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
