"""The transaction coordinator under random schedules: failed writes, lost writes, failovers, timeouts and
fencing never break its rules (legal transitions only, answers only after durability, markers matching
the durable decision), and once writes and markers go through every transaction finishes."""

from __future__ import annotations

import dataclasses
import random

import pytest

from mqbroker.errors import BrokerError, NotCoordinatorError
from mqbroker.groups.model import TopicPartition
from mqbroker.transactions.coordinator import TransactionCoordinator
from mqbroker.transactions.log_records import TransactionLogRecord, decode_key, decode_value, replay
from mqbroker.transactions.messages import (
    TRANSITIONS,
    AddPartitionsRequest,
    EndTxnRequest,
    InitTransactionsRequest,
    ProducerIdAndEpoch,
    TransactionConfig,
    TransactionState,
)

IDS = ("a", "b", "c")
PARTITIONS = [TopicPartition("events", number) for number in range(4)]


class Harness:
    """A coordinator, its durable log, and what the rules say must hold."""

    def __init__(self, chooser: random.Random) -> None:
        self.chooser = chooser
        self.now_ms = 0
        self.log: list[TransactionLogRecord] = []
        self.epoch = 0
        self.producers: dict[str, ProducerIdAndEpoch] = {}
        self.next_producer_id = 100
        #: Records of the write in flight per id (two when a completion and the next start share a batch).
        self.pending: dict[str, list[TransactionLogRecord]] = {}
        self.markers: dict[str, bool] = {}
        self.keys = iter(range(10**9))
        self.coordinator = self._coordinator()

    def _coordinator(self) -> TransactionCoordinator:
        return TransactionCoordinator(
            config=TransactionConfig(transaction_timeout_ms_max=5_000), coordinator_epoch=self.epoch,
            offsets_partition_of=lambda group: TopicPartition("__consumer_offsets", 0), state=replay(self.log),
            now_ms=self.now_ms,
        )

    def drain(self) -> None:
        ready = self.coordinator.ready()
        for reply in ready.replies:
            if isinstance(reply.response, ProducerIdAndEpoch):
                transactional_id = reply.request_key[1]
                durable = replay(self.log)[transactional_id]
                # Answered only once durable: the epoch it hands out is the persisted one.
                assert (durable.producer_id, durable.producer_epoch) == (
                    reply.response.producer_id, reply.response.producer_epoch)
                self.producers[transactional_id] = reply.response
        fresh: dict[str, list[TransactionLogRecord]] = {}
        for transactional_id, record in ready.writes:
            assert transactional_id not in self.pending, "two writes in flight for one id"
            fresh.setdefault(transactional_id, []).append(record)
        assert all(len(records) <= 2 for records in fresh.values()), fresh
        self.pending.update(fresh)
        for request in ready.markers:
            durable = replay(self.log)[request.transactional_id]
            assert durable.state.prepared, "markers asked for before the decision is durable"
            assert request.marker.committed is (durable.state is TransactionState.PREPARE_COMMIT)
            assert request.marker.partitions == durable.partitions
            assert request.marker.coordinator_epoch == self.epoch
            self.markers[request.transactional_id] = request.marker.committed

    def call(self, action) -> None:  # type: ignore[no-untyped-def]
        try:
            action()
        except BrokerError:
            pass
        self.drain()

    def step(self) -> None:
        chooser = self.chooser
        transactional_id = chooser.choice(IDS)
        producer = self.producers.get(transactional_id)
        pid, epoch = (producer.producer_id, producer.producer_epoch) if producer else (0, 0)
        if chooser.random() < 0.2:
            epoch -= 1  # a zombie
        action = chooser.choice(["init", "add", "end", "write", "write", "markers", "time", "failover", "fail"])
        key = (next(self.keys), transactional_id)
        if action == "init":
            fresh = None
            if self.coordinator.needs_producer_id(transactional_id):
                fresh, self.next_producer_id = self.next_producer_id, self.next_producer_id + 1
            request = InitTransactionsRequest(transactional_id=transactional_id, transaction_timeout_ms=1_000)
            self.call(lambda: self.coordinator.init_producer_id(request, key, self.now_ms, fresh))
        elif action == "add":
            partitions = frozenset(chooser.sample(PARTITIONS, chooser.randint(1, 2)))
            request = AddPartitionsRequest(transactional_id=transactional_id, producer_id=pid, producer_epoch=epoch,
                                           partitions=partitions)
            self.call(lambda: self.coordinator.add_partitions(request, key, self.now_ms))
        elif action == "end":
            request = EndTxnRequest(transactional_id=transactional_id, producer_id=pid, producer_epoch=epoch,
                                    committed=chooser.random() < 0.5, bump_epoch=chooser.random() < 0.5)
            if self.coordinator.needs_fresh_producer_id(request):
                request = dataclasses.replace(request, fresh_producer_id=self.next_producer_id)
                self.next_producer_id += 1
            self.call(lambda: self.coordinator.end_txn(request, key, self.now_ms))
        elif action in ("write", "fail") and self.pending:
            self.settle_write(chooser.choice(sorted(self.pending)), failed=action == "fail")
        elif action == "markers" and self.markers:
            self.settle_markers(chooser.choice(sorted(self.markers)))
        elif action == "time":
            self.now_ms += chooser.randint(1, 800)
            self.call(lambda: self.coordinator.tick(self.now_ms))
        elif action == "failover":
            self.failover()

    def settle_write(self, transactional_id: str, failed: bool = False) -> None:
        records = self.pending.pop(transactional_id)
        if not failed:
            for record in records:  # one batch: durable together
                self.check_transition(record)
                self.log.append(record)
        error = NotCoordinatorError("append failed") if failed else None
        self.call(lambda: self.coordinator.written(transactional_id, self.now_ms, error))

    def settle_markers(self, transactional_id: str) -> None:
        del self.markers[transactional_id]
        self.call(lambda: self.coordinator.markers_written(transactional_id, self.now_ms))

    def failover(self) -> None:
        self.pending.clear()  # writes in flight are lost with the coordinator
        self.markers.clear()
        self.epoch += 1
        self.coordinator = self._coordinator()
        self.drain()

    def check_transition(self, record: TransactionLogRecord) -> None:
        transactional_id = decode_key(record.key)
        before = replay(self.log).get(transactional_id)
        if record.value is None:
            assert before is not None and before.state.complete
            return
        after = decode_value(transactional_id, record.value)
        if before is not None:
            assert after.state in TRANSITIONS[before.state], (before.state, after.state)
            assert after.producer_epoch >= before.producer_epoch
            if after.state is not TransactionState.EMPTY:
                assert after.producer_id == before.producer_id

    def settle_everything(self) -> None:
        """Writes and markers go through and time passes: every transaction must finish."""
        for _ in range(200):
            if self.pending:
                self.settle_write(sorted(self.pending)[0])
            elif self.markers:
                self.settle_markers(sorted(self.markers)[0])
            else:
                self.now_ms += 1_000
                self.call(lambda: self.coordinator.tick(self.now_ms))
                if not self.pending and not self.markers:
                    break
        states = {m.state for m in replay(self.log).values()}
        assert not states & {TransactionState.ONGOING, TransactionState.PREPARE_COMMIT,
                             TransactionState.PREPARE_ABORT}, states


@pytest.mark.parametrize("seed", range(40))
def test_random_schedules_keep_the_rules_and_finish_every_transaction(seed: int) -> None:
    harness = Harness(random.Random(seed))
    for _ in range(300):
        harness.step()
    harness.settle_everything()


def test_a_transaction_is_open_until_its_markers_are_written_not_while_its_completion_lingers() -> None:
    coordinator = TransactionCoordinator(
        config=TransactionConfig(completion_linger_ms=10), coordinator_epoch=0,
        offsets_partition_of=lambda group: TopicPartition("__consumer_offsets", 0), now_ms=0)
    coordinator.init_producer_id(InitTransactionsRequest(transactional_id="t", transaction_timeout_ms=1_000), 1, 0, 7)
    coordinator.written("t", 0)
    coordinator.add_partitions(AddPartitionsRequest(transactional_id="t", producer_id=7, producer_epoch=0,
                                                    partitions=frozenset(PARTITIONS[:1])), 2, 0)
    coordinator.written("t", 0)
    assert coordinator.open_count() == 1
    coordinator.end_txn(EndTxnRequest(transactional_id="t", producer_id=7, producer_epoch=0, committed=True), 3, 0)
    coordinator.written("t", 0)
    assert coordinator.open_count() == 1  # decided; its markers are not written yet
    coordinator.markers_written("t", 1)
    assert coordinator.open_count() == 0 and coordinator.next_deadline_ms() == 11
    coordinator.ready()
    coordinator.tick(11)
    assert [record for _, record in coordinator.ready().writes]  # the lingering completion, written at its deadline
    assert coordinator.open_count() == 0  # while that write is in flight too (it counted as open again)
    coordinator.written("t", 11)
    assert coordinator.open_count() == 0


def _ongoing_at(epoch: int) -> TransactionCoordinator:
    """A coordinator whose id "t" (producer 7) has a transaction ongoing at ``epoch`` in PARTITIONS[0]."""
    from mqbroker.transactions.log_records import TransactionMetadata

    state = {"t": TransactionMetadata(transactional_id="t", producer_id=7, producer_epoch=epoch, timeout_ms=1_000,
                                      state=TransactionState.ONGOING, partitions=frozenset(PARTITIONS[:1]),
                                      start_ms=0, last_update_ms=0)}
    return TransactionCoordinator(config=TransactionConfig(completion_linger_ms=0), coordinator_epoch=0,
                                  offsets_partition_of=lambda group: TopicPartition("__consumer_offsets", 0),
                                  state=state, now_ms=0)


def _written_states(coordinator: TransactionCoordinator) -> list[tuple[TransactionState, int, int]]:
    return [(decode_value("t", record.value).state, decode_value("t", record.value).producer_id,
             decode_value("t", record.value).producer_epoch) for _, record in coordinator.ready().writes]


def test_version_2_end_bumps_the_epoch_of_the_decision_and_its_markers() -> None:
    coordinator = _ongoing_at(3)
    coordinator.end_txn(EndTxnRequest(transactional_id="t", producer_id=7, producer_epoch=3, committed=True,
                                      bump_epoch=True), "end", 0)
    assert _written_states(coordinator) == [(TransactionState.PREPARE_COMMIT, 7, 4)]
    coordinator.written("t", 0)
    ready = coordinator.ready()
    assert [reply.response for reply in ready.replies] == [ProducerIdAndEpoch(producer_id=7, producer_epoch=4)]
    assert [request.marker.producer_epoch for request in ready.markers] == [4]
    # The same EndTxn again, from the epoch it was sent with: the same answer once complete, nothing written.
    coordinator.end_txn(EndTxnRequest(transactional_id="t", producer_id=7, producer_epoch=3, committed=True,
                                      bump_epoch=True), "retry", 0)
    coordinator.markers_written("t", 0)
    assert _written_states(coordinator) == [(TransactionState.COMPLETE_COMMIT, 7, 4)]
    coordinator.written("t", 0)
    assert [reply.response for reply in coordinator.ready().replies] == [ProducerIdAndEpoch(producer_id=7,
                                                                                            producer_epoch=4)]
    # An abort with nothing ongoing (a write that never reached the coordinator) bumps the epoch too;
    # a commit of nothing is refused.
    with pytest.raises(BrokerError):
        coordinator.end_txn(EndTxnRequest(transactional_id="t", producer_id=7, producer_epoch=4, committed=False,
                                          bump_epoch=False), "v1", 0)
    coordinator.end_txn(EndTxnRequest(transactional_id="t", producer_id=7, producer_epoch=4, committed=False,
                                      bump_epoch=True), "abort", 0)
    assert _written_states(coordinator) == [(TransactionState.EMPTY, 7, 5)]


def test_version_2_an_exhausted_epoch_moves_to_a_fresh_producer_id_once_the_transaction_completes() -> None:
    from mqbroker.transactions.messages import PRODUCER_EPOCH_MAX

    coordinator = _ongoing_at(PRODUCER_EPOCH_MAX)
    request = EndTxnRequest(transactional_id="t", producer_id=7, producer_epoch=PRODUCER_EPOCH_MAX, committed=True,
                            bump_epoch=True)
    assert coordinator.needs_fresh_producer_id(request)
    coordinator.end_txn(dataclasses.replace(request, fresh_producer_id=99), "end", 0)
    assert _written_states(coordinator) == [(TransactionState.PREPARE_COMMIT, 7, PRODUCER_EPOCH_MAX)]
    coordinator.written("t", 0)
    ready = coordinator.ready()
    assert not ready.replies and [request.marker.producer_epoch for request in ready.markers] == [PRODUCER_EPOCH_MAX]
    coordinator.markers_written("t", 0)
    assert _written_states(coordinator) == [(TransactionState.COMPLETE_COMMIT, 7, PRODUCER_EPOCH_MAX)]
    coordinator.written("t", 0)
    assert _written_states(coordinator) == [(TransactionState.EMPTY, 99, 0)]
    assert not coordinator.ready().replies  # answered only once the new producer id is durable
    coordinator.written("t", 0)
    assert [reply.response for reply in coordinator.ready().replies] == [ProducerIdAndEpoch(producer_id=99,
                                                                                            producer_epoch=0)]
