# -*- test-case-name: tests.interaction.test_transaction_scripts -*-
"""Requests the ``TransactionCoordinator`` parks behind a write in flight or a decision's markers (pure).

Parked requests run again, in order, when what they wait for is done. Additions (AddPartitions,
AddOffsets) of one producer at the front of the queue can share one write: ``leading_additions``
says how many and what they add together.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from mqbroker.groups.model import TopicPartition
from mqbroker.transactions.messages import (
    AddOffsetsRequest,
    AddPartitionsRequest,
    EndTxnRequest,
    InitTransactionsRequest,
)

#: Requests one transactional id may have parked at once (a producer has at most a few in flight).
PARKED_PER_ID_MAX = 64

Request = InitTransactionsRequest | AddPartitionsRequest | AddOffsetsRequest | EndTxnRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class Parked:
    """A request waiting for a write in flight or for markers, to be run again."""

    request: Request
    request_key: Hashable


def leading_additions(
    parked: Sequence[Parked], producer_id: int, producer_epoch: int,
    offsets_partition_of: Callable[[str], TopicPartition],
) -> tuple[int, frozenset[TopicPartition]]:
    """How many requests at the front of ``parked`` add partitions or offsets for this producer id and epoch,
    and the partitions they add together."""
    count, partitions = 0, frozenset[TopicPartition]()
    for item in parked:
        request = item.request
        if isinstance(request, AddPartitionsRequest) and not request.verify_only:
            adds = request.partitions
        elif isinstance(request, AddOffsetsRequest):
            adds = frozenset({offsets_partition_of(request.group_id)})
        else:
            break
        if (request.producer_id, request.producer_epoch) != (producer_id, producer_epoch):
            break
        count += 1
        partitions |= adds
    return count, partitions
