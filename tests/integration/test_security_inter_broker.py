"""Inter-broker TLS: followers fetch from leaders over the native TLS listener, authenticated by their broker
certificates (``Broker:<id>``), and the controllers speak mutual TLS with the same certificates, on a two-broker
cluster that refuses anonymous clients and authorizes with ACLs."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Iterator

import pytest

from mqbroker.security.certs import CertificateFiles, init_directory
from mqbroker.client import Admin, Consumer, Producer
from mqbroker.client.security import ClientSecurity
from mqbroker.client.tls import client_ssl_context
from tests.integration.brokerprocess import LISTENERS, BrokerProcess, free_port, free_port_pair
from tests.integration.clusterprocess import retrying, start_all

#: Every broker's native TLS port is its native port plus this (the offset must be the same on every broker).
TLS_OFFSET = 1000
SECURITY_TOML = """
controller_tls = true
[security]
allow_anonymous = false
authorizer = "acl"
inter_broker_tls = true
super_users = ["User:admin"]   # the brokers' certificates name Broker:1 and Broker:2, which act for the cluster
principal_mapping_rules = "RULE:^CN=(.*?)(,.*)?$/$1/,DEFAULT"
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[BrokerProcess], CertificateFiles]]:
    root: pathlib.Path = tmp_path_factory.mktemp("inter-broker-tls")
    files = init_directory(root / "tls", ["localhost", "127.0.0.1"], ["admin"], brokers=[1, 2])
    config = root / "security.toml"
    config.write_text(SECURITY_TOML)
    controller_ports = {node_id: free_port() for node_id in (1, 2)}
    quorum = ",".join(f"{node_id}@127.0.0.1:{port}" for node_id, port in controller_ports.items())
    brokers = []
    for node_id, controller_port in controller_ports.items():
        ports = {name: free_port() for name in LISTENERS}
        ports["native"] = free_port_pair(TLS_OFFSET)
        brokers.append(BrokerProcess(data_dir=root / f"broker-{node_id}", ports=ports, extra_args=[
            "--node-id", str(node_id), "--controller-quorum", quorum, "--controller-port", str(controller_port),
            "--config", str(config), "--tls-cert", str(files.brokers[node_id][0]), "--tls-key", str(files.brokers[node_id][1]),
            "--tls-ca", str(files.ca), "--tls-client-auth", "optional",
            "--native-tls-port", str(ports["native"] + TLS_OFFSET), "--mqtt-tls-port", "0", "--amqp-tls-port", "0",
            "--kafka-tls-port", "0",
        ]))
    for broker in brokers:
        broker.data_dir.mkdir(parents=True, exist_ok=True)
    start_all(brokers)
    yield brokers, files
    for broker in brokers:
        broker.kill()


def _admin_security(files: CertificateFiles) -> ClientSecurity:
    certificate, key = files.clients["admin"]
    return ClientSecurity(ssl_context=client_ssl_context(files.ca, certificate, key))


def test_followers_replicate_over_tls_as_the_broker_principal(
    cluster: tuple[list[BrokerProcess], CertificateFiles],
) -> None:
    brokers, files = cluster
    security = _admin_security(files)
    bootstrap = f"localhost:{brokers[0].ports['native'] + TLS_OFFSET}"
    with Admin(bootstrap, security=security) as admin:
        retrying(lambda: admin.create_topics(["replicated"], partitions=1, replication_factor=2,
                                             configs={"min.insync.replicas": "2"}), timeout_s=30)
        deadline = time.monotonic() + 30
        while True:  # both replicas in sync: the follower fetched everything over TLS, as Broker:2
            [topic] = [t for t in admin.metadata(["replicated"]).topics if t.name == "replicated"]
            if sorted(topic.partitions[0].isr_nodes) == [1, 2]:
                break
            assert time.monotonic() < deadline, topic
            time.sleep(0.1)
    with Producer(bootstrap, acks="all", security=security) as producer:
        futures = [producer.send("replicated", value=b"v%d" % n) for n in range(100)]
        producer.flush()
        assert [future.result(20).offset for future in futures] == list(range(100))
    with Consumer(bootstrap, auto_offset_reset="earliest", security=security) as consumer:
        consumer.assign([("replicated", 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(values) < 100 and time.monotonic() < deadline:
            values += [message.value for message in consumer.poll(timeout=0.5)]
    assert values == [b"v%d" % n for n in range(100)]
    for broker in brokers:  # nobody was refused: the followers never fell back to anonymous plaintext
        assert "AUTHENTICATION FAILED" not in broker.log_text() and "DENIED" not in broker.log_text()
