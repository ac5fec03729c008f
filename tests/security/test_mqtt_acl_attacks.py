"""MQTT topic ACLs under attack (issue 17 #10), with paho-mqtt 3.1.1 and 5.0 clients.

A secured broker (SCRAM users, the ACL authorizer) whose MQTT topic ACLs are Mosquitto's fleet
recipe (docs/mqtt.md): every device may write and read under ``devices/<its client id>/`` only.
Both devices log in as alice, so only the client id tells them apart. Each test performs the
attack, checks the refusal the MQTT version defines, that nothing was written and the ACLs and
topics are unchanged, and that an honest device is still served.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from mqbroker.client import Admin
from tests.integration.security_support import MQTT_LOG_TOPIC, PASSWORDS, SecuredBroker, acl, start_secured_broker
from tests.security.support import state_of

TIMEOUT_S = 10
FLEET_ACLS = [
    acl("User:*", "write", "mqtt_topic", "devices/%c/#"),
    acl("User:*", "read", "mqtt_topic", "devices/%c/#"),
    acl("User:*", "all", "topic", MQTT_LOG_TOPIC),  # the log topic every MQTT topic maps to
]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    """Passwords over plaintext MQTT are allowed here (the attacks are about topics, not transport)."""
    for broker in start_secured_broker(tmp_path_factory.mktemp("mqtt-acls"),
                                       extra_args=("--set", "security.plain_without_tls=true")):
        with broker.admin() as admin:
            admin.create_acls(FLEET_ACLS)
        yield broker


class Device:
    """A paho client (3.1.1 or 5.0) logged in as alice with ``client_id``; records what the broker answers."""

    def __init__(self, broker: SecuredBroker, client_id: str, version: int = mqtt.MQTTv5,
                 will: tuple[str, bytes] | None = None) -> None:
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._aside: list[tuple[str, Any]] = []
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=version)
        self.client.username_pw_set("alice", PASSWORDS["alice"])
        if will is not None:
            self.client.will_set(will[0], will[1], qos=1)
        self.client.on_connect = lambda client, userdata, flags, reason, properties: self.events.put(("connack", reason))
        self.client.on_subscribe = lambda client, userdata, mid, reasons, properties: self.events.put(("suback", reasons))
        self.client.on_publish = lambda client, userdata, mid, reason, properties: self.events.put(("puback", reason))
        self.client.on_message = lambda client, userdata, message: self.events.put(("message", (message.topic,
                                                                                               message.payload)))
        self.client.connect("127.0.0.1", broker.process.ports["mqtt"])
        self.client.loop_start()

    def expect(self, kind: str) -> Any:
        """The next event of ``kind`` (events of other kinds, e.g. a message that overtook its PUBACK, wait their
        turn, in order)."""
        for index, (event, value) in enumerate(self._aside):
            if event == kind:
                del self._aside[index]
                return value
        while True:
            event, value = self.events.get(timeout=TIMEOUT_S)
            if event == kind:
                return value
            assert event != "connack", f"unexpected reconnection while waiting for a {kind}"
            self._aside.append((event, value))

    def codes(self, kind: str) -> list[int]:
        """The reason codes of the next ``kind`` event (SUBACK: one per filter)."""
        value = self.expect(kind)
        return [int(getattr(code, "value", code)) for code in (value if isinstance(value, list) else [value])]

    def messages_until(self, payload: bytes) -> list[tuple[str, bytes]]:
        """Every message received before the one carrying ``payload`` (a marker: log order is delivery order)."""
        found = []
        while True:
            message = self.expect("message")
            if message[1] == payload:
                return found
            found.append(message)

    def close(self) -> None:
        """Disconnect and stop the network thread."""
        self.client.disconnect()
        self.client.loop_stop()


def _log_end(secured: SecuredBroker) -> int:
    with secured.admin() as admin:
        return admin.list_offset(MQTT_LOG_TOPIC, 0, -1)


def _state(secured: SecuredBroker) -> Any:
    with secured.admin() as admin:
        return state_of(admin)


def _honest(secured: SecuredBroker) -> None:
    """dev-honest publishes under its own id and reads it back."""
    device = Device(secured, "dev-honest")
    try:
        assert device.codes("connack") == [0]
        device.client.subscribe("devices/dev-honest/#", qos=1)
        assert device.codes("suback") == [1]
        device.client.publish("devices/dev-honest/t", b"honest", qos=1)
        assert device.codes("puback") == [0]
        assert device.messages_until(b"honest") == []
    finally:
        device.close()


def test_a_device_cannot_publish_under_another_devices_id(secured: SecuredBroker) -> None:
    """QoS 1 to devices/dev-2/... as dev-1: PUBACK 0x87 on 5.0; a 3.1.1 client gets its PUBACK (3.1.1 has no
    reason codes) and nothing is written either way; the denial is audited."""
    before, end = _state(secured), _log_end(secured)
    for version in (mqtt.MQTTv5, mqtt.MQTTv311):
        device = Device(secured, "dev-1", version)
        try:
            assert device.codes("connack") == [0]
            device.client.publish("devices/dev-2/commands/unlock", b"forged", qos=1)
            reason = device.codes("puback")
            assert reason == ([0x87] if version == mqtt.MQTTv5 else [0])
        finally:
            device.close()
    assert _log_end(secured) == end and _state(secured) == before
    assert "DENIED principal=User:alice host=127.0.0.1 operation=write resource=mqtt_topic:devices/dev-2/commands/" \
           "unlock" in secured.process.log_text()
    _honest(secured)


@pytest.mark.parametrize("version, refused", [(mqtt.MQTTv311, 0x80), (mqtt.MQTTv5, 0x87)])
def test_subscribing_to_another_devices_topics_is_refused_per_filter(secured: SecuredBroker, version: int,
                                                                     refused: int) -> None:
    """One SUBSCRIBE, two filters: its own is granted, the other device's refused (0x80 for 3.1.1, 0x87 for 5.0)."""
    before = _state(secured)
    device = Device(secured, "dev-1", version)
    try:
        assert device.codes("connack") == [0]
        device.client.subscribe([("devices/dev-1/#", 1), ("devices/dev-2/#", 1)])
        assert device.codes("suback") == [1, refused]
    finally:
        device.close()
    assert _state(secured) == before
    _honest(secured)


def test_a_subscription_to_everything_brings_only_what_the_device_may_read(secured: SecuredBroker) -> None:
    """dev-1 subscribes to '#' (granted: something under it is readable); dev-2's retained and live messages never
    reach it, its own do."""
    other = Device(secured, "dev-2")
    spy = None
    try:
        assert other.codes("connack") == [0]
        other.client.publish("devices/dev-2/state", b"dev-2 retained", qos=1, retain=True)
        assert other.codes("puback") == [0]
        spy = Device(secured, "dev-1")
        assert spy.codes("connack") == [0]
        spy.client.subscribe("#", qos=1)
        assert spy.codes("suback") == [1]
        other.client.publish("devices/dev-2/temperature", b"dev-2 live", qos=1)
        assert other.codes("puback") == [0]
        spy.client.publish("devices/dev-1/marker", b"marker", qos=1)
        assert spy.messages_until(b"marker") == []  # nothing of dev-2's, retained or live
    finally:
        other.close()
        if spy is not None:
            spy.close()
    _honest(secured)


@pytest.mark.parametrize("version", [mqtt.MQTTv311, mqtt.MQTTv5])
def test_a_will_on_another_devices_topic_refuses_the_connect(secured: SecuredBroker, version: int) -> None:
    """A will is a publish the broker makes later for the client: checked at CONNECT (CONNACK not authorized:
    return code 5 on 3.1.1, which paho reports as 0x87, and 0x87 on 5.0), so it can never be written."""
    end = _log_end(secured)
    device = Device(secured, "dev-1", version, will=("devices/dev-2/commands/unlock", b"forged will"))
    try:
        assert device.codes("connack") == [0x87]
    finally:
        device.client.loop_stop()
    assert _log_end(secured) == end
    _honest(secured)


@pytest.mark.parametrize("client_id", ["+", "#", "dev-1/../dev-2"])
def test_a_client_id_made_of_wildcards_or_levels_gets_nothing(secured: SecuredBroker, client_id: str) -> None:
    """'devices/%c/#' with %c = '+' would be devices/+/#: every device. Such an id gets nothing from the pattern."""
    end = _log_end(secured)
    device = Device(secured, client_id)
    try:
        assert device.codes("connack") == [0]
        device.client.publish("devices/dev-2/commands/unlock", b"forged", qos=1)
        assert device.codes("puback") == [0x87]
        device.client.subscribe("devices/+/commands/#", qos=1)
        assert device.codes("suback") == [0x87]
    finally:
        device.close()
    assert _log_end(secured) == end
    _honest(secured)


@pytest.mark.parametrize("binding, refusal", [
    (acl("User:*", "delete", "mqtt_topic", "devices/#"), "read, write or all"),
    (acl("User:*", "write", "mqtt_topic", "devices/", pattern_type="prefixed"), "not a prefix"),
    (acl("User:*", "write", "mqtt_topic", "devices/a#"), "whole level"),
])
def test_an_mqtt_topic_acl_that_means_nothing_is_refused(secured: SecuredBroker, binding: Any, refusal: str) -> None:
    """Even a super user cannot store an MQTT topic ACL that would not mean what it says (INVALID_REQUEST); the
    ACLs in force stay as they were."""
    with Admin(secured.tls_bootstrap, security=secured.security(certificate="admin")) as admin:
        before = sorted(admin.describe_acls(), key=repr)
        with pytest.raises(Exception, match=refusal):
            admin.create_acls([binding])
        assert sorted(admin.describe_acls(), key=repr) == before
        listed = [(b.resource_name, b.operation) for b in before if b.resource_type == "mqtt_topic"]
        assert sorted(listed) == [("devices/%c/#", "read"), ("devices/%c/#", "write")]
    _honest(secured)
