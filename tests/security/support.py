"""What every attack test needs: the state an attack must not change, an honest client, raw sockets."""

from __future__ import annotations

import pathlib
import socket
import time
from dataclasses import dataclass
from typing import Any

from mqbroker.client import Admin, Consumer, Producer
from mqbroker.client.security import ClientSecurity
from mqbroker.protocols.framing import LengthPrefixedFrames, frame
from mqbroker.security.certs import CertificateFiles, init_directory
from tests.integration.brokerprocess import LISTENERS, BrokerProcess, free_port, free_port_pair
from tests.integration.clusterprocess import retrying, start_all, wait_for
from tests.integration.security_support import PASSWORDS, acl

INTER_BROKER_PASSWORD = "inter-broker-secret-0123456789"
CANARY = "canary"
#: A broker's native TLS port is its native port plus this, on every broker (metadata advertises by the offset).
TLS_OFFSET = 1000


@dataclass(frozen=True)
class State:
    """What an attack must leave as it was: users, ACLs, topics (partitions, replicas, ISR), end offsets."""

    users: tuple[str, ...]
    acls: tuple[Any, ...]
    topics: tuple[tuple[str, tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...]], ...]
    end_offsets: tuple[tuple[str, int, int], ...]


def state_of(admin: Admin) -> State:
    """The broker's state as an administrator sees it (internal topics left out: the broker writes them)."""
    metadata = admin.metadata()
    topics = tuple(sorted(
        (topic.name, tuple(sorted((p.partition_index, tuple(sorted(p.replica_nodes)), tuple(sorted(p.isr_nodes)))
                                  for p in topic.partitions)))
        for topic in metadata.topics if not topic.name.startswith("__") and "." not in topic.name))
    end_offsets = tuple((name, index, admin.list_offset(name, index, -1)) for name, partitions in topics
                        for index, _, _ in partitions)
    acls = tuple(sorted(admin.describe_acls(), key=repr))
    return State(users=tuple(sorted(admin.list_users())), acls=acls, topics=topics, end_offsets=end_offsets)


def honest_round_trip(bootstrap: str, security: ClientSecurity | None, topic: str = CANARY,
                      timeout_s: float = 20.0) -> None:
    """An honest client produces (acks=all) and reads back one message: the broker keeps serving."""
    value = f"honest-{time.monotonic_ns()}".encode()
    with Producer(bootstrap, acks="all", security=security) as producer:
        metadata = producer.send(topic, value=value).result(timeout_s)
    with Consumer(bootstrap, security=security) as consumer:
        consumer.assign([(topic, metadata.partition)])
        consumer.seek((topic, metadata.partition), metadata.offset)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(message.value == value for message in consumer.poll(timeout=0.5)):
                return
    raise AssertionError(f"the honest client's message {value!r} did not come back")


# -- raw controller connections -----------------------------------------------------------------


class RawController:
    """A socket to a controller port that sends the frames an attacker chooses."""

    def __init__(self, port: int, timeout_s: float = 10.0) -> None:
        self.socket = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self._frames = LengthPrefixedFrames(64 * 1024 * 1024)

    def send(self, *bodies: bytes) -> None:
        """Send length-prefixed frames."""
        self.socket.sendall(b"".join(frame(body) for body in bodies))

    def receive(self) -> bytes | None:
        """The next frame body, or None once the controller closed the connection."""
        while True:
            try:
                data = self.socket.recv(65536)
            except ConnectionResetError:
                return None
            if not data:
                return None
            bodies = self._frames.feed(data)
            if bodies:
                return bodies[0]

    def closed(self, timeout_s: float = 10.0) -> bool:
        """True if the controller closes the connection within ``timeout_s`` (frames it sent are discarded)."""
        self.socket.settimeout(timeout_s)
        try:
            while self.socket.recv(65536):
                pass
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        """Close the socket."""
        self.socket.close()


# -- a secured three-broker cluster --------------------------------------------------------------

CLUSTER_TOML = """
[security]
allow_anonymous = false
authorizer = "acl"
super_users = ["User:admin"]
principal_mapping_rules = "RULE:^CN=(.*?)(,.*)?$/$1/,DEFAULT"
inter_broker_password_file = "{password_file}"
"""


@dataclass
class SecuredCluster:
    """Brokers 1..3: SCRAM between brokers (controller and replica fetches), TLS listeners for clients."""

    brokers: list[BrokerProcess]
    files: CertificateFiles
    tls_ports: dict[int, int]
    controller_ports: dict[int, int]

    def tls_bootstrap(self, node_id: int = 1) -> str:
        """A broker's native TLS listener."""
        return f"localhost:{self.tls_ports[node_id]}"

    def security(self, user: str | None = None, certificate: str | None = None,
                 password: str | None = None) -> ClientSecurity:
        """TLS and SCRAM as ``user``, or a client certificate."""
        from mqbroker.client.tls import client_ssl_context

        context = (client_ssl_context(self.files.ca, *self.files.clients[certificate]) if certificate
                   else client_ssl_context(self.files.ca))
        return ClientSecurity(ssl_context=context, sasl_mechanism="SCRAM-SHA-512" if user else None, username=user,
                              password=password or (PASSWORDS.get(user or "") if user else None))

    def admin(self, node_id: int = 1) -> Admin:
        """The super user, by its client certificate."""
        return Admin(self.tls_bootstrap(node_id), security=self.security(certificate="admin"))

    def state(self) -> State:
        """The cluster's state as broker 1 serves it."""
        with self.admin() as admin:
            return retrying(lambda: state_of(admin))

    def honest(self, node_id: int = 1) -> None:
        """An honest round trip through broker ``node_id``."""
        honest_round_trip(self.tls_bootstrap(node_id), self.security(certificate="admin"))

    def controller_leader(self) -> int:
        """The controller leader's node id."""
        with self.admin() as admin:
            return retrying(lambda: admin.describe_quorum().leader_id)


def start_secured_cluster(root: pathlib.Path, size: int = 3) -> SecuredCluster:
    """Certificates, the inter-broker password file, ``size`` brokers; users of ``PASSWORDS``, a canary topic."""
    files = init_directory(root / "tls", ["localhost", "127.0.0.1"], ["admin", "alice"],
                           brokers=list(range(1, size + 1)))
    password_file = root / "inter-broker-password"
    password_file.write_text(INTER_BROKER_PASSWORD + "\n")
    password_file.chmod(0o600)
    config = root / "security.toml"
    config.write_text(CLUSTER_TOML.format(password_file=password_file))
    controller_ports = {node_id: free_port() for node_id in range(1, size + 1)}
    native_ports = {node_id: free_port_pair(TLS_OFFSET) for node_id in controller_ports}  # TLS: the same offset
    tls_ports = {node_id: port + TLS_OFFSET for node_id, port in native_ports.items()}
    quorum = ",".join(f"{node_id}@127.0.0.1:{port}" for node_id, port in controller_ports.items())
    brokers = []
    for node_id in controller_ports:
        certificate, key = files.brokers[node_id]
        ports = {name: free_port() for name in LISTENERS} | {"native": native_ports[node_id]}
        brokers.append(BrokerProcess(data_dir=root / f"broker-{node_id}", ports=ports, extra_args=[
            "--node-id", str(node_id), "--controller-quorum", quorum, "--controller-port", str(controller_ports[node_id]),
            "--config", str(config), "--tls-cert", str(certificate), "--tls-key", str(key), "--tls-ca", str(files.ca),
            "--tls-client-auth", "optional", "--native-tls-port", str(tls_ports[node_id]),
            "--mqtt-tls-port", "0", "--amqp-tls-port", "0", "--kafka-tls-port", "0",
        ]))
        brokers[-1].data_dir.mkdir(parents=True, exist_ok=True)
    start_all(brokers)
    cluster = SecuredCluster(brokers=brokers, files=files, tls_ports=tls_ports, controller_ports=controller_ports)
    with cluster.admin() as admin:
        for user, password in PASSWORDS.items():
            retrying(lambda: admin.upsert_user(user, password, create=True), timeout_s=30)
        retrying(lambda: admin.create_topics([CANARY], partitions=1, replication_factor=3), timeout_s=30)
        admin.create_acls([acl("User:alice", "read", "topic", CANARY)])
    wait_for(lambda: _in_sync(cluster), 30, "the canary's replicas in sync")
    return cluster


def _in_sync(cluster: SecuredCluster) -> bool:
    with cluster.admin() as admin:
        [topic] = [t for t in admin.metadata([CANARY]).topics if t.name == CANARY]
        return len(topic.partitions[0].isr_nodes) == len(cluster.brokers)


