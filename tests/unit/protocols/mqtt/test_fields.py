"""MQTT wire primitives and the 5.0 property block, decoded straight from bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.protocols.mqtt.errors import MqttProtocolError
from mqbroker.protocols.mqtt.fields import (
    VARIABLE_BYTE_INTEGER_MAX,
    Reader,
    decode_properties,
    decode_utf8,
    encode_properties,
    encode_variable_byte_integer,
)
from mqbroker.protocols.mqtt.packets import PacketType, ReasonCode
from tests.unit.protocols.mqtt.test_codec import properties_for


@given(value=st.integers(0, VARIABLE_BYTE_INTEGER_MAX))
def test_a_variable_byte_integer_round_trips_in_its_minimal_length(value: int) -> None:
    encoded = encode_variable_byte_integer(value)
    assert len(encoded) == 1 + (value >= 0x80) + (value >= 0x4000) + (value >= 0x20_0000)
    reader = Reader(memoryview(encoded))
    assert reader.variable_byte_integer() == value and reader.remaining == 0


@pytest.mark.parametrize("data", [b"\x80\x00", b"\xff\xff\xff\xff\x01"], ids=["non-minimal", "five bytes"])
def test_a_non_minimal_or_five_byte_variable_integer_is_malformed_mqtt_1_5_5(data: bytes) -> None:
    with pytest.raises(MqttProtocolError) as raised:
        Reader(memoryview(data)).variable_byte_integer()
    assert raised.value.reason_code == ReasonCode.MALFORMED_PACKET


@pytest.mark.parametrize("data", [b"a\x00b", b"\xc0\xaf", b"\xed\xa0\x80"], ids=["U+0000", "overlong", "surrogate"])
def test_strings_with_u0000_overlongs_or_surrogates_are_malformed_mqtt_1_5_4(data: bytes) -> None:
    with pytest.raises(MqttProtocolError):
        decode_utf8(data)


@given(properties=properties_for(PacketType.PUBLISH))
def test_a_property_block_round_trips(properties: object) -> None:
    reader = Reader(memoryview(encode_properties(properties)))  # type: ignore[arg-type]
    assert decode_properties(reader, PacketType.PUBLISH) == properties
    assert reader.remaining == 0


@given(data=st.binary(max_size=64), where=st.sampled_from([PacketType.CONNECT, PacketType.PUBLISH, "will"]))
@settings(max_examples=300)
def test_garbage_property_blocks_raise_only_the_typed_protocol_error(data: bytes, where: object) -> None:
    try:
        decode_properties(Reader(memoryview(data)), where)  # type: ignore[arg-type]
    except MqttProtocolError:
        pass
