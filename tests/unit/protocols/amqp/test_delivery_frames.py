"""A fetch's deliveries encoded at once from record rows: the reference against the per-message encoder, the
compiled encoder against the reference, and the rows as a queue reads them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqbroker.protocols.amqp import codec, fields, spec
from mqbroker.protocols.amqp.delivery_frames import (
    COMPILED_DELIVERY_ENCODER,
    encode_deliveries,
    encode_deliveries_python,
)
from mqbroker.protocols.amqp.stored import (
    EMPTY_PROPERTIES,
    STORED_LAYOUT,
    MessageRow,
    append_message,
    queued_message,
)
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.decoder import decode_rows

NAMES = [*STORED_LAYOUT[:3], "amqp.expiration", "x-delay", "other"]
_values = st.one_of(st.none(), st.binary(max_size=12), st.sampled_from([b"60000", b"0", b"1x"]),
                    st.binary(min_size=250, max_size=300))
_headers = st.one_of(
    # as append_message writes them (sometimes with an expiration or x-delay after them)
    st.tuples(_values, _values, _values, st.lists(st.tuples(st.sampled_from(NAMES[3:]), _values), max_size=2)).map(
        lambda parts: ((NAMES[0], parts[0]), (NAMES[1], parts[1]), (NAMES[2], parts[2]), *parts[3])),
    # anything else (a record produced natively onto the queue's topic): names repeat, any order
    st.lists(st.tuples(st.sampled_from(NAMES), _values), max_size=6).map(tuple),
)
rows = st.lists(st.builds(MessageRow, offset=st.integers(0, 2**40), key=_values,
                          value=st.one_of(st.none(), st.binary(max_size=9_000)), headers=_headers,
                          timestamp_ms=st.integers(0, 2**41)), max_size=8)


def _both(function: Any, *arguments: Any) -> tuple[str, Any]:
    try:
        return "bytes", function(*arguments)
    except ValueError as error:
        return "ValueError", str(error)


@given(rows=rows, data=st.data(), channel=st.integers(1, 2047), tag=st.text(max_size=20),
       first=st.integers(1, 2**60), frame_max=st.sampled_from([4096, 5000, 131_072]))
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_the_reference_sends_what_the_per_message_encoder_sends_for_each_queued_message(
        rows: list[MessageRow], data: st.DataObject, channel: int, tag: str, first: int, frame_max: int) -> None:
    """Each row is delivered as ``queued_message`` reads the record: with its exchange, routing key and
    properties as decoded there (the raw bytes encode back to themselves), numbered from ``first``."""
    redelivered = data.draw(st.sets(st.sampled_from([row.offset for row in rows]))) if rows else set()
    consumer_tag = fields.shortstr(tag)
    expected = []
    try:
        for index, row in enumerate(rows):
            message = queued_message(*row).payload
            expected.append(codec.encode_deliver(channel, consumer_tag, first + index, row.offset in redelivered,
                                                 message.exchange, message.routing_key, message.properties_raw,
                                                 message.body, frame_max))
    except ValueError as error:
        assert _both(encode_deliveries_python, rows, redelivered, channel, consumer_tag, first, frame_max) == (
            "ValueError", str(error))
        return
    assert encode_deliveries_python(rows, redelivered, channel, consumer_tag, first, frame_max) == b"".join(expected)


def test_the_compiled_encoder_is_built() -> None:
    """The install builds it (setup.py); a missing compiler would leave the slower Python reference running."""
    assert COMPILED_DELIVERY_ENCODER


@given(rows=rows, data=st.data(), channel=st.integers(0, 65535), consumer_tag=st.binary(max_size=256),
       first=st.integers(0, 2**63), frame_max=st.sampled_from([4096, 4500, 131_072]),
       redelivered_kind=st.sampled_from([set, frozenset, list]))
@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
def test_the_compiled_encoder_gives_the_references_bytes_and_errors(
        rows: list[MessageRow], data: st.DataObject, channel: int, consumer_tag: bytes, first: int, frame_max: int,
        redelivered_kind: type) -> None:
    offsets = [row.offset for row in rows] + [2**50]
    redelivered = redelivered_kind(data.draw(st.sets(st.sampled_from(offsets))))
    arguments = (rows, redelivered, channel, consumer_tag, first, frame_max)
    assert _both(encode_deliveries, *arguments) == _both(encode_deliveries_python, *arguments)
    layout = ("e", "r", "p", b"\x80\x00")  # any header names and default property list
    assert _both(encode_deliveries, *arguments, layout) == _both(encode_deliveries_python, *arguments, layout)


def test_the_compiled_encoder_refuses_what_is_not_a_row() -> None:
    for bad in ([("not", "a row")], [(1, None, None, (("name",),))], [(1, None, "text", ())], [5]):
        with pytest.raises(TypeError):
            encode_deliveries(bad, set(), 1, b"\x00", 1, 4096)
    with pytest.raises(ValueError):
        encode_deliveries([], set(), 1, b"\x00", 1, 8)


def test_stored_messages_decode_as_rows_and_deliver_as_pika_reads_them() -> None:
    """Messages as append_message stores them, decoded as rows and delivered: a frame decoder reads back the
    publishes' exchange, routing key, properties and bodies, bodies split by frame_max."""
    builder = BatchBuilder(base_offset=0)
    properties = codec.encode_properties(spec.BasicProperties(content_type="text/plain", delivery_mode=2))
    append_message(builder, 5, "amq.direct", "key-1", properties, b"a" * 5_000, None)
    append_message(builder, 6, "", "key-2", EMPTY_PROPERTIES, b"", "60000")
    decoded = decode_rows(builder.build(), MessageRow, ())
    assert [row.offset for row in decoded] == [0, 1] and decoded[1].expiration_ms == 60_000
    assert decoded[0].expiration_ms is None and decoded[0].payload == queued_message(*decoded[0]).payload
    data = encode_deliveries(decoded, {1}, 3, fields.shortstr("ctag"), 41, 4096)
    frames = codec.FrameDecoder(4096, expect_protocol_header=False).receive_data(data)
    methods = [frame for frame in frames if isinstance(frame, codec.MethodFrame)]
    assert [frame.method for frame in methods] == [
        spec.BasicDeliver(consumer_tag="ctag", delivery_tag=41, redelivered=False, exchange="amq.direct",
                          routing_key="key-1"),
        spec.BasicDeliver(consumer_tag="ctag", delivery_tag=42, redelivered=True, exchange="", routing_key="key-2")]
    headers = [frame for frame in frames if isinstance(frame, codec.HeaderFrame)]
    assert [(header.properties_raw, header.body_size) for header in headers] == [(properties, 5_000),
                                                                                (EMPTY_PROPERTIES, 0)]
    bodies = [frame.payload for frame in frames if isinstance(frame, codec.BodyFrame)]
    assert [len(body) for body in bodies] == [4088, 912] and b"".join(bodies) == b"a" * 5_000
    assert {frame.channel for frame in frames} == {3}


@given(row=rows.filter(bool).map(lambda found: found[0]))
def test_a_row_reads_like_the_queued_message_of_its_record(row: MessageRow) -> None:
    queued = queued_message(*row)
    assert (row.offset, row.timestamp_ms, row.expiration_ms, row.payload) == (
        queued.offset, queued.timestamp_ms, queued.expiration_ms, queued.payload)
