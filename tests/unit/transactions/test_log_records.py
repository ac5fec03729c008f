"""``__transaction_state`` records: every state round trips, tombstones forget, garbage is a typed error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.errors import CorruptMessageError
from mqbroker.groups.model import TopicPartition
from mqbroker.transactions.log_records import (
    TransactionLogRecord,
    TransactionMetadata,
    decode_key,
    decode_value,
    metadata_record,
    replay,
    tombstone,
    transaction_state_partition,
)
from mqbroker.transactions.messages import TransactionState


def metadata(state: TransactionState = TransactionState.ONGOING, **changes: object) -> TransactionMetadata:
    fields: dict[str, object] = dict(
        transactional_id="orders-1", producer_id=4000, producer_epoch=3, timeout_ms=60_000, state=state,
        partitions=frozenset({TopicPartition("events", 0), TopicPartition("events", 2), TopicPartition("x", 1)}),
        start_ms=1_700_000_000_000, last_update_ms=1_700_000_000_500,
    )
    fields.update(changes)
    return TransactionMetadata(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("state", list(TransactionState), ids=lambda state: state.value)
def test_every_state_round_trips(state: TransactionState) -> None:
    record = metadata_record(metadata(state))
    assert decode_key(record.key) == "orders-1"
    assert record.value is not None and decode_value("orders-1", record.value) == metadata(state)


def test_replay_keeps_the_newest_value_and_forgets_tombstoned_ids() -> None:
    records = [metadata_record(metadata(TransactionState.EMPTY)), metadata_record(metadata()),
               metadata_record(metadata(transactional_id="other")), tombstone("other")]
    assert replay(records) == {"orders-1": metadata()}


def test_partitions_are_stable_and_spread() -> None:
    assert transaction_state_partition("orders-1", 8) == transaction_state_partition("orders-1", 8)
    assert len({transaction_state_partition(f"id-{n}", 8) for n in range(100)}) == 8


@given(st.binary(max_size=120), st.one_of(st.none(), st.binary(max_size=200)))
def test_garbage_raises_corrupt_message_error_only(key: bytes, value: bytes | None) -> None:
    try:
        replay([TransactionLogRecord(key=key, value=value)])
    except CorruptMessageError:
        pass


@given(st.integers(0, 300), st.binary(min_size=1, max_size=8))
def test_a_damaged_value_is_refused_or_read(cut: int, noise: bytes) -> None:
    value = metadata_record(metadata()).value
    assert value is not None
    damaged = value[: cut % len(value)] + noise
    try:
        decode_value("orders-1", damaged)
    except CorruptMessageError:
        pass
