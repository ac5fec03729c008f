"""Connectors on a secured broker (TLS, SCRAM, ACLs, no anonymous access): who may create them, what
their tasks may touch, and the connectors' own internal topic (issue 21 with issue 17 part B).

A connector's tasks act as the principal that created it: alice's sink copies the topic she may
read and gets nothing from one she may not; her source writes only where she may write. The
runtime keeps its state in ``__connectors`` as ``Service:connectors`` while no client may write
there. A mirror created by the super user copies a plain source cluster into the secured one.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
import redis

from mqbroker import errors
from mqbroker.client import Admin, Consumer, Producer
from mqbroker.connector_model import TaskState
from mqbroker.connectors.state import CONNECTORS_TOPIC
from tests.integration.brokerprocess import BrokerProcess, running
from tests.integration.clusterprocess import wait_for
from tests.integration.connector_support import FAST_CONNECTORS, connector_broker, delete_every_connector, produce
from tests.integration.redisprocess import RedisProcess, running_redis
from tests.integration.security_support import SecuredBroker, acl, start_secured_broker


@pytest.fixture(scope="module")
def module_secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    """One secured broker for the module's tests (each uses its own topics and connector names)."""
    yield from start_secured_broker(tmp_path_factory.mktemp("connectors-security") / "secured", tuple(FAST_CONNECTORS))


@pytest.fixture
def secured(module_secured: SecuredBroker) -> Iterator[SecuredBroker]:
    """The module's secured broker; the test's connectors are deleted when it ends."""
    yield module_secured
    with module_secured.admin() as admin:
        delete_every_connector(admin)


@pytest.fixture
def redis_server(tmp_path: pathlib.Path) -> Iterator[RedisProcess]:
    yield from running_redis(tmp_path / "redis")


def alice_admin(secured: SecuredBroker) -> Admin:
    return Admin(secured.tls_bootstrap, security=secured.security("alice"))


def pending(server: RedisProcess, database: int, stream: str, group: str) -> int:
    """Entries of ``group`` read and not acknowledged (-1 until the source created its group)."""
    try:
        return int(server.client(database).xpending(stream, group)["pending"])
    except redis.ResponseError:
        return -1


def status_of(secured: SecuredBroker, name: str) -> object:
    with secured.admin() as admin:
        (described,) = admin.describe_connectors([name])
    return described.tasks[0]


def test_connector_tasks_act_as_their_creator_and_clients_cannot_write_the_connectors_topic(
        secured: SecuredBroker, redis_server: RedisProcess) -> None:
    with secured.admin() as admin:
        admin.create_topics(["alice-data", "secret", "alice-in"], partitions=1)
    secured_produce = secured.security(certificate="admin")
    with Producer(secured.tls_bootstrap, acks="all", security=secured_produce) as producer:
        for topic in ("alice-data", "secret"):
            for i in range(10):
                producer.send(topic, value=f"{topic}-{i}".encode())
        producer.flush()

    with alice_admin(secured) as admin, pytest.raises(errors.ClusterAuthorizationError, match="needs ALTER"):
        admin.create_connector("hers", {"type": "redis-sink", "topics": "alice-data", "redis.url": redis_server.url()})
    with secured.admin() as admin:
        admin.create_acls([acl("User:alice", "alter", "cluster", "kafka-cluster"),
                           acl("User:alice", "describe", "cluster", "kafka-cluster"),
                           acl("User:alice", "read", "topic", "alice-data"),
                           acl("User:alice", "write", "topic", "alice-in"),
                           acl("User:alice", "write", "cluster", "kafka-cluster")])

    with alice_admin(secured) as admin:
        admin.create_connector("hers", {"type": "redis-sink", "topics": "alice-data", "redis.url": redis_server.url(0)})
        admin.create_connector("not-hers", {"type": "redis-sink", "topics": "secret", "redis.url": redis_server.url(1)})
        admin.create_connector("into-hers", {"type": "redis-source", "topic": "alice-in", "redis.stream": "in",
                                             "redis.url": redis_server.url(2)})
        admin.create_connector("into-secret", {"type": "redis-source", "topic": "secret", "redis.stream": "in",
                                               "redis.url": redis_server.url(3)})
        with pytest.raises(errors.InvalidConfigError, match="principal that creates it"):
            admin.create_connector("as-admin", {"type": "redis-sink", "topics": "secret", "principal": "User:admin",
                                                "redis.url": redis_server.url()})
        (described,) = admin.describe_connectors(["hers"])
        assert described.config["principal"] == "User:alice"
    for database in (2, 3):
        redis_server.client(database).xadd("in", {"n": "1"})

    wait_for(lambda: redis_server.client(0).xlen("alice-data") == 10, what="alice's topic in Redis")
    refused = wait_for(lambda: (s := status_of(secured, "not-hers")).metrics.errors_total >= 1 and s,
                       what="the sink refused the secret topic")
    assert refused.state is not TaskState.RUNNING and refused.metrics.records_total == 0
    assert "TOPIC_AUTHORIZATION_FAILED" in (refused.metrics.last_error or "") or "Authorization" in (
        refused.metrics.last_error or ""), refused.metrics.last_error
    assert redis_server.client(1).exists("secret") == 0

    wait_for(lambda: pending(redis_server, 2, "in", "mqbroker-into-hers") == 0
             and status_of(secured, "into-hers").metrics.records_total == 1, what="alice's source produced")
    blocked = wait_for(lambda: (s := status_of(secured, "into-secret")).metrics.errors_total >= 1 and s,
                       what="the source refused the secret topic")
    assert blocked.metrics.records_total == 0 and "uthoriz" in (blocked.metrics.last_error or "")
    with secured.admin() as admin:
        assert admin.list_offset("secret", 0, -1) == 10, "nothing written by alice's source"

    with Producer(secured.tls_bootstrap, acks="all", security=secured.security("alice")) as producer:
        with pytest.raises(errors.BrokerError) as refusal:
            producer.send(CONNECTORS_TOPIC, key=b"connector/evil", value=b"{}").result(timeout=30)
    assert isinstance(refusal.value, (errors.InvalidTopicError, errors.TopicAuthorizationError)), refusal.value
    with Producer(secured.tls_bootstrap, acks="all", security=secured_produce) as producer:
        with pytest.raises(errors.InvalidTopicError):
            producer.send(CONNECTORS_TOPIC, key=b"connector/evil", value=b"{}").result(timeout=30)
    assert status_of(secured, "hers").state is TaskState.RUNNING, "the runtime's own writes still work"


@pytest.fixture
def east(tmp_path: pathlib.Path) -> Iterator[BrokerProcess]:
    yield from running(connector_broker(tmp_path / "east"))


def test_a_mirror_copies_a_plain_cluster_into_a_secured_one(secured: SecuredBroker, east: BrokerProcess) -> None:
    with Admin(east.bootstrap) as admin:
        admin.create_topics(["orders"], partitions=2)
    records = [(f"k{i}".encode(), f"order-{i}".encode()) for i in range(200)]
    produce(east.bootstrap, "orders", records)
    with secured.admin() as admin:
        admin.create_connector("from-east", {"type": "mirror", "source.bootstrap": east.bootstrap,
                                             "source.alias": "east", "target.alias": "west", "topics": "orders"})

    def copied() -> int:
        with secured.admin() as admin:
            try:
                return sum(admin.list_offset("east.orders", partition, -1) for partition in range(2))
            except errors.UnknownTopicOrPartitionError:
                return -1  # the mirror has not created it yet

    wait_for(lambda: copied() == 200, timeout_s=90, what="200 records in east.orders")
    seen: list[tuple[bytes | None, bytes | None]] = []
    with Consumer(secured.tls_bootstrap, group_id=None, security=secured.security(certificate="admin")) as consumer:
        consumer.assign([("east.orders", 0), ("east.orders", 1)])
        for partition in range(2):
            consumer.seek(("east.orders", partition), 0)
        wait_for(lambda: seen.extend((m.key, m.value) for m in consumer.poll(timeout=1.0)) or len(seen) >= 200,
                 what="reading the copies")
    assert sorted(seen) == sorted(records)
    assert status_of(secured, "from-east").state is TaskState.RUNNING
