"""Declaration records: they round-trip; garbage and broken records raise only AmqpError."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.protocols.amqp import fields
from mqbroker.protocols.amqp.routing import Binding, DestinationKind, Exchange, ExchangeType
from mqbroker.protocols.amqp.spec import AmqpError
from mqbroker.protocols.amqp.stored import (
    QueueDeclaration,
    append_message,
    append_messages,
    binding_key,
    decode_declaration,
    exchange_record,
    queue_record,
)
from mqbroker.records.builder import BatchBuilder
from tests.unit.protocols.amqp.strategies import field_values, shortstrs, tables

exchanges = st.builds(Exchange, name=shortstrs.filter(lambda name: not name.startswith("amq.")),
                      type=st.sampled_from(ExchangeType), durable=st.booleans(), auto_delete=st.booleans(),
                      internal=st.booleans(), arguments=st.dictionaries(shortstrs, st.integers(0, 9), max_size=2),
                      home=st.one_of(st.none(), st.integers(0, 2**31 - 1)))
queues = st.builds(QueueDeclaration, name=shortstrs, durable=st.booleans(), auto_delete=st.booleans(),
                   arguments=st.dictionaries(shortstrs, st.integers(0, 9), max_size=2),
                   home=st.one_of(st.none(), st.integers(0, 2**31 - 1)), exclusive=st.booleans())
bindings = st.builds(Binding, source=shortstrs, destination=shortstrs, destination_kind=st.sampled_from(DestinationKind),
                     routing_key=shortstrs, arguments=st.just(()))
records = st.one_of(exchanges.map(exchange_record), queues.map(queue_record),
                    bindings.map(lambda binding: (binding_key(binding), b"")))


@given(record=records)
def test_declarations_round_trip(record: tuple[bytes, bytes]) -> None:
    key, value = record
    declared: Any = decode_declaration(key, value)
    if isinstance(declared, Exchange):
        assert exchange_record(declared) == record
    elif isinstance(declared, QueueDeclaration):
        assert queue_record(declared) == record
    else:
        assert binding_key(declared) == key


@st.composite
def broken_records(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """A valid record whose table has one entry replaced by any field value, or removed."""
    key, value = draw(records)
    in_key = key.startswith(b"b:")
    table = fields.Reader(key[2:] if in_key else value).table()
    name = draw(st.sampled_from(sorted(table)))
    if draw(st.booleans()):
        del table[name]
    else:
        table[name] = draw(field_values)
    encoded = fields.table(table)
    return (key[:2] + encoded, value) if in_key else (key, encoded)


garbage = st.one_of(
    st.tuples(st.sampled_from([b"e:", b"q:", b"b:", b"x:", b""]).flatmap(
        lambda kind: st.binary(max_size=40).map(lambda rest: kind + rest)), st.binary(max_size=120)),
    st.tuples(st.sampled_from([b"e:x", b"q:x"]), tables.map(fields.table)),
    tables.map(lambda table: (b"b:" + fields.table(table), b"")),
    broken_records(),
)


@given(record=garbage)
@settings(max_examples=500)
def test_garbage_declarations_raise_only_amqp_error(record: tuple[bytes, bytes]) -> None:
    try:
        decode_declaration(*record)
    except AmqpError:
        pass


def test_a_declaration_missing_its_type_says_so() -> None:
    with pytest.raises(AmqpError, match="'type' is NoneType"):
        decode_declaration(b"e:orders", fields.table({"durable": True}))


def test_a_message_is_stored_alike_whether_its_record_headers_were_remembered_or_not() -> None:
    """``append_message`` remembers a message's record headers; unhashable ones (a bytearray) are built each time."""
    first, second = BatchBuilder(), BatchBuilder()
    for builder in (first, second):
        append_message(builder, 0, "amq.direct", "key", b"\x00\x00", b"body", "60000", (("x-delay", b"5"),))
    append_message(first, 0, "", "key", bytearray(b"\x00\x00"), b"body", None, [("x-delay", bytearray(b"5"))])
    append_message(second, 0, "", "key", b"\x00\x00", b"body", None, (("x-delay", b"5"),))
    assert first.build() == second.build()


def test_messages_alike_but_for_their_bodies_are_stored_as_one_by_one() -> None:
    together, one_by_one = BatchBuilder(), BatchBuilder()
    bodies = [b"first", b"", b"third" * 100]
    append_messages(together, 7, "amq.direct", "key", b"\x00\x00", bodies, "60000", (("x-delay", b"5"),))
    for body in bodies:
        append_message(one_by_one, 7, "amq.direct", "key", b"\x00\x00", body, "60000", (("x-delay", b"5"),))
    assert together.build() == one_by_one.build()
