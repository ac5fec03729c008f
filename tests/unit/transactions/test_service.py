"""The coordinator service inside the broker: additions asked in one reactor turn share one write."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock

from mqbroker import errors
from mqbroker.groups.model import TopicPartition
from mqbroker.transactions.coordinator import TransactionCoordinator
from mqbroker.transactions.messages import (
    AddPartitionsRequest,
    InitTransactionsRequest,
    ProducerIdAndEpoch,
    TransactionConfig,
    TransactionMarker,
)
from mqbroker.transactions.service import TransactionService


class _Markers:
    def write(self, marker: TransactionMarker) -> Deferred[None]:
        return succeed(None)


def _service() -> tuple[TransactionService, Clock, list[Deferred[Any]]]:
    """A service whose ``__transaction_state`` appends wait until the test fires them."""
    clock = Clock()
    appends: list[Deferred[Any]] = []

    def append(batch: bytes) -> Deferred[Any]:
        appends.append(Deferred())
        return appends[-1]

    coordinator = TransactionCoordinator(config=TransactionConfig(), coordinator_epoch=0,
                                         offsets_partition_of=lambda group: TopicPartition("__consumer_offsets", 0),
                                         now_ms=0)
    service = TransactionService(coordinator=coordinator, clock=clock, append=append, markers=_Markers(),
                                 allocate_producer_id=lambda: succeed(7))
    return service, clock, appends


def _initialized(service: TransactionService, appends: list[Deferred[Any]]) -> ProducerIdAndEpoch:
    answers: list[ProducerIdAndEpoch] = []
    service.init_producer_id(InitTransactionsRequest(transactional_id="tx", transaction_timeout_ms=60_000)
                             ).addCallback(answers.append)
    appends.pop().callback(None)
    return answers[0]


def _add(service: TransactionService, identity: ProducerIdAndEpoch, partition: int) -> Deferred[None]:
    return service.add_partitions(AddPartitionsRequest(
        transactional_id="tx", producer_id=identity.producer_id, producer_epoch=identity.producer_epoch,
        partitions=frozenset({TopicPartition("t", partition)})))


def test_additions_of_one_turn_share_one_write_and_all_answer_once_it_is_durable() -> None:
    service, clock, appends = _service()
    identity = _initialized(service, appends)
    answered: list[int] = []
    for partition in range(3):  # one produce opening the transaction in three partitions
        _add(service, identity, partition).addCallback(lambda _, number=partition: answered.append(number))
    assert appends == []  # gathered until the end of the turn
    clock.advance(0)
    assert len(appends) == 1 and answered == []  # one write, answered once durable
    appends.pop().callback(None)
    assert answered == [0, 1, 2]
    assert service.describe("tx").result.partitions == frozenset(TopicPartition("t", n) for n in range(3))


def test_a_refused_gathered_addition_fails_every_request_of_the_turn() -> None:
    service, clock, appends = _service()
    identity = _initialized(service, appends)
    stale = ProducerIdAndEpoch(producer_id=identity.producer_id, producer_epoch=identity.producer_epoch - 1)
    refused: list[type] = []
    for partition in range(2):
        _add(service, stale, partition).addErrback(lambda failure: refused.append(type(failure.value)))
    clock.advance(0)
    assert refused == [errors.ProducerFencedError, errors.ProducerFencedError] and appends == []


def test_additions_gathered_when_the_coordinator_stops_are_refused() -> None:
    service, clock, appends = _service()
    identity = _initialized(service, appends)
    refused: list[type] = []
    _add(service, identity, 0).addErrback(lambda failure: refused.append(type(failure.value)))
    service.stop()
    assert refused == [errors.NotCoordinatorError]
    clock.advance(1)  # nothing left scheduled fires
    assert appends == []
