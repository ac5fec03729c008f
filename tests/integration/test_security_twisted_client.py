"""The Twisted client on a secured broker: TLS (server verified by CA and host name) and SASL SCRAM/PLAIN."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
import pytest_twisted
from twisted.internet import reactor

from mqbroker.security.certs import init_directory
from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.client.security import ClientSecurity
from mqbroker.client.twisted import TwistedAdmin, TwistedConsumer, TwistedProducer
from mqbroker.errors import SaslAuthenticationError, TopicAuthorizationError
from tests.integration.security_support import PASSWORDS, SecuredBroker, acl, start_secured_broker


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    """A secured broker where alice may read and write ``twisted-orders`` and bob may only read it."""
    for broker in start_secured_broker(tmp_path_factory.mktemp("secured-twisted")):
        with broker.admin() as admin:
            admin.create_topics(["twisted-orders"], partitions=1)
            admin.create_acls([acl("User:alice", "all", "topic", "twisted-orders"),
                               acl("User:bob", "read", "topic", "twisted-orders")])
        yield broker


def _security(broker: SecuredBroker, user: str, mechanism: str = "SCRAM-SHA-256",
              password: str | None = None) -> ClientSecurity:
    return ClientSecurity.from_options(tls_ca=str(broker.files.ca), sasl_mechanism=mechanism, username=user,
                                       password=password or PASSWORDS[user])


@pytest_twisted.ensureDeferred
async def test_twisted_producer_and_consumer_round_trip_over_tls_with_scram(secured: SecuredBroker) -> None:
    security = _security(secured, "alice")
    producer = TwistedProducer(reactor, secured.tls_bootstrap, acks=1, security=security)
    try:
        sent = [await producer.send("twisted-orders", value=b"twisted-%d" % index) for index in range(5)]
    finally:
        await producer.close()
    consumer = TwistedConsumer(reactor, secured.tls_bootstrap, auto_offset_reset="earliest",
                               security=_security(secured, "bob", "SCRAM-SHA-512"))
    try:
        consumer.assign([("twisted-orders", 0)])
        values: list[bytes] = []
        for _ in range(50):
            values += [message.value for message in await consumer.poll() if message.offset >= sent[0].offset]
            if len(values) >= 5:
                break
    finally:
        await consumer.close()
    assert values == [b"twisted-%d" % index for index in range(5)]


@pytest_twisted.ensureDeferred
async def test_twisted_admin_with_plain_over_tls_sees_the_topics(secured: SecuredBroker) -> None:
    admin = TwistedAdmin(reactor, secured.tls_bootstrap, security=_security(secured, "alice", "PLAIN"))
    try:
        metadata = await admin.metadata(["twisted-orders"])
    finally:
        admin.close()
    assert [topic.name for topic in metadata.topics] == ["twisted-orders"]


@pytest_twisted.ensureDeferred
async def test_twisted_client_with_a_wrong_password_is_refused(secured: SecuredBroker) -> None:
    admin = TwistedAdmin(reactor, secured.tls_bootstrap, security=_security(secured, "alice", password="wrong"))
    try:
        with pytest.raises(SaslAuthenticationError):
            await admin.metadata(["twisted-orders"])
    finally:
        admin.close()


@pytest_twisted.ensureDeferred
async def test_twisted_client_is_authorized_as_its_sasl_principal(secured: SecuredBroker) -> None:
    producer = TwistedProducer(reactor, secured.tls_bootstrap, acks=1, enable_idempotence=False,
                               security=_security(secured, "bob"))
    try:
        with pytest.raises(TopicAuthorizationError):
            await producer.send("twisted-orders", value=b"bob may only read")
    finally:
        await producer.close()


@pytest_twisted.ensureDeferred
async def test_twisted_client_refuses_a_server_certificate_its_ca_did_not_sign(
    secured: SecuredBroker, tmp_path: pathlib.Path,
) -> None:
    other = init_directory(tmp_path / "other-ca", ["localhost"], [])
    security = ClientSecurity.from_options(tls_ca=str(other.ca), sasl_mechanism="PLAIN", username="alice",
                                           password=PASSWORDS["alice"])
    admin = TwistedAdmin(reactor, secured.tls_bootstrap, security=security)
    try:
        with pytest.raises(BrokerUnavailableError):
            await admin.metadata(["twisted-orders"])
    finally:
        admin.close()
