"""Security on the native protocol with the real client: TLS, SCRAM, anonymous access off, ACLs, CLI."""

from __future__ import annotations

import os
import pathlib
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator

import pytest

from mqbroker.security.certs import init_directory
from mqbroker.client import Admin, Consumer, Producer
from mqbroker.client.connection import BlockingConnection, BrokerUnavailableError
from mqbroker.client.security import ClientSecurity
from mqbroker.client.tls import client_ssl_context
from mqbroker.errors import (
    SaslAuthenticationError,
    TopicAuthorizationError,
    UnsupportedSaslMechanismError,
)
from tests.integration.security_support import PASSWORDS, SecuredBroker, acl, start_secured_broker

CLI = "import sys; from mqbroker.cli import main; sys.exit(main(sys.argv[1:]))"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    """One secured broker for the module, with ACLs for alice, bob and carol."""
    for broker in start_secured_broker(tmp_path_factory.mktemp("secured-native")):
        with broker.admin() as admin:
            admin.create_topics(["orders", "ledger", "metrics.cpu", "metricsx", "secret", "public"], partitions=1)
            admin.create_acls([
                acl("User:alice", "write", "topic", "orders"), acl("User:alice", "read", "topic", "orders"),
                acl("User:bob", "read", "topic", "ledger"),
                acl("User:alice", "write", "topic", "metrics.", pattern_type="prefixed"),
                acl("User:carol", "all", "topic", "*"),
                acl("User:carol", "write", "topic", "secret", permission="deny"),
            ])
        yield broker


def _produce(broker: SecuredBroker, user: str, topic: str, count: int = 3, mechanism: str = "SCRAM-SHA-512") -> None:
    with Producer(broker.tls_bootstrap, acks=1, security=broker.security(user, mechanism)) as producer:
        futures = [producer.send(topic, value=f"{user}-{index}".encode()) for index in range(count)]
        producer.flush(10)
        for future in futures:
            future.result(10)


def _end_offset(broker: SecuredBroker, topic: str) -> int:
    with broker.admin() as admin:
        return admin.list_offset(topic, 0, -1)


def test_scram_over_tls_round_trip(secured: SecuredBroker) -> None:
    _produce(secured, "alice", "orders", 5)
    consumer = Consumer(secured.tls_bootstrap, topics=["orders"], auto_offset_reset="earliest",
                        security=secured.security("alice", "SCRAM-SHA-256"))
    try:
        values: list[bytes] = []
        for _ in range(50):
            values += [message.value for message in consumer.poll(0.2)]
            if len(values) >= 5:
                break
    finally:
        consumer.close()
    assert [value for value in values if value.startswith(b"alice")][:5] == [f"alice-{i}".encode() for i in range(5)]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_wrong_scram_password_is_refused(secured: SecuredBroker, mechanism: str) -> None:
    security = secured.security("alice", mechanism, password="not-her-password")
    with pytest.raises(SaslAuthenticationError):
        BlockingConnection("localhost", secured.tls_ports["native"], "t", 5.0, security)


def test_an_unknown_user_fails_like_a_wrong_password(secured: SecuredBroker) -> None:
    security = secured.security("nobody", password="x")
    with pytest.raises(SaslAuthenticationError):
        BlockingConnection("localhost", secured.tls_ports["native"], "t", 5.0, security)


def test_anonymous_clients_are_refused_when_disabled(secured: SecuredBroker) -> None:
    with pytest.raises(SaslAuthenticationError), Admin(secured.plain_bootstrap) as admin:
        admin.list_topics()


def test_plain_is_refused_without_tls_and_accepted_over_tls(secured: SecuredBroker) -> None:
    plaintext = ClientSecurity(sasl_mechanism="PLAIN", username="alice", password=PASSWORDS["alice"])
    with pytest.raises(UnsupportedSaslMechanismError):
        BlockingConnection("127.0.0.1", secured.process.ports["native"], "t", 5.0, plaintext)
    BlockingConnection("localhost", secured.tls_ports["native"], "t", 5.0, secured.security("alice", "PLAIN")).close()


def test_a_client_certificate_names_the_principal(secured: SecuredBroker) -> None:
    # bob's certificate (CN=bob) makes the connection User:bob, who may read the ledger but not write it
    with Admin(secured.tls_bootstrap, security=secured.security(certificate="bob")) as admin:
        assert admin.list_offset("ledger", 0, -1) >= 0
    # not idempotent: a principal without any WRITE is refused a producer id (CLUSTER_AUTHORIZATION_FAILED) first
    with Producer(secured.tls_bootstrap, acks=1, enable_idempotence=False,
                  security=secured.security(certificate="bob")) as producer:
        with pytest.raises(TopicAuthorizationError):
            producer.send("ledger", value=b"x").result(10)


def test_a_server_from_an_untrusted_ca_is_refused(secured: SecuredBroker, tmp_path: pathlib.Path) -> None:
    other = init_directory(tmp_path / "other", ["localhost"], ["mallory"])
    with pytest.raises(BrokerUnavailableError, match="TLS handshake"):
        BlockingConnection("localhost", secured.tls_ports["native"], "t", 5.0,
                           ClientSecurity(ssl_context=client_ssl_context(other.ca)))


def test_a_client_certificate_from_an_untrusted_ca_is_refused(secured: SecuredBroker, tmp_path: pathlib.Path) -> None:
    other = init_directory(tmp_path / "other", ["localhost"], ["mallory"])
    certificate, key = other.clients["mallory"]
    context = client_ssl_context(secured.files.ca, certificate, key)
    with pytest.raises(BrokerUnavailableError):
        BlockingConnection("localhost", secured.tls_ports["native"], "t", 5.0, ClientSecurity(ssl_context=context))


def test_a_wrong_hostname_is_refused(secured: SecuredBroker) -> None:
    # the certificate names localhost and 127.0.0.1, not broker.example
    connection = socket.create_connection(("127.0.0.1", secured.tls_ports["native"]), timeout=5)
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        secured.client_context().wrap_socket(connection, server_hostname="broker.example")
    connection.close()


@pytest.mark.parametrize("listener", ["native", "mqtt", "amqp"])
def test_tls_1_1_is_refused(secured: SecuredBroker, listener: str) -> None:
    port = secured.tls_ports[listener]
    old = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-tls1_1"],
                         input=b"", capture_output=True, timeout=20)
    assert old.returncode != 0
    modern = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-tls1_2",
                             "-CAfile", str(secured.files.ca)], input=b"", capture_output=True, timeout=20)
    assert b"Verify return code: 0 (ok)" in modern.stdout


def test_a_read_only_principal_cannot_write_and_nothing_is_written(secured: SecuredBroker) -> None:
    with Producer(secured.tls_bootstrap, acks=1, enable_idempotence=False, security=secured.security("bob")) as producer:
        with pytest.raises(TopicAuthorizationError):
            producer.send("ledger", value=b"forged").result(10)
    assert _end_offset(secured, "ledger") == 0


def test_a_prefixed_acl_covers_names_under_the_prefix_only(secured: SecuredBroker) -> None:
    _produce(secured, "alice", "metrics.cpu")
    with pytest.raises(TopicAuthorizationError):
        _produce(secured, "alice", "metricsx")
    assert _end_offset(secured, "metricsx") == 0


def test_deny_beats_allow(secured: SecuredBroker) -> None:
    _produce(secured, "carol", "public")
    with pytest.raises(TopicAuthorizationError):
        _produce(secured, "carol", "secret")
    assert _end_offset(secured, "secret") == 0


def test_users_and_acls_are_managed_with_the_cli(secured: SecuredBroker) -> None:
    files = secured.files
    certificate, key = files.clients["admin"]
    options = ["--bootstrap", secured.tls_bootstrap, "--tls-ca", str(files.ca), "--tls-cert", str(certificate),
               "--tls-key", str(key)]

    def cli(*arguments: str) -> str:
        done = subprocess.run([sys.executable, "-c", CLI, *arguments, *options], capture_output=True,
                              text=True, timeout=60, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        assert done.returncode == 0, done.stderr
        return done.stdout

    cli("users", "add", "dave", "--password", "dave-secret")
    assert "dave" in cli("users", "list").split()
    cli("acls", "add", "--allow", "User:dave", "--operation", "write", "--topic", "orders")
    assert "User:dave" in cli("acls", "list", "--topic", "orders")
    producer_security = secured.security("dave", password="dave-secret")
    with Producer(secured.tls_bootstrap, acks=1, security=producer_security) as producer:
        producer.send("orders", value=b"from dave").result(10)
    cli("users", "passwd", "dave", "--password", "dave-new")
    with pytest.raises(SaslAuthenticationError):
        BlockingConnection("localhost", secured.tls_ports["native"], "t", 5.0, producer_security)
    cli("acls", "remove", "--allow", "User:dave", "--operation", "write", "--topic", "orders")
    assert "User:dave" not in cli("acls", "list")
    cli("users", "remove", "dave")
    assert "dave" not in cli("users", "list").split()
