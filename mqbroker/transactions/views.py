# -*- test-case-name: tests.unit.transactions.test_coordinator -*-
"""What an operator sees of a coordinator's transactional ids: one described, or all listed (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from mqbroker.errors import TransactionalIdNotFoundError
from mqbroker.transactions.log_records import TransactionMetadata
from mqbroker.transactions.messages import (
    TransactionDescription,
    TransactionListing,
    TransactionState,
)


def describe(metadata_of: Mapping[str, TransactionMetadata], transactional_id: str,
             coordinator_epoch: int) -> TransactionDescription:
    """The id's state as persisted (``TransactionalIdNotFoundError`` if unknown here)."""
    metadata = metadata_of.get(transactional_id)
    if metadata is None:
        raise TransactionalIdNotFoundError(f"transactional id {transactional_id!r} is not known")
    return TransactionDescription(
        transactional_id=transactional_id, state=metadata.state, producer_id=metadata.producer_id,
        producer_epoch=metadata.producer_epoch, timeout_ms=metadata.timeout_ms, start_ms=metadata.start_ms,
        last_update_ms=metadata.last_update_ms, partitions=metadata.partitions, coordinator_epoch=coordinator_epoch,
    )


def list_transactions(metadata_of: Mapping[str, TransactionMetadata], states: Iterable[TransactionState] = (),
                      producer_ids: Iterable[int] = ()) -> list[TransactionListing]:
    """Every id, optionally only those in ``states`` or of ``producer_ids``."""
    wanted_states, wanted_ids = set(states), set(producer_ids)
    return [
        TransactionListing(transactional_id=m.transactional_id, producer_id=m.producer_id, state=m.state)
        for m in sorted(metadata_of.values(), key=lambda m: m.transactional_id)
        if (not wanted_states or m.state in wanted_states) and (not wanted_ids or m.producer_id in wanted_ids)
    ]
