"""The wiring around the security libraries: config keys, metadata records, listeners, adapter timeouts."""

from __future__ import annotations

import contextlib
import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.address import IPv4Address
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from mqbroker.security.acl import Acl, Permission
from mqbroker.records.readable import UnreadableTally
from mqbroker.security.auth import Authenticator, CredentialStore, UserRecord
from mqbroker.config import BrokerConfig, ConfigError, build_config
from mqbroker.errors import (
    InvalidRequestError,
    ResourceNotFoundError,
    SaslAuthenticationError,
    UnacceptableCredentialError,
)
from mqbroker.protocols.listeners import ConnectionLimitingFactory
from mqbroker.cluster.metadata_records import PutGenericRecord
from mqbroker.model import ANONYMOUS, Operation, Principal, ResourceType
from mqbroker.protocols.adapter import CodecProtocol
from mqbroker.protocols.native import messages as m
from mqbroker.protocols.native.security import ConnectionSecurity
from mqbroker.security.quotas import ConnectionLimiter
from mqbroker.security.scram import ScramMechanism, make_credential, salted_password
from mqbroker.security.service import ACL_KIND, USER_KIND, SecurityServices
from mqbroker.service import front_end_security
from tests.fakes import FakeClusterView


def test_security_and_quota_tables_become_config_keys() -> None:
    config = build_config({"security.allow_anonymous": False, "security.authorizer": "acl",
                           "security.super_users": ["User:admin", "User:ops"], "quotas.connections_max": 5})
    assert (config.security_allow_anonymous, config.security_authorizer) == (False, "acl")
    assert config.security_super_users == "User:admin,User:ops" and config.quotas_connections_max == 5


@pytest.mark.parametrize("key, value", [("security.authorizer", "maybe"), ("tls_client_auth", "sometimes"),
                                        ("quotas.connections_max", -1)])
def test_bad_security_values_name_their_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match="configuration key"):
        build_config({key: value})


def _authenticator(allow_anonymous: bool) -> Authenticator:
    store = CredentialStore(os.urandom, iterations=4096)
    store.add("alice", "secret")
    return Authenticator(store, os.urandom, allow_anonymous=allow_anonymous)


def test_uncheckable_credentials_are_anonymous_only_when_anonymous_is_allowed() -> None:
    open_broker = _authenticator(allow_anonymous=True)
    assert open_broker.authenticate_password_or_anonymous("guest", "guest", True, "h").name == ANONYMOUS.name
    assert open_broker.authenticate_password_or_anonymous("alice", "secret", False, "h").name == ANONYMOUS.name
    assert open_broker.authenticate_password_or_anonymous("alice", "secret", True, "h").name == "alice"
    with pytest.raises(SaslAuthenticationError):
        open_broker.authenticate_password_or_anonymous("alice", "wrong", True, "h")
    with pytest.raises(SaslAuthenticationError):
        _authenticator(allow_anonymous=False).authenticate_password_or_anonymous("guest", "guest", True, "h")


def test_users_and_acls_follow_the_metadata_records() -> None:
    acl = Acl(principal="User:alice", resource_type=ResourceType.TOPIC, resource_name="orders",
              operation=Operation.WRITE, permission=Permission.ALLOW)
    cluster = FakeClusterView()
    cluster.apply(PutGenericRecord(kind=ACL_KIND, key=acl.to_bytes().decode(), value=acl.to_json()))
    services = SecurityServices(build_config({"security.authorizer": "acl"}), cluster)
    alice = Principal("User", "alice", "10.0.0.1")
    assert services.authorizer.authorize(alice, Operation.WRITE, ResourceType.TOPIC, "orders")
    store = CredentialStore(os.urandom, iterations=4096)
    record = store.add("alice", "secret")
    cluster.apply(PutGenericRecord(kind=USER_KIND, key="alice", value=json.loads(record.to_bytes())))
    assert services.authenticator.authenticate_password("alice", "secret", True, "h").name == "alice"
    cluster.apply(PutGenericRecord(kind=ACL_KIND, key=acl.to_bytes().decode(), value=None))
    assert not services.authorizer.authorize(alice, Operation.WRITE, ResourceType.TOPIC, "orders")


def test_a_new_user_is_proposed_as_a_record_without_its_password() -> None:
    cluster = FakeClusterView()
    services = SecurityServices(build_config({"security.authorizer": "acl"}), cluster)
    services.upsert_user("bob", "bob-password", create=True)
    [proposed] = cluster.proposed
    assert isinstance(proposed, PutGenericRecord) and (proposed.kind, proposed.key) == (USER_KIND, "bob")
    assert "bob-password" not in json.dumps(proposed.value)
    assert services.list_users() == ["bob"]  # committed at once by the fake controller, and applied


def test_a_user_or_acl_record_that_does_not_decode_is_counted_and_skipped() -> None:
    """The metadata replay goes on: the records after a broken one are applied."""
    cluster = FakeClusterView()
    tally = UnreadableTally()
    services = SecurityServices(build_config({"security.authorizer": "acl"}), cluster, unreadable=tally)
    record = CredentialStore(os.urandom, iterations=4096).add("alice", "secret")
    for broken in ({"name": "bob"}, {"name": "bob", "credentials": [{"mechanism": "SCRAM-SHA-512", "iterations": 1}]},
                   ["not", "a", "user"]):
        cluster.apply(PutGenericRecord(kind=USER_KIND, key="bob", value=broken))
    cluster.apply(PutGenericRecord(kind=ACL_KIND, key="{not an acl", value={}))
    cluster.apply(PutGenericRecord(kind=USER_KIND, key="alice", value=json.loads(record.to_bytes())))
    assert services.authenticator.authenticate_password("alice", "secret", True, "h").name == "alice"
    assert tally.counts() == {("metadata replay", "__cluster_metadata"): 4}


@given(value=st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                          lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12),
                                                                                            children, max_size=4)))
def test_garbage_user_records_raise_only_invalid_request(value: object) -> None:
    with contextlib.suppress(InvalidRequestError):
        UserRecord.from_bytes(json.dumps(value).encode())
    with contextlib.suppress(InvalidRequestError):
        UserRecord.from_bytes(json.dumps({"name": "x", "credentials": [value]}).encode())


def test_connections_beyond_the_limit_are_refused_and_slots_come_back() -> None:
    limiter = ConnectionLimiter(total_max=10, per_host_max=2)
    factory = ConnectionLimitingFactory(Factory.forProtocol(Protocol), limiter, "test")
    address = IPv4Address("TCP", "10.0.0.1", 1000)
    first, second = factory.buildProtocol(address), factory.buildProtocol(address)
    assert first is not None and second is not None and factory.buildProtocol(address) is None
    first.makeConnection(StringTransport())
    first.connectionLost(None)
    assert factory.buildProtocol(address) is not None


class _Session:
    def __init__(self) -> None:
        self.buffered_bytes = 0

    def connection_made(self, connection: object) -> None:
        pass

    def data_received(self, data: bytes) -> None:
        self.buffered_bytes += len(data)
        if self.buffered_bytes >= 4:
            self.buffered_bytes = 0  # a whole frame

    def connection_lost(self, reason: object) -> None:
        pass


def test_a_frame_trickled_too_slowly_closes_the_connection() -> None:
    clock = Clock()
    protocol = CodecProtocol(_Session(), idle_timeout_s=60.0, frame_timeout_s=1.0)
    protocol.callLater = clock.callLater
    transport = StringTransport()
    protocol.makeConnection(transport)
    for _ in range(4):  # complete frames in time: fine
        clock.advance(0.2)
        protocol.dataReceived(b"x")
    clock.advance(0.9)
    assert not transport.disconnecting
    protocol.dataReceived(b"x")  # a frame begins ...
    for _ in range(5):
        clock.advance(0.3)  # ... and trickles
        if not transport.disconnecting:
            protocol.dataReceived(b"")
    assert transport.disconnecting


def _fetch(replica_id: int) -> tuple[m.FetchRequest, m.FetchResponse]:
    request = m.FetchRequest(replica_id=replica_id, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=())
    response = m.FetchResponse(topics=(m.FetchTopicResult(name="t", partitions=(
        m.FetchPartitionResult(partition_index=0, high_watermark=1, last_stable_offset=1, log_start_offset=0,
                               records=b"x" * 100_000),)),))
    return request, response


def test_consumer_fetches_are_throttled_and_replica_fetches_are_not() -> None:
    config = BrokerConfig(quotas_principal_fetch_bytes_per_second=10_000)
    security = ConnectionSecurity(front_end_security(SecurityServices(config)), config, secure=False,
                                  host="127.0.0.1", peer_certificate=lambda: None)
    principal = Principal("User", "ANONYMOUS")
    assert security.throttle_ms(principal, "replica-2", *_fetch(replica_id=2), now_ms=0) == 0
    assert security.throttle_ms(principal, "consumer", *_fetch(replica_id=-1), now_ms=0) > 0


def test_salted_credentials_from_a_kafka_client_authenticate_like_a_password_would() -> None:
    """AlterUserScramCredentials carries Hi(password, salt, iterations); the stored keys match a password's."""
    cluster = FakeClusterView()
    services = SecurityServices(build_config({"security.authorizer": "acl"}), cluster)
    salted = salted_password(ScramMechanism.SHA_512, "s3cret", b"salty", 8192)
    services.alter_scram_credentials("carol", upsertions=[(ScramMechanism.SHA_512, b"salty", 8192, salted)],
                                     deletions=[])
    assert services.store.lookup("carol", ScramMechanism.SHA_512) == make_credential(ScramMechanism.SHA_512, "s3cret",
                                                                                     b"salty", 8192)
    assert services.describe_users() == {"carol": {ScramMechanism.SHA_512: 8192}}
    with pytest.raises(ResourceNotFoundError):
        services.alter_scram_credentials("carol", upsertions=[], deletions=[ScramMechanism.SHA_256])
    with pytest.raises(UnacceptableCredentialError):
        services.alter_scram_credentials("carol", upsertions=[(ScramMechanism.SHA_256, b"s", 10, salted)], deletions=[])
    services.alter_scram_credentials("carol", upsertions=[], deletions=[ScramMechanism.SHA_512])
    last = cluster.proposed[-1]
    assert isinstance(last, PutGenericRecord) and (last.kind, last.key, last.value) == (USER_KIND, "carol", None)
    assert services.describe_users() == {}  # no credential left: the user goes
