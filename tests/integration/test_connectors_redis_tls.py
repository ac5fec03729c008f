"""The Redis connectors over TLS against a real ``redis-server --tls-port`` (issue 21).

A sink writes a Stream and a source reads one through ``rediss://`` URLs, the server verified
against the test CA; a sink whose CA does not vouch for the server never writes and reports the
refused handshake as an outage in ``describe``.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from mqbroker.client import Admin
from mqbroker.connector_model import TaskState
from mqbroker.security.certs import CertificateFiles, init_directory
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import wait_for
from tests.integration.connector_support import connector_broker, consume_all, produce, task_status
from tests.integration.redisprocess import RedisProcess


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> CertificateFiles:
    return init_directory(tmp_path_factory.mktemp("redis-tls"), ["localhost", "127.0.0.1"], ["connector"])


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory, certificates: CertificateFiles) -> Iterator[RedisProcess]:
    server = RedisProcess(pathlib.Path(tmp_path_factory.mktemp("redis")), tls=certificates)
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = connector_broker(pathlib.Path(tmp_path_factory.mktemp("data")))
    process.start()
    try:
        yield process
    finally:
        process.kill()


def test_sink_and_source_work_over_tls_with_the_server_verified(broker: BrokerProcess, tls_redis: RedisProcess,
                                                                certificates: CertificateFiles) -> None:
    produce(broker.bootstrap, "tls-in", [(f"k{i}".encode(), f"v{i}".encode()) for i in range(200)])
    client = tls_redis.client()
    for i in range(50):
        client.xadd("tls-entries", {"device": f"d{i}", "v": f"reading-{i}"})
    connector_cert, connector_key = certificates.clients["connector"]
    with Admin(broker.bootstrap) as admin:
        admin.create_connector("tls-sink", {"type": "redis-sink", "topics": "tls-in", "redis.url": tls_redis.url(),
                                            "redis.stream": "tls-out", "redis.tls.ca": str(certificates.ca),
                                            "redis.tls.cert": str(connector_cert), "redis.tls.key": str(connector_key)})
        admin.create_connector("tls-source", {"type": "redis-source", "topic": "tls-from-redis",
                                              "redis.stream": "tls-entries", "redis.url": tls_redis.url(),
                                              "redis.tls.ca": str(certificates.ca), "key.field": "device",
                                              "value.field": "v"})
    wait_for(lambda: client.xlen("tls-out") == 200, 60, "the sink writing 200 entries over TLS")
    assert [fields[b"value"] for _, fields in client.xrange("tls-out")] == [f"v{i}".encode() for i in range(200)]
    values = sorted(message.value for message in consume_all(broker.bootstrap, "tls-from-redis", 50))
    assert values == sorted(f"reading-{i}".encode() for i in range(50))
    assert task_status(broker.bootstrap, "tls-sink").state is TaskState.RUNNING


def test_a_server_the_ca_does_not_vouch_for_is_an_outage(broker: BrokerProcess, tls_redis: RedisProcess,
                                                         tmp_path: pathlib.Path) -> None:
    stranger = init_directory(tmp_path / "other-ca", ["127.0.0.1"], [])
    produce(broker.bootstrap, "tls-untrusted", [(None, b"x")])
    with Admin(broker.bootstrap) as admin:
        admin.create_connector("tls-untrusted", {"type": "redis-sink", "topics": "tls-untrusted",
                                                 "redis.url": tls_redis.url(), "redis.stream": "never",
                                                 "redis.tls.ca": str(stranger.ca)})
    status = wait_for(lambda: (found := task_status(broker.bootstrap, "tls-untrusted")).metrics.in_outage and found,
                      30, "the refused handshake reported as an outage")
    assert status.state is TaskState.BACKOFF and "Redis" in (status.metrics.last_error or "")
    assert tls_redis.client().exists("never") == 0
