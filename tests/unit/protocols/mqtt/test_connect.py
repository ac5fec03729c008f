"""CONNECT negotiation: granted keep-alive, refusals at each level, and a CONNACK that names only what differs."""

from __future__ import annotations

from mqbroker.protocols.mqtt.connect import (
    SessionConfig,
    connack_properties,
    connack_refusal,
    granted_keep_alive_s,
    will_refusal,
)
from mqbroker.protocols.mqtt.packets import (
    Connect,
    ConnectReturnCode,
    Properties,
    ReasonCode,
    Will,
)


def test_a_5_0_client_gets_the_server_keep_alive_and_a_3_1_1_client_keeps_its_own() -> None:
    config = SessionConfig(keep_alive_s_max=60)
    assert granted_keep_alive_s(Connect(client_id="c", keep_alive_s=600), config) == 60
    assert granted_keep_alive_s(Connect(client_id="c", keep_alive_s=0), config) == 60  # 0 would mean "never"
    assert granted_keep_alive_s(Connect(protocol_level=4, client_id="c", keep_alive_s=600), config) == 600


def test_a_refusal_keeps_its_reason_at_5_0_and_maps_to_the_nearest_3_1_1_return_code() -> None:
    assert connack_refusal(5, ReasonCode.QUOTA_EXCEEDED, "busy").reason_code == ReasonCode.QUOTA_EXCEEDED
    assert connack_refusal(4, ReasonCode.NOT_AUTHORIZED).reason_code == ConnectReturnCode.NOT_AUTHORIZED
    assert connack_refusal(4, ReasonCode.QUOTA_EXCEEDED).reason_code == ConnectReturnCode.SERVER_UNAVAILABLE


def test_a_will_above_the_maximum_qos_or_on_a_wildcard_topic_is_refused() -> None:
    config = SessionConfig(maximum_qos=1)
    assert will_refusal(Will(topic="t", payload=b"", qos=2), config) == ReasonCode.QOS_NOT_SUPPORTED
    assert will_refusal(Will(topic="a/+", payload=b""), config) == ReasonCode.TOPIC_NAME_INVALID
    assert will_refusal(Will(topic="t", payload=b"", qos=1), config) is None


def test_the_connack_names_an_assigned_client_id_and_only_the_granted_values_that_differ() -> None:
    connect = Connect(client_id="", keep_alive_s=30, properties=Properties(session_expiry_interval_s=10))
    properties = connack_properties(connect, SessionConfig(), client_id="generated", expiry_interval_s=10,
                                    keep_alive_s=30)
    assert properties.assigned_client_identifier == "generated"
    assert properties.session_expiry_interval_s is None and properties.server_keep_alive_s is None
    capped = connack_properties(connect, SessionConfig(), client_id="generated", expiry_interval_s=5, keep_alive_s=20)
    assert capped.session_expiry_interval_s == 5 and capped.server_keep_alive_s == 20
