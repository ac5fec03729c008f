"""An EndTxn sent behind its transaction's produce requests on one connection is decided only after their data is
durable, and not at all if one of them failed: on the bare ordering, then through the native session and the broker."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from mqbroker import errors
from mqbroker.groups.coordinator import MemberIdGenerator
from mqbroker.model import ANONYMOUS, FetchPosition, FetchRequest, IsolationLevel, TopicSpec
from mqbroker.protocols.adapter import CodecProtocol
from mqbroker.protocols.native import messages as m
from mqbroker.protocols.native import txn_messages as t
from mqbroker.protocols.native.codec import ErrorResponse
from mqbroker.protocols.native.connection import ClientConnection
from mqbroker.protocols.native.server import NativeSession
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.decoder import decode_records
from mqbroker.records.header import iter_batches
from mqbroker.records.isolation import committed_batches
from mqbroker.transactions.end_after_produce import EndAfterProduce
from mqbroker.transactions.log_records import TRANSACTION_STATE_TOPIC, decode_value
from tests.fakes import BrokerRig, FakeClusterView, build_broker, fired

# -- the ordering alone -------------------------------------------------------------------------------------


def _refused(answer: str) -> bool:
    return answer == "refused"


def _ended(ordering: EndAfterProduce, after_produce: bool) -> tuple[list[str], Deferred[str]]:
    started: list[str] = []

    def start() -> Deferred[str]:
        started.append("end")
        return Deferred()

    return started, ordering.end_txn(after_produce, start)


def test_an_end_after_produce_starts_once_every_produce_ahead_of_it_is_answered() -> None:
    ordering = EndAfterProduce()
    first, second = Deferred[str](), Deferred[str]()
    ordering.produce(first, _refused)
    ordering.produce(second, _refused)
    started, _ = _ended(ordering, after_produce=True)
    first.callback("written")
    assert started == []
    second.callback("written")
    assert started == ["end"]
    assert [first.result, second.result] == ["written", "written"]  # answers pass through


def test_an_end_after_produce_is_refused_undecided_when_a_produce_ahead_failed() -> None:
    ordering = EndAfterProduce()
    answered = Deferred[str]()
    ordering.produce(answered, _refused)
    started, ended = _ended(ordering, after_produce=True)
    answered.callback("refused")
    assert started == []
    outcome: list[Any] = []
    ended.addErrback(outcome.append)
    assert outcome[0].check(errors.ConcurrentTransactionsError)
    assert _ended(ordering, after_produce=True)[0] == ["end"]  # the refusal was for that failure only


def test_a_produce_failure_answered_before_the_end_arrived_still_refuses_it() -> None:
    """The failure's answer and the EndTxn crossed on the wire: the producer sent the EndTxn not knowing."""
    ordering = EndAfterProduce()
    answered = Deferred[str]()
    ordering.produce(answered, _refused)
    answered.errback(Failure(errors.NotLeaderError("moved")))
    answered.addErrback(lambda _: None)
    started, ended = _ended(ordering, after_produce=True)
    assert started == []
    ended.addErrback(lambda failure: failure.trap(errors.ConcurrentTransactionsError))


def test_an_end_without_after_produce_starts_at_once() -> None:
    ordering = EndAfterProduce()
    ordering.produce(Deferred(), _refused)
    assert _ended(ordering, after_produce=False)[0] == ["end"]


# -- through the native session and an in-process broker -----------------------------------------------------

SETTINGS = {"offsets_topic_partitions": 1, "transaction_state_partitions": 1, "group_initial_rebalance_delay_ms": 0}


class _Client:
    """A native client codec talking to a ``NativeSession`` of an in-process broker over a ``StringTransport``."""

    def __init__(self, rig: BrokerRig) -> None:
        self.rig = rig
        self.codec = ClientConnection("test")
        self.protocol = CodecProtocol(NativeSession(rig.broker, rig.config), None)
        self.transport = StringTransport()
        self.protocol.makeConnection(self.transport)
        self.answers: dict[int, Any] = {}
        self.order: list[int] = []

    def send(self, *requests: object) -> list[int]:
        """Write ``requests`` in one read of the broker's; their correlation ids."""
        ids, frames = zip(*(self.codec.send_request(request) for request in requests))
        self.protocol.dataReceived(b"".join(frames))
        return list(ids)

    def receive(self) -> None:
        for event in self.codec.receive_data(self.transport.value()):
            self.answers[event.correlation_id] = event.response
            self.order.append(event.correlation_id)
        self.transport.clear()

    def settle(self, correlation_id: int) -> Any:
        for _ in range(200):
            self.receive()
            if correlation_id in self.answers:
                return self.answers[correlation_id]
            self.rig.engine.finish_all()
            self.rig.clock.advance(0.01)
        raise AssertionError("never answered")


def _started(tmp_path: Path) -> _Client:
    rig = build_broker(tmp_path, FakeClusterView(), settings=SETTINGS)
    fired(rig.broker.start_groups(MemberIdGenerator(random.Random(7))))
    fired(rig.broker.create_topic(ANONYMOUS, TopicSpec(name="t", partitions=2), False))
    return _Client(rig)


def _produce(identity: m.InitProducerIdResponse, partition: int, value: bytes, sequence: int = 0) -> m.ProduceRequest:
    builder = BatchBuilder(producer_id=identity.producer_id, producer_epoch=identity.producer_epoch,
                           base_sequence=sequence, is_transactional=True)
    builder.append(1_000, None, value)
    return m.ProduceRequest(acks=-1, timeout_ms=5_000, transactional_id="tx", add_to_transaction=True, topics=(
        m.ProduceTopic(name="t", partitions=(m.ProducePartition(partition_index=partition, records=builder.build()),)),))


def _commit(identity: m.InitProducerIdResponse) -> t.EndTxnRequest:
    return t.EndTxnRequest(transactional_id="tx", producer_id=identity.producer_id,
                           producer_epoch=identity.producer_epoch, committed=True, bump_epoch=True, after_produce=True)


def _committed_values(rig: BrokerRig, partition: int) -> list[bytes]:
    position = FetchPosition(topic="t", partition=partition, offset=0, max_bytes=1 << 20)
    (result,) = fired(rig.broker.fetch(ANONYMOUS, FetchRequest(positions=(position,),
                                                                isolation_level=IsolationLevel.READ_COMMITTED)))
    aborted = None if result.aborted_transactions is None else [tuple(a) for a in result.aborted_transactions]
    return [record.value for position, header in committed_batches(result.records, aborted)
            for record in decode_records(result.records[position: position + header.size_bytes])]


def _states_written(rig: BrokerRig) -> list[str]:
    """The states the coordinator wrote to ``__transaction_state``, in order (appended, durable or not)."""
    data = rig.log(TRANSACTION_STATE_TOPIC, 0).read(0, 1 << 20).records
    return [decode_value("tx", record.value).state.value for position, header in iter_batches(data)
            for record in decode_records(data[position: position + header.size_bytes]) if record.value]


def test_a_commit_sent_behind_its_produce_is_decided_only_once_the_data_is_durable(tmp_path: Path) -> None:
    """The produce of two partitions and the commit arrive in one read; fsync rounds run one at a time: the decision
    is written only after both produces were answered (acks=all: durable), and answered after them."""
    client = _started(tmp_path)
    rig = client.rig
    identity = client.settle(client.send(m.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60_000))[0])
    *produce_ids, end_id = client.send(_produce(identity, 0, b"a"), _produce(identity, 1, b"b"), _commit(identity))
    for _ in range(200):
        client.receive()
        if "PrepareCommit" in _states_written(rig):
            assert all(produce_id in client.answers for produce_id in produce_ids), "decided before the data was durable"
            assert _committed_values(rig, 0) == []  # not before its markers either
        if end_id in client.answers:
            break
        if rig.engine.rounds:
            rig.engine.finish_round()
        rig.clock.advance(0.001)
    assert isinstance(client.answers[end_id], t.EndTxnResponse)
    assert client.order.index(end_id) > max(client.order.index(produce_id) for produce_id in produce_ids)
    for _ in range(50):
        rig.engine.finish_all()
        rig.clock.advance(0.05)
    assert [_committed_values(rig, 0), _committed_values(rig, 1)] == [[b"a"], [b"b"]]


def test_a_commit_sent_behind_a_failed_produce_is_refused_and_nothing_is_decided(tmp_path: Path) -> None:
    """The records of the refused batch are not in the log: a commit now would commit the transaction without them."""
    client = _started(tmp_path)
    rig = client.rig
    identity = client.settle(client.send(m.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60_000))[0])
    client.settle(client.send(_produce(identity, 0, b"a"))[0])
    refused_id, end_id = client.send(_produce(identity, 0, b"b", sequence=7), _commit(identity))  # out of order
    answer = client.settle(end_id)
    assert client.answers[refused_id].topics[0].partitions[0].error_code == errors.ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert isinstance(answer, ErrorResponse) and answer.error_code == errors.ErrorCode.CONCURRENT_TRANSACTIONS
    assert "PrepareCommit" not in _states_written(rig)
    assert _committed_values(rig, 0) == []
    plain = t.EndTxnRequest(transactional_id="tx", producer_id=identity.producer_id,
                            producer_epoch=identity.producer_epoch, committed=False, bump_epoch=True)
    assert isinstance(client.settle(client.send(plain)[0]), t.EndTxnResponse)  # still open: it can be aborted


@pytest.mark.parametrize("version", [0, 1])
def test_an_older_end_txn_has_no_after_produce(version: int) -> None:
    assert not t.EndTxnRequest(transactional_id="tx", producer_id=1, producer_epoch=0, committed=True).after_produce
