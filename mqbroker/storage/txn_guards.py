# -*- test-case-name: tests.unit.storage.test_log_transactions -*-
"""The partition log's transaction checks on the way in: who may write markers, and KIP-890's verification guards.

Only the broker writing a coordinator's marker (or a follower copying its leader) may append a
control batch. A transactional batch that opens its producer's transaction in this partition is
appended only with the guard the caller obtained before it asked the transaction coordinator
whether the partition belongs to the producer's ongoing transaction (Kafka's
``VerificationGuard``); any write of that producer here (its transaction opening, or a marker
ending one) voids the guard, so a late or retried write cannot open a transaction that is over.
Not thread-safe on its own: the partition log calls it under its lock.
"""

from __future__ import annotations

from collections.abc import Iterable

from mqbroker.records.header import BatchHeader
from mqbroker.records.markers import ControlRecord, read_control
from mqbroker.storage.errors import InvalidRecordError, InvalidTxnStateError

#: ``verification_guard`` of an append whose caller does not verify transactions (tests, tools).
NOT_VERIFIED = object()


def control_of(view: memoryview, position: int, header: BatchHeader, refuse: bool) -> ControlRecord | None:
    """The meaning of a control batch (None for a data batch); ``refuse`` it when a client wrote it."""
    if not header.is_control:
        return None
    if refuse:
        raise InvalidRecordError("clients may not write control batches; transactions end with EndTxn")
    return read_control(view, position, header)


class VerificationGuards:
    """Producer id -> the guard a verification with the transaction coordinator started under."""

    def __init__(self) -> None:
        self._guards: dict[int, object] = {}

    def start(self, producer_id: int) -> object:
        """The guard to append ``producer_id``'s transaction-opening batch with, once verified."""
        return self._guards.setdefault(producer_id, object())

    def check(self, header: BatchHeader, opens_transaction: bool, guard: object | None) -> None:
        """Raise ``InvalidTxnStateError`` for a transaction-opening batch without its producer's current guard."""
        if guard is NOT_VERIFIED or not opens_transaction:
            return
        if guard is None or guard is not self._guards.get(header.producer_id):
            raise InvalidTxnStateError(
                f"producer {header.producer_id} has no verified transaction including this partition; "
                "add the partition to the transaction (AddPartitionsToTxn) before writing to it"
            )

    def void(self, producer_ids: Iterable[int]) -> None:
        """These producers wrote here: a verification started before is over."""
        for producer_id in producer_ids:
            self._guards.pop(producer_id, None)
