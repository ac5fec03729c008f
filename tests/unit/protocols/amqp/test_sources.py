"""Native topics as exchange sources: the x-source-topic argument, stored positions, record decoding."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.protocols.amqp import fields, spec
from mqbroker.protocols.amqp.codec import decode_properties
from mqbroker.protocols.amqp.sources import decode_positions, decode_source_records, encode_positions, source_topic
from mqbroker.protocols.amqp.spec import AmqpError, ReplyCode
from mqbroker.protocols.amqp.stored import EMPTY_PROPERTIES
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.header import stamp
from mqbroker.records.readable import UnreadableBatch
from tests.poison import poison_batch
from tests.unit.protocols.amqp.strategies import field_values, shortstrs


def test_an_exchange_without_the_argument_has_no_source() -> None:
    assert source_topic({"alternate-exchange": "x"}) is None
    assert source_topic({"x-source-topic": "orders"}) == "orders"
    assert source_topic({"x-source-topic": b"orders"}) == "orders"


@pytest.mark.parametrize("topic", ["", 7, "amqp.queue.work", "__amqp_metadata", "__amqp_source_positions"])
def test_a_source_must_name_a_native_topic(topic: object) -> None:
    with pytest.raises(AmqpError) as refused:
        source_topic({"x-source-topic": topic}, spec.ExchangeDeclare(exchange="x"))
    assert refused.value.reply_code is ReplyCode.PRECONDITION_FAILED
    assert (refused.value.class_id, refused.value.method_id) == (40, 10)


def test_positions_round_trip() -> None:
    assert decode_positions(encode_positions({0: 12, 3: 0, 11: 1 << 40})) == {0: 12, 3: 0, 11: 1 << 40}


def _no_skip(batch: UnreadableBatch) -> None:
    raise AssertionError(f"nothing should be skipped here: {batch}")


def _batch(base_offset: int, records: list[tuple[bytes | None, bytes, tuple[tuple[str, bytes], ...]]]) -> bytes:
    builder = BatchBuilder()
    for key, value, headers in records:
        builder.append(1_000, key, value, headers)
    batch = bytearray(builder.build())
    stamp(batch, 0, base_offset, 0)
    return bytes(batch)


def test_fetched_records_become_messages_from_the_requested_offset_on() -> None:
    fetched = _batch(10, [(b"a.b", b"skipped", ()), (b"a.c", b"kept", (("origin", b"native"), ("raw", b"\xff")))])
    fetched += _batch(12, [(None, b"no key", ())])
    records, next_offset = decode_source_records(fetched, 11, topic="t", partition=0, skipped=_no_skip)
    assert next_offset == 13
    assert [(record.routing_key, record.body) for record in records] == [("a.c", b"kept"), ("", b"no key")]
    assert records[0].headers == {"origin": "native", "raw": b"\xff"}
    assert decode_properties(records[0].properties_raw).headers == {"origin": "native", "raw": b"\xff"}
    assert records[1].headers is None and records[1].properties_raw == EMPTY_PROPERTIES


def test_a_poison_batch_among_source_records_is_skipped_and_the_reader_reads_on() -> None:
    poison = bytearray(poison_batch(records_count=2))
    stamp(poison, 0, 11, 0)
    fetched = _batch(10, [(b"a", b"before", ())]) + bytes(poison) + _batch(13, [(b"b", b"after", ())])
    skipped: list[UnreadableBatch] = []
    records, next_offset = decode_source_records(fetched, 10, topic="orders", partition=2, skipped=skipped.append)
    assert [record.body for record in records] == [b"before", b"after"] and next_offset == 14
    assert [(batch.topic, batch.partition, batch.first_offset, batch.last_offset) for batch in skipped] == [
        ("orders", 2, 11, 12)]


@given(value=st.binary(max_size=80) | st.dictionaries(shortstrs, field_values, max_size=4).map(fields.table))
@settings(max_examples=300)
def test_garbage_positions_raise_only_amqp_error(value: bytes) -> None:
    try:
        positions = decode_positions(value)
    except AmqpError:
        return
    assert all(type(offset) is int and offset >= 0 for offset in positions.values())
