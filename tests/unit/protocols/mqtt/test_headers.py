"""A log record's MQTT message: the same topic and headers again (remembered) still give each record its own
payload and time, and what is not for MQTT subscribers stays so."""

from __future__ import annotations

from mqbroker.protocols.mqtt import headers as mqtt_headers
from mqbroker.protocols.mqtt.headers import message_from_record, record_headers
from mqbroker.protocols.mqtt.packets import NO_PROPERTIES, Properties


def test_records_of_one_topic_and_headers_keep_their_own_payload_and_time() -> None:
    plain = record_headers(1, False, "device-1", NO_PROPERTIES)
    first = message_from_record(b"plant/a", b"1", plain, 10)
    second = message_from_record(b"plant/a", b"2", plain, 20)
    assert first is not None and second is not None
    assert (first.topic, first.qos, first.origin_client_id, first.payload, first.created_ms) == (
        "plant/a", 1, "device-1", b"1", 10)
    assert (second.payload, second.created_ms) == (b"2", 20)


def test_a_key_that_is_no_topic_name_is_not_delivered_the_second_time_either() -> None:
    for _ in range(2):
        assert message_from_record(b"plant/#", b"x", (), 0) is None
        assert message_from_record(None, b"x", (), 0) is None


def test_records_with_properties_or_large_headers_are_read_each_time_and_not_remembered() -> None:
    with_properties = record_headers(1, False, "device-1", Properties(content_type="text/plain"))
    message = message_from_record(b"plant/b", b"x", with_properties, 0)
    assert message is not None and message.properties.content_type == "text/plain"
    large = (("mqtt.client_id", b"c" * 4096),)
    assert message_from_record(b"plant/c", b"x", large, 0) is not None
    remembered = {key for key, _ in mqtt_headers._SHAPES}
    assert b"plant/b" not in remembered and b"plant/c" not in remembered
