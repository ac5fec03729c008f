"""MQTT codec: round trips at both protocol levels, malformed input, garbage into the decoder."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.protocols.mqtt.codec import (
    PacketDecoder,
    decode_packet,
    encode,
    encode_plain_publish,
    encode_variable_byte_integer,
)
from mqbroker.protocols.mqtt.errors import MqttProtocolError
from mqbroker.protocols.mqtt.fields import encode_string
from mqbroker.protocols.mqtt.packets import (
    NO_PROPERTIES,
    PROPERTY_SPECS,
    WILL,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    PacketType,
    PingReq,
    PingResp,
    Properties,
    PropertyType,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    RetainHandling,
    SubAck,
    Subscribe,
    SubscriptionRequest,
    UnsubAck,
    Unsubscribe,
    Will,
)

# Strings MQTT can carry: no U+0000 and no surrogates (neither is well-formed UTF-8 there).
texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
payloads = st.binary(max_size=40)
packet_ids = st.integers(1, 0xFFFF)
qos_levels = st.integers(0, 2)

_VALUES = {
    PropertyType.BYTE: st.integers(0, 1),
    PropertyType.TWO_BYTE_INTEGER: st.integers(1, 0xFFFF),
    PropertyType.FOUR_BYTE_INTEGER: st.integers(1, 0xFFFF_FFFF),
    PropertyType.VARIABLE_BYTE_INTEGER: st.integers(1, 268_435_455),
    PropertyType.UTF8_STRING: texts,
    PropertyType.BINARY: payloads,
    PropertyType.UTF8_STRING_PAIR: st.tuples(texts, texts),
}


def properties_for(where: PacketType | str) -> st.SearchStrategy[Properties]:
    """Any valid property set for one packet type (level 5)."""
    fields = {}
    for property_id, spec in PROPERTY_SPECS.items():
        if where not in spec.allowed_in:
            continue
        value = _VALUES[spec.type]
        if spec.name == "user_properties":
            fields[spec.name] = st.lists(value, max_size=3).map(tuple)
        elif spec.name == "subscription_identifiers":
            fields[spec.name] = st.lists(value, max_size=1 if where == PacketType.SUBSCRIBE else 3).map(tuple)
        else:
            fields[spec.name] = st.none() | value
    return st.fixed_dictionaries({}, optional=fields).map(lambda values: Properties(**values))


def packets(v5: bool) -> st.SearchStrategy[object]:
    """Every packet type that the level can carry, with every field the level encodes."""

    def props(where: PacketType | str) -> st.SearchStrategy[Properties]:
        return properties_for(where) if v5 else st.just(NO_PROPERTIES)

    reason = st.sampled_from([code.value for code in ReasonCode]) if v5 else st.just(0)
    wills = st.builds(Will, topic=texts, payload=payloads, qos=qos_levels, retain=st.booleans(), properties=props(WILL))
    usernames = st.none() | texts
    connect = st.builds(
        Connect, protocol_level=st.just(5 if v5 else 4), clean_start=st.booleans(),
        keep_alive_s=st.integers(0, 0xFFFF), client_id=texts, will=st.none() | wills,
        username=usernames, password=st.none() | payloads, properties=props(PacketType.CONNECT),
    ).filter(lambda connect: v5 or connect.username is not None or connect.password is None)
    publish = qos_levels.flatmap(lambda qos: st.builds(
        Publish, topic=texts, payload=payloads, qos=st.just(qos), retain=st.booleans(),
        dup=st.booleans() if qos else st.just(False), packet_id=packet_ids if qos else st.none(),
        properties=props(PacketType.PUBLISH),
    ))
    responses = [
        st.builds(cls, packet_id=packet_ids, reason_code=reason, properties=props(packet_type))
        for cls, packet_type in [
            (PubAck, PacketType.PUBACK), (PubRec, PacketType.PUBREC),
            (PubRel, PacketType.PUBREL), (PubComp, PacketType.PUBCOMP),
        ]
    ]
    requests = st.builds(
        SubscriptionRequest, topic_filter=texts, qos=qos_levels,
        no_local=st.booleans() if v5 else st.just(False),
        retain_as_published=st.booleans() if v5 else st.just(False),
        retain_handling=st.sampled_from(RetainHandling) if v5 else st.just(RetainHandling.SEND_ON_SUBSCRIBE),
    )
    suback_codes = reason if v5 else st.sampled_from([0, 1, 2, 0x80])
    choices = [
        connect,
        st.builds(ConnAck, session_present=st.booleans(), reason_code=reason if v5 else st.integers(0, 5),
                  properties=props(PacketType.CONNACK)),
        publish,
        *responses,
        st.builds(Subscribe, packet_id=packet_ids, subscriptions=st.lists(requests, min_size=1, max_size=3).map(tuple),
                  properties=props(PacketType.SUBSCRIBE)),
        st.builds(SubAck, packet_id=packet_ids, reason_codes=st.lists(suback_codes, max_size=3).map(tuple),
                  properties=props(PacketType.SUBACK)),
        st.builds(Unsubscribe, packet_id=packet_ids, topic_filters=st.lists(texts, min_size=1, max_size=3).map(tuple),
                  properties=props(PacketType.UNSUBSCRIBE)),
        st.builds(UnsubAck, packet_id=packet_ids,
                  reason_codes=st.lists(reason, max_size=3).map(tuple) if v5 else st.just(()),
                  properties=props(PacketType.UNSUBACK)),
        st.just(PingReq()),
        st.just(PingResp()),
        st.builds(Disconnect, reason_code=reason, properties=props(PacketType.DISCONNECT)),
    ]
    if v5:
        choices.append(st.builds(Auth, reason_code=reason, properties=props(PacketType.AUTH)))
    return st.one_of(choices)


def decode_all(data: bytes, level: int, packet_bytes_max: int = 1 << 20) -> list[object]:
    """Decode ``data`` with a decoder already at ``level``."""
    return PacketDecoder(packet_bytes_max=packet_bytes_max, protocol_level=level).receive_data(data)


@given(packet=packets(v5=True))
def test_every_packet_type_round_trips_at_level_5(packet: object) -> None:
    assert decode_all(encode(packet, 5), 5) == [packet]


@given(packet=packets(v5=False))
def test_every_packet_type_round_trips_at_level_4(packet: object) -> None:
    assert decode_all(encode(packet, 4), 4) == [packet]


@given(packet_list=st.lists(packets(v5=True), min_size=1, max_size=5), cuts=st.lists(st.integers(0, 400), max_size=5))
@settings(max_examples=100)
def test_a_stream_split_anywhere_yields_the_same_packets(packet_list: list[object], cuts: list[int]) -> None:
    stream = b"".join(encode(packet, 5) for packet in packet_list)
    decoder = PacketDecoder(packet_bytes_max=1 << 20, protocol_level=5)
    decoded: list[object] = []
    start = 0
    for cut in sorted(min(cut, len(stream)) for cut in cuts) + [len(stream)]:
        decoded += decoder.receive_data(stream[start:cut])
        start = cut
    assert decoded == packet_list
    assert decoder.buffered_bytes == 0


def test_server_decoder_adopts_the_level_of_the_first_connect() -> None:
    decoder = PacketDecoder(packet_bytes_max=1024)
    connect = Connect(protocol_level=4, client_id="c")
    assert decoder.receive_data(encode(connect, 4)) == [connect]
    assert decoder.protocol_level == 4


def test_first_packet_other_than_connect_is_a_protocol_error_mqtt_3_1_0_1() -> None:
    decoder = PacketDecoder(packet_bytes_max=1024)
    with pytest.raises(MqttProtocolError) as caught:
        decoder.receive_data(encode(PingReq(), 5))
    assert caught.value.reason_code == ReasonCode.PROTOCOL_ERROR


def _error(data: bytes, level: int | None = 5, packet_bytes_max: int = 1024) -> ReasonCode:
    with pytest.raises(MqttProtocolError) as caught:
        PacketDecoder(packet_bytes_max=packet_bytes_max, protocol_level=level).receive_data(data)
    return caught.value.reason_code


def test_remaining_length_of_five_bytes_is_malformed_mqtt_1_5_5() -> None:
    assert _error(b"\x30\xff\xff\xff\xff\x01") == ReasonCode.MALFORMED_PACKET


def test_non_minimal_remaining_length_is_malformed_mqtt_1_5_5_1() -> None:
    assert _error(b"\xc0\x80\x00") == ReasonCode.MALFORMED_PACKET


def test_oversized_packet_is_refused_from_its_fixed_header_alone() -> None:
    header_only = b"\x30" + encode_variable_byte_integer(5000)
    assert _error(header_only, packet_bytes_max=4096) == ReasonCode.PACKET_TOO_LARGE


@pytest.mark.parametrize("first_byte", [0xC1, 0x64, 0x60, 0x80, 0xA0, 0xE8, 0x21])
def test_reserved_fixed_header_flags_are_malformed_mqtt_2_1_3_1(first_byte: int) -> None:
    body = b"\x00\x01" if first_byte >> 4 in (6, 8, 10) else b""
    data = bytes([first_byte, len(body)]) + body
    assert _error(data) == ReasonCode.MALFORMED_PACKET


def test_publish_with_qos_3_is_malformed_mqtt_3_3_1_4() -> None:
    assert _error(b"\x36\x05\x00\x01t\x00\x01") == ReasonCode.MALFORMED_PACKET


def test_dup_on_qos_0_is_malformed_mqtt_3_3_1_2() -> None:
    assert _error(b"\x38\x04\x00\x01t\x00") == ReasonCode.MALFORMED_PACKET


@pytest.mark.parametrize(
    "encoded_topic",
    [b"\xed\xa0\x80", b"\xc0\xaf", b"\xff", b"a\x00b"],
    ids=["surrogate", "overlong", "invalid-byte", "null-character"],
)
def test_invalid_utf8_topic_is_malformed_mqtt_1_5_4(encoded_topic: bytes) -> None:
    body = len(encoded_topic).to_bytes(2, "big") + encoded_topic + b"\x00"
    assert _error(b"\x30" + bytes([len(body)]) + body) == ReasonCode.MALFORMED_PACKET


def test_connect_reserved_flag_is_malformed_mqtt_3_1_2_3() -> None:
    connect = bytearray(encode(Connect(client_id="c"), 5))
    connect[9] |= 0x01  # the connect flags byte follows name (6 bytes) and level
    assert _error(bytes(connect), level=None) == ReasonCode.MALFORMED_PACKET


def test_unknown_protocol_level_is_unsupported_mqtt_3_1_2_2() -> None:
    connect = bytearray(encode(Connect(client_id="c", protocol_level=5), 5))
    connect[8] = 3
    assert _error(bytes(connect), level=None) == ReasonCode.UNSUPPORTED_PROTOCOL_VERSION


def test_property_not_allowed_in_packet_is_malformed() -> None:
    # PUBACK with reason 0 and a property block holding SESSION_EXPIRY_INTERVAL.
    data = b"\x40\x09\x00\x01\x00\x05\x11\x00\x00\x00\x05"
    assert _error(data) == ReasonCode.MALFORMED_PACKET


def test_duplicated_single_property_is_a_protocol_error() -> None:
    # PUBACK, packet id 1, reason 0, properties: REASON_STRING "" twice.
    data = b"\x40\x0a\x00\x01\x00\x06\x1f\x00\x00\x1f\x00\x00"
    assert _error(data) == ReasonCode.PROTOCOL_ERROR


def test_topic_alias_zero_is_a_protocol_error() -> None:
    data = encode(Publish(topic="t", properties=Properties(topic_alias=1)), 5).replace(b"\x23\x00\x01", b"\x23\x00\x00")
    assert _error(data) == ReasonCode.PROTOCOL_ERROR


def test_subscribe_without_filters_is_a_protocol_error_mqtt_3_8_3_2() -> None:
    assert _error(b"\x82\x03\x00\x01\x00") == ReasonCode.PROTOCOL_ERROR


def test_subscribe_reserved_option_bits_are_malformed_mqtt_3_8_3_5() -> None:
    assert _error(b"\x82\x07\x00\x01\x00\x00\x01t\xc0") == ReasonCode.MALFORMED_PACKET


def test_auth_does_not_exist_at_level_4() -> None:
    assert _error(b"\xf0\x00", level=4) == ReasonCode.MALFORMED_PACKET


def test_trailing_bytes_after_connect_are_malformed() -> None:
    data = bytearray(encode(Connect(client_id="c"), 5) + b"x")
    data[1] += 1
    assert _error(bytes(data), level=None) == ReasonCode.MALFORMED_PACKET


@given(data=st.binary(max_size=300), level=st.sampled_from([None, 4, 5]))
@settings(max_examples=500)
def test_garbage_raises_only_the_typed_protocol_error(data: bytes, level: int | None) -> None:
    decoder = PacketDecoder(packet_bytes_max=256, protocol_level=level)
    try:
        decoder.receive_data(data)
    except MqttProtocolError as error:
        assert isinstance(error.reason_code, ReasonCode)
    assert decoder.buffered_bytes <= 256


@given(packet=packets(v5=True), position=st.integers(0, 1000), value=st.integers(0, 255))
@settings(max_examples=300)
def test_a_corrupted_byte_raises_only_the_typed_protocol_error(packet: object, position: int, value: int) -> None:
    data = bytearray(encode(packet, 5))
    data[position % len(data)] = value
    try:
        decode_all(bytes(data), 5)
    except MqttProtocolError as error:
        assert isinstance(error.reason_code, ReasonCode)


def _outcome(decode: object) -> object:
    """What a decoding call returns, or the reason code it raises."""
    try:
        return decode()  # type: ignore[operator]
    except MqttProtocolError as error:
        return error.reason_code


@given(packet_type=st.sampled_from([PacketType.PUBLISH, PacketType.PUBACK]), flags=st.integers(0, 15), body=st.one_of(
    st.binary(max_size=140),
    st.builds(lambda topic, rest: len(topic).to_bytes(2, "big") + topic + rest,
              st.binary(max_size=12) | st.text(max_size=6).map(str.encode), st.binary(max_size=20)),
), level=st.sampled_from([4, 5]))
@settings(max_examples=1000)
def test_the_streaming_decoders_shortcuts_decode_exactly_as_decode_packet(
    packet_type: PacketType, flags: int, body: bytes, level: int
) -> None:
    """The decoder reads plain PUBLISH and PUBACK packets inline: the same packet, or the same error, as decode_packet."""
    first_byte = packet_type << 4 | (flags if packet_type == PacketType.PUBLISH or flags < 8 else 0)
    frame = bytes([first_byte]) + encode_variable_byte_integer(len(body)) + body
    streamed = _outcome(lambda: PacketDecoder(packet_bytes_max=1024, protocol_level=level).receive_data(frame))
    general = _outcome(lambda: [decode_packet(first_byte, body, level)])
    assert streamed == general


@given(topic=st.text(min_size=1, max_size=40).filter(lambda text: "\x00" not in text),
       payload=st.binary(max_size=300), qos=st.sampled_from([1, 2]), retain=st.booleans(),
       packet_id=st.integers(1, 0xFFFF), level=st.sampled_from([4, 5]))
def test_the_plain_publish_encoder_writes_what_encode_writes(topic: str, payload: bytes, qos: int, retain: bool,
                                                             packet_id: int, level: int) -> None:
    publish = Publish(topic=topic, payload=payload, qos=qos, retain=retain, packet_id=packet_id)
    assert encode_plain_publish(encode_string(topic), payload, qos, retain, packet_id, level == 5) == encode(
        publish, level)


@given(packet_ids=st.lists(st.integers(0, 0xFFFF), max_size=20), tail=st.binary(max_size=6),
       level=st.sampled_from([4, 5]))
@settings(max_examples=500)
def test_a_read_of_short_pubacks_gives_their_packet_ids_and_anything_else_goes_to_the_general_decoder(
    packet_ids: list[int], tail: bytes, level: int
) -> None:
    """``plain_pubacks`` reads a read of whole short-form PUBACKs into exactly the ids ``receive_data`` decodes from it,
    and declines (None) any read that is not only such PUBACKs (a packet id 0, another packet, a partial packet)."""
    data = b"".join(bytes([0x40, 2]) + packet_id.to_bytes(2, "big") for packet_id in packet_ids) + tail
    ids = PacketDecoder(packet_bytes_max=1024, protocol_level=level).plain_pubacks(data)
    decoded = _outcome(lambda: PacketDecoder(packet_bytes_max=1024, protocol_level=level).receive_data(data))
    if ids is None:
        assert not data or 0 in packet_ids or tail
    else:
        assert isinstance(decoded, list) and all(isinstance(packet, PubAck) for packet in decoded)
        assert list(ids) == [packet.packet_id for packet in decoded]
        assert tail or list(ids) == packet_ids


def test_short_pubacks_are_not_read_past_buffered_bytes_or_before_connect() -> None:
    decoder = PacketDecoder(packet_bytes_max=1024, protocol_level=4)
    assert decoder.receive_data(b"\x40\x02\x00") == []  # a PUBACK's first three bytes, buffered
    assert decoder.plain_pubacks(b"\x07\x40\x02\x00") is None  # its last byte, then three of the next one
    assert [packet.packet_id for packet in decoder.receive_data(b"\x07\x40\x02\x00\x08")] == [7, 8]
    assert PacketDecoder(packet_bytes_max=1024).plain_pubacks(b"\x40\x02\x00\x01") is None  # no CONNECT yet
