"""Security on MQTT (paho-mqtt, mosquitto_pub) and AMQP (pika): TLS, passwords, certificates, ACLs."""

from __future__ import annotations

import queue
import ssl
import subprocess
from collections.abc import Iterator
from typing import Any

import paho.mqtt.client as mqtt
import pika
import pika.exceptions
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from mqbroker.protocols.amqp.stored import queue_topic
from tests.integration.security_support import (
    MQTT_LOG_TOPIC,
    PASSWORDS,
    SecuredBroker,
    acl,
    start_secured_broker,
)

TIMEOUT_S = 10


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    """A secured broker: alice reads and writes, bob only reads, carol has no MQTT/AMQP rights."""
    for broker in start_secured_broker(tmp_path_factory.mktemp("secured-mqtt-amqp")):
        with broker.admin() as admin:
            admin.create_acls([
                acl("User:alice", "all", "topic", MQTT_LOG_TOPIC), acl("User:bob", "read", "topic", MQTT_LOG_TOPIC),
                acl("User:alice", "all", "topic", queue_topic("orders-q")),
                acl("User:bob", "read", "topic", queue_topic("ledger-q")),
            ])
        with _amqp(broker, certificate="admin") as connection:  # the super user, by its certificate (EXTERNAL)
            connection.channel().queue_declare("ledger-q", durable=True)
        yield broker


def _end_offset(broker: SecuredBroker, topic: str) -> int:
    with broker.admin() as admin:
        return admin.list_offset(topic, 0, -1)


# ---- MQTT -------------------------------------------------------------------------------------


class Paho:
    """A paho MQTT 5 client over TLS that records CONNACK, SUBACK, PUBACK and messages."""

    def __init__(self, broker: SecuredBroker, user: str | None, password: str | None = None,
                 certificate: str | None = None) -> None:
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"sec-{user or certificate}",
                                  protocol=mqtt.MQTTv5)
        certfile, keyfile = broker.files.clients[certificate] if certificate else (None, None)
        self.client.tls_set(ca_certs=str(broker.files.ca), certfile=certfile and str(certfile),
                            keyfile=keyfile and str(keyfile), tls_version=ssl.PROTOCOL_TLS_CLIENT)
        if user is not None:
            self.client.username_pw_set(user, password if password is not None else PASSWORDS[user])
        self.client.on_connect = lambda client, userdata, flags, reason, properties: self.events.put(("connack", reason))
        self.client.on_subscribe = lambda client, userdata, mid, reasons, properties: self.events.put(("suback", reasons))
        self.client.on_publish = lambda client, userdata, mid, reason, properties: self.events.put(("puback", reason))
        self.client.on_message = lambda client, userdata, message: self.events.put(("message", message.payload))
        self.client.connect("localhost", broker.tls_ports["mqtt"])
        self.client.loop_start()

    def expect(self, kind: str) -> Any:
        """The next event, which must be of ``kind``."""
        event, value = self.events.get(timeout=TIMEOUT_S)
        assert event == kind, (event, value)
        return value

    def close(self) -> None:
        """Disconnect and stop the network thread."""
        self.client.disconnect()
        self.client.loop_stop()


def test_mqtt_over_tls_with_username_and_password(secured: SecuredBroker) -> None:
    client = Paho(secured, "alice")
    try:
        assert client.expect("connack").value == 0
        client.client.subscribe("alice/t", qos=1)
        assert [code.value for code in client.expect("suback")] == [1]
        client.client.publish("alice/t", b"hello", qos=1)
        events = [client.events.get(timeout=TIMEOUT_S) for _ in range(2)]
        assert ("message", b"hello") in events
        assert any(kind == "puback" and reason.value == 0 for kind, reason in events), events
    finally:
        client.close()


def test_mqtt_wrong_password_is_refused_in_connack(secured: SecuredBroker) -> None:
    client = Paho(secured, "alice", password="wrong")
    try:
        assert client.expect("connack").value == 0x86  # bad user name or password
    finally:
        client.close()


def test_mqtt_read_only_principal_is_refused_on_publish_and_nothing_is_written(secured: SecuredBroker) -> None:
    before = _end_offset(secured, MQTT_LOG_TOPIC)
    client = Paho(secured, "bob")
    try:
        assert client.expect("connack").value == 0
        client.client.subscribe("bob/t", qos=1)
        assert [code.value for code in client.expect("suback")] == [1]  # bob may read
        client.client.publish("bob/t", b"forged", qos=1)
        assert client.expect("puback").value == 0x87  # not authorized
        client.client.publish("bob/retained", b"forged", qos=0, retain=True)
        client.expect("puback")  # paho reports a QoS 0 publish as sent
        client.client.publish("bob/t", b"after the retained one", qos=1)
        assert client.expect("puback").value == 0x87
    finally:
        client.close()
    assert _end_offset(secured, MQTT_LOG_TOPIC) == before


def test_mqtt_subscription_without_read_is_refused(secured: SecuredBroker) -> None:
    client = Paho(secured, "carol")
    try:
        assert client.expect("connack").value == 0
        client.client.subscribe("carol/#", qos=1)
        assert [code.value for code in client.expect("suback")] == [0x87]
    finally:
        client.close()


def test_mosquitto_pub_with_a_client_certificate(secured: SecuredBroker) -> None:
    certificate, key = secured.files.clients["alice"]
    before = _end_offset(secured, MQTT_LOG_TOPIC)
    common = ["-h", "localhost", "-p", str(secured.tls_ports["mqtt"]), "--cafile", str(secured.files.ca),
              "-t", "alice/cert", "-m", "by certificate", "-q", "1"]
    done = subprocess.run(["mosquitto_pub", *common, "--cert", str(certificate), "--key", str(key)],
                          capture_output=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    assert _end_offset(secured, MQTT_LOG_TOPIC) == before + 1
    anonymous = subprocess.run(["mosquitto_pub", *common], capture_output=True, timeout=TIMEOUT_S)
    assert anonymous.returncode != 0  # anonymous access is off: CONNACK not authorized
    assert _end_offset(secured, MQTT_LOG_TOPIC) == before + 1


# ---- AMQP -------------------------------------------------------------------------------------


def _amqp(broker: SecuredBroker, user: str | None = None, password: str | None = None,
          certificate: str | None = None) -> pika.BlockingConnection:
    credentials: Any = (pika.credentials.ExternalCredentials() if certificate
                        else pika.PlainCredentials(user, password or PASSWORDS[user]))
    parameters = pika.ConnectionParameters(
        host="localhost", port=broker.tls_ports["amqp"], credentials=credentials,
        ssl_options=pika.SSLOptions(broker.client_context(certificate), "localhost"),
        connection_attempts=1, blocked_connection_timeout=TIMEOUT_S,
    )
    return pika.BlockingConnection(parameters)


def test_amqp_over_tls_with_plain_credentials(secured: SecuredBroker) -> None:
    with _amqp(secured, "alice") as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("orders-q", durable=True)
        channel.basic_publish("", "orders-q", b"order 1", mandatory=True)
        method, _, body = channel.basic_get("orders-q", auto_ack=True)
        assert method is not None and body == b"order 1"


def test_amqp_external_authenticates_by_certificate(secured: SecuredBroker) -> None:
    with _amqp(secured, certificate="alice") as connection:
        channel = connection.channel()
        channel.queue_declare("orders-q", durable=True, passive=True)


def test_amqp_wrong_password_is_refused(secured: SecuredBroker) -> None:
    with pytest.raises((pika.exceptions.ProbableAuthenticationError, pika.exceptions.ConnectionClosedByBroker)):
        _amqp(secured, "alice", password="wrong")


def test_amqp_read_only_principal_is_refused_on_publish_and_nothing_is_written(secured: SecuredBroker) -> None:
    with _amqp(secured, "bob") as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.basic_publish("", "ledger-q", b"forged")
        assert refused.value.reply_code == 403
        reader = connection.channel()
        method, _, _ = reader.basic_get("ledger-q", auto_ack=True)  # bob may read it
        assert method is None
    assert _end_offset(secured, queue_topic("ledger-q")) == 0
