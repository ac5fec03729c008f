"""Attacks on a controller that speaks mutual TLS with broker certificates (``controller_tls = true``).

Issue 17 #1: with mutual TLS, any certificate from the same CA (a user certificate from
``certs init --client alice``) used to be accepted as a broker. Two brokers, each with its broker
certificate; the attacker holds a user certificate from the same CA.
"""

from __future__ import annotations

import os
import pathlib
import socket
import ssl
from collections.abc import Iterator

import pytest

from mqbroker.client import Admin
from mqbroker.client.security import ClientSecurity
from mqbroker.client.tls import client_ssl_context
from mqbroker.protocols.framing import LengthPrefixedFrames, frame
from mqbroker.security.certs import CertificateFiles, init_directory
from mqbroker.security.inter_broker import ClientHandshake, HandshakeMethod
from tests.integration.brokerprocess import LISTENERS, BrokerProcess, free_port, free_port_pair
from tests.integration.clusterprocess import retrying, start_all
from tests.security.support import CANARY, TLS_OFFSET, honest_round_trip, state_of

REFUSE = 0xC4
TOML = """
controller_tls = true
[security]
allow_anonymous = false
authorizer = "acl"
inter_broker_tls = true
super_users = ["User:admin"]
principal_mapping_rules = "RULE:^CN=(.*?)(,.*)?$/$1/,DEFAULT"
"""


@pytest.fixture(scope="module")
def mtls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[BrokerProcess], CertificateFiles,
                                                                              dict[int, int]]]:
    root: pathlib.Path = tmp_path_factory.mktemp("mtls-cluster")
    files = init_directory(root / "tls", ["localhost", "127.0.0.1"], ["admin", "alice"], brokers=[1, 2])
    config = root / "security.toml"
    config.write_text(TOML)
    controller_ports = {node_id: free_port() for node_id in (1, 2)}
    quorum = ",".join(f"{node_id}@127.0.0.1:{port}" for node_id, port in controller_ports.items())
    brokers = []
    for node_id, controller_port in controller_ports.items():
        ports = {name: free_port() for name in LISTENERS} | {"native": free_port_pair(TLS_OFFSET)}
        certificate, key = files.brokers[node_id]
        brokers.append(BrokerProcess(data_dir=root / f"broker-{node_id}", ports=ports, extra_args=[
            "--node-id", str(node_id), "--controller-quorum", quorum, "--controller-port", str(controller_port),
            "--config", str(config), "--tls-cert", str(certificate), "--tls-key", str(key), "--tls-ca", str(files.ca),
            "--tls-client-auth", "optional", "--native-tls-port", str(ports["native"] + TLS_OFFSET),
            "--mqtt-tls-port", "0", "--amqp-tls-port", "0", "--kafka-tls-port", "0"]))
        brokers[-1].data_dir.mkdir(parents=True, exist_ok=True)
    start_all(brokers)
    with _admin(brokers, files) as admin:
        retrying(lambda: admin.create_topics([CANARY], partitions=1, replication_factor=2), timeout_s=30)
    yield brokers, files, controller_ports
    for broker in brokers:
        broker.kill()


def _security(files: CertificateFiles) -> ClientSecurity:
    return ClientSecurity(ssl_context=client_ssl_context(files.ca, *files.clients["admin"]))


def _admin(brokers: list[BrokerProcess], files: CertificateFiles) -> Admin:
    return Admin(f"localhost:{brokers[0].ports['native'] + TLS_OFFSET}", security=_security(files))


def _tls_to_controller(port: int, files: CertificateFiles, client: str | None) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(files.ca))
    if client is not None:
        context.load_cert_chain(*files.clients[client])
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return context.wrap_socket(raw, server_hostname="localhost")


def _receive(connection: ssl.SSLSocket) -> bytes | None:
    frames = LengthPrefixedFrames(1 << 20)
    while True:
        try:
            data = connection.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            return None
        if not data:
            return None
        bodies = frames.feed(data)
        if bodies:
            return bodies[0]


def test_a_user_certificate_from_the_same_ca_is_not_a_broker(mtls_cluster) -> None:  # type: ignore[no-untyped-def]
    brokers, files, controller_ports = mtls_cluster
    with _admin(brokers, files) as admin:
        before = retrying(lambda: state_of(admin))
    connection = _tls_to_controller(controller_ports[1], files, "alice")
    hello = ClientHandshake(node_id=2, peer_id=1, method=HandshakeMethod.CERTIFICATE, random_bytes=os.urandom)
    connection.sendall(frame(hello.start()))
    refusal = _receive(connection)
    assert refusal is not None and refusal[0] == REFUSE and b"not a broker certificate" in refusal
    connection.close()
    with _admin(brokers, files) as admin:
        assert retrying(lambda: state_of(admin)) == before
    honest_round_trip(f"localhost:{brokers[0].ports['native'] + TLS_OFFSET}", _security(files))


def test_a_connection_without_a_certificate_fails_the_tls_handshake(mtls_cluster) -> None:  # type: ignore[no-untyped-def]
    brokers, files, controller_ports = mtls_cluster
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        connection = _tls_to_controller(controller_ports[1], files, None)
        connection.sendall(frame(b"\xc1" + bytes(5)))
        if _receive(connection) is None:
            raise ConnectionResetError("closed without an answer")
    honest_round_trip(f"localhost:{brokers[0].ports['native'] + TLS_OFFSET}", _security(files))
