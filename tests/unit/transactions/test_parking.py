"""Which parked requests at the front of an id's queue can share one write."""

from __future__ import annotations

from mqbroker.groups.model import TopicPartition
from mqbroker.transactions.messages import AddOffsetsRequest, AddPartitionsRequest, EndTxnRequest
from mqbroker.transactions.parking import Parked, leading_additions

T0, T1 = TopicPartition("events", 0), TopicPartition("events", 1)
OFFSETS = TopicPartition("__consumer_offsets", 3)


def _add(*partitions: TopicPartition, epoch: int = 0, verify_only: bool = False) -> Parked:
    return Parked(request=AddPartitionsRequest(transactional_id="t", producer_id=7, producer_epoch=epoch,
                                               partitions=frozenset(partitions), verify_only=verify_only),
                  request_key=object())


def test_additions_of_the_producer_at_the_front_are_counted_with_what_they_add_together() -> None:
    offsets = Parked(request=AddOffsetsRequest(transactional_id="t", producer_id=7, producer_epoch=0, group_id="g"),
                     request_key=object())
    end = Parked(request=EndTxnRequest(transactional_id="t", producer_id=7, producer_epoch=0, committed=True),
                 request_key=object())
    parked = [_add(T0), offsets, _add(T1), end, _add(T1)]
    assert leading_additions(parked, 7, 0, lambda group: OFFSETS) == (3, frozenset({T0, T1, OFFSETS}))


def test_another_epoch_or_a_verification_ends_the_run() -> None:
    assert leading_additions([_add(T0), _add(T1, epoch=1)], 7, 0, lambda group: OFFSETS) == (1, frozenset({T0}))
    assert leading_additions([_add(T0, verify_only=True), _add(T1)], 7, 0, lambda group: OFFSETS) == (0, frozenset())
