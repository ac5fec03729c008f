"""Attacks on the cluster's own traffic: the controller (Raft) port and inter-broker logins.

A secured three-broker cluster (SCRAM between brokers, ACLs, no anonymous clients). Each test
performs the attack, checks the documented refusal, checks that users, ACLs, topics and offsets
did not change, and that an honest client is still served (docs/security.md, tested attacks).
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from mqbroker.client import Admin
from mqbroker.cluster.metadata_records import PutGenericRecord, encode_record
from mqbroker.errors import SaslAuthenticationError
from mqbroker.protocols.native import messages as m
from mqbroker.protocols.native.codec import ErrorResponse
from mqbroker.raft import codec
from mqbroker.raft.forwarded_proposals import ForwardedProposal, encode_frame
from mqbroker.raft.messages import AppendEntries, Entry, EntryKind, Heartbeat
from mqbroker.security.auth import CredentialStore
from mqbroker.security.inter_broker import ClientHandshake, HandshakeMethod, InterBrokerLogin
from mqbroker.security.scram import ScramClient, ScramMechanism
from tests.integration.brokerprocess import TWISTD
from tests.integration.nativewire import RawNativeConnection
from tests.integration.clusterprocess import retrying, wait_for
from tests.integration.security_support import PASSWORDS
from tests.security.support import CANARY, INTER_BROKER_PASSWORD, RawController, SecuredCluster, start_secured_cluster

REFUSE = 0xC4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredCluster]:
    secured = start_secured_cluster(tmp_path_factory.mktemp("secured-cluster"))
    try:
        yield secured
    finally:
        for broker in secured.brokers:
            broker.kill()


def _forged_admin_user(password: str) -> bytes:
    """The metadata record that would make ``admin`` log in with ``password``."""
    store = CredentialStore(os.urandom)
    record = store.add("admin", password)
    return encode_record(PutGenericRecord(kind="user", key="admin", value=json.loads(record.to_bytes())))


def _forged_append(leader: int, claimed: int) -> bytes:
    entry = Entry(term=1000, index=10_000, kind=EntryKind.NORMAL, data=_forged_admin_user("attacker-password"))
    return codec.encode(AppendEntries(term=1000, from_id=claimed, to_id=leader, previous_index=9_999, previous_term=999,
                                      entries=(entry,), commit_index=10_000))


def _attacker_cannot_log_in_as_admin(cluster: SecuredCluster) -> None:
    with pytest.raises(SaslAuthenticationError):
        with Admin(cluster.tls_bootstrap(), security=cluster.security("admin", password="attacker-password")) as admin:
            admin.list_users()


def _other_voter(cluster: SecuredCluster, leader: int) -> int:
    return next(node_id for node_id in cluster.controller_ports if node_id != leader)


def _audited(cluster: SecuredCluster, node_id: int, text: str) -> bool:
    return text in cluster.brokers[node_id - 1].log_text()


def test_forged_append_entries_over_plain_tcp_is_refused(cluster: SecuredCluster) -> None:
    """Issue 17 #1: a forged AppendEntries (term 1000) as "node 2" used to commit a user record."""
    before = cluster.state()
    leader = cluster.controller_leader()
    attacker = RawController(cluster.controller_ports[leader])
    attacker.send(_forged_append(leader, _other_voter(cluster, leader)))
    refusal = attacker.receive()
    assert refusal is not None and refusal[0] == REFUSE and b"not a controller handshake frame" in refusal
    assert attacker.closed()
    _attacker_cannot_log_in_as_admin(cluster)
    assert cluster.state() == before
    assert _audited(cluster, leader, "AUTHENTICATION FAILED protocol=controller")
    cluster.honest()


def test_a_voter_claim_without_credentials_is_refused(cluster: SecuredCluster) -> None:
    before = cluster.state()
    leader = cluster.controller_leader()
    attacker = RawController(cluster.controller_ports[leader])
    hello = ClientHandshake(node_id=_other_voter(cluster, leader), peer_id=leader, method=HandshakeMethod.NONE,
                            random_bytes=os.urandom)
    attacker.send(hello.start(), _forged_append(leader, _other_voter(cluster, leader)))
    refusal = attacker.receive()
    assert refusal is not None and refusal[0] == REFUSE and b"did not authenticate" in refusal
    assert attacker.closed()
    assert cluster.state() == before
    cluster.honest()


def test_a_wrong_inter_broker_password_is_refused(cluster: SecuredCluster) -> None:
    before = cluster.state()
    leader = cluster.controller_leader()
    attacker = RawController(cluster.controller_ports[leader])
    hello = ClientHandshake(node_id=_other_voter(cluster, leader), peer_id=leader, method=HandshakeMethod.SCRAM,
                            random_bytes=os.urandom, login=InterBrokerLogin(username="broker", password="guessed-wrong"))
    attacker.send(hello.start())
    challenge = attacker.receive()
    assert challenge is not None
    attacker.send(hello.receive(challenge))
    refusal = attacker.receive()
    assert refusal is not None and refusal[0] == REFUSE and b"invalid credentials" in refusal
    assert attacker.closed()
    assert cluster.state() == before
    cluster.honest()


def test_a_node_that_is_not_a_voter_is_refused(cluster: SecuredCluster) -> None:
    before = cluster.state()
    leader = cluster.controller_leader()
    attacker = RawController(cluster.controller_ports[leader])
    hello = ClientHandshake(node_id=9, peer_id=leader, method=HandshakeMethod.SCRAM, random_bytes=os.urandom,
                            login=InterBrokerLogin(username="broker", password=INTER_BROKER_PASSWORD))
    attacker.send(hello.start())
    refusal = attacker.receive()
    assert refusal is not None and refusal[0] == REFUSE and b"node 9 is not a controller voter" in refusal
    assert cluster.state() == before
    cluster.honest()


def _authenticated_as(cluster: SecuredCluster, leader: int, node_id: int) -> RawController:
    """A controller connection that proved ``node_id`` with the real inter-broker password (a compromised broker)."""
    connection = RawController(cluster.controller_ports[leader])
    hello = ClientHandshake(node_id=node_id, peer_id=leader, method=HandshakeMethod.SCRAM, random_bytes=os.urandom,
                            login=InterBrokerLogin(username="broker", password=INTER_BROKER_PASSWORD))
    connection.send(hello.start())
    while not hello.complete:
        body = connection.receive()
        assert body is not None, "the handshake with the real password failed"
        reply = hello.receive(body)
        if reply is not None:
            connection.send(reply)
    return connection


def test_a_broker_speaking_for_another_node_is_disconnected(cluster: SecuredCluster) -> None:
    """Authenticated as node A, frames claiming node B: the connection is closed, nothing is delivered."""
    before = cluster.state()
    leader = cluster.controller_leader()
    voters = [node_id for node_id in cluster.controller_ports if node_id != leader]
    connection = _authenticated_as(cluster, leader, voters[0])
    connection.send(_forged_append(leader, voters[1]))
    assert connection.closed()
    wait_for(lambda: _audited(cluster, leader, "FORGED CONTROLLER FRAME"), 10, "the audit line")
    _attacker_cannot_log_in_as_admin(cluster)
    assert cluster.state() == before
    cluster.honest()


def test_a_forwarded_proposal_for_another_principal_is_refused(cluster: SecuredCluster) -> None:
    """A broker forwarding a proposal on behalf of someone else (here User:admin) gets no entry committed."""
    before = cluster.state()
    leader = cluster.controller_leader()
    follower = _other_voter(cluster, leader)
    connection = _authenticated_as(cluster, leader, follower)
    connection.send(encode_frame(ForwardedProposal(from_id=follower, to_id=leader, request_id=77,
                                                   principal="User:admin", data=_forged_admin_user("attacker-password"))))
    wait_for(lambda: _audited(cluster, leader, "refusing a proposal node"), 10, "the refusal in the leader's log")
    _attacker_cannot_log_in_as_admin(cluster)
    assert cluster.state() == before
    connection.close()
    cluster.honest()


def test_an_oversized_frame_before_authentication_closes_the_connection(cluster: SecuredCluster) -> None:
    """Before the handshake a controller connection may send at most 4 KiB frames (the old cap was 64 MiB)."""
    leader = cluster.controller_leader()
    attacker = RawController(cluster.controller_ports[leader])
    attacker.socket.sendall((64 * 1024 * 1024).to_bytes(4, "big") + b"\0" * 1024)
    refusal = attacker.receive()
    assert refusal is not None and refusal[0] == REFUSE and b"exceeds the limit of 4096 bytes" in refusal
    cluster.honest()


def test_a_connection_flood_on_the_controller_port_does_not_cut_the_voters_off(cluster: SecuredCluster) -> None:
    """Past controller_connections_max (64) connections are refused at once; the quorum keeps working."""
    leader = cluster.controller_leader()
    flood = []
    try:
        for _ in range(80):
            flood.append(socket.create_connection(("127.0.0.1", cluster.controller_ports[leader]), timeout=5))
        refused = 0
        for connection in flood:
            connection.settimeout(2)
            try:
                if connection.recv(1) == b"":
                    refused += 1
            except (TimeoutError, ConnectionResetError):
                continue
        assert refused >= 80 - 64
        wait_for(lambda: _audited(cluster, leader, "controller: refused a connection"), 10, "the refusal log")
        with cluster.admin() as admin:  # a metadata change still commits through the quorum
            admin.create_acls([m.AclBinding(resource_type="topic", resource_name="flood-check", pattern_type="literal",
                                            principal="User:alice", host="*", operation="read", permission="allow")])
            assert any(binding.resource_name == "flood-check" for binding in admin.describe_acls())
            admin.delete_acls([m.AclBinding(resource_type="topic", resource_name="flood-check", pattern_type="literal",
                                            principal="User:alice", host="*", operation="read", permission="allow")])
        cluster.honest()
    finally:
        for connection in flood:
            connection.close()


def test_a_client_cannot_log_in_as_a_broker_without_the_inter_broker_password(cluster: SecuredCluster) -> None:
    """SCRAM as the inter-broker user with a guessed password, acting as Broker:2, is refused on the native port."""
    broker = cluster.brokers[0]
    raw = RawNativeConnection(broker.ports["native"])
    raw.call(m.ApiVersionsRequest())
    raw.call(m.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    client = ScramClient(ScramMechanism.SHA_512, "broker", "guessed-wrong", os.urandom, authorization_id="2")
    first = raw.call(m.SaslAuthenticateRequest(auth_bytes=client.first_message()))
    final = raw.call(m.SaslAuthenticateRequest(auth_bytes=client.respond(first.auth_bytes)))
    assert isinstance(final, ErrorResponse) and final.error_code == 58  # SASL_AUTHENTICATION_FAILED
    raw.close()
    cluster.honest()


def test_a_user_cannot_act_as_a_broker_through_the_authorization_identity(cluster: SecuredCluster) -> None:
    """alice with her own (right) password naming authorization identity 2 is refused: only the inter-broker
    user may act as a broker."""
    raw = RawNativeConnection(cluster.brokers[0].ports["native"])
    raw.call(m.ApiVersionsRequest())
    raw.call(m.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    client = ScramClient(ScramMechanism.SHA_512, "alice", "alice-secret", os.urandom, authorization_id="2")
    first = raw.call(m.SaslAuthenticateRequest(auth_bytes=client.first_message()))
    assert isinstance(first, ErrorResponse) and first.error_code == 58
    assert "authorization identity differs" in (first.error_message or "")
    raw.close()
    cluster.honest()


def test_a_forged_replica_fetch_by_a_user_is_refused_and_moves_nothing(cluster: SecuredCluster) -> None:
    """alice (read on the canary, nothing on the cluster) fetches as replica 2: CLUSTER_AUTHORIZATION_FAILED,
    the ISR and the high watermark stay where they were."""
    before = cluster.state()
    raw = RawNativeConnection(cluster.brokers[0].ports["native"])
    raw.call(m.ApiVersionsRequest())
    raw.call(m.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    client = ScramClient(ScramMechanism.SHA_512, "alice", "alice-secret", os.urandom)
    first = raw.call(m.SaslAuthenticateRequest(auth_bytes=client.first_message()))
    client.finish(raw.call(m.SaslAuthenticateRequest(auth_bytes=client.respond(first.auth_bytes))).auth_bytes)
    fetch = m.FetchRequest(replica_id=2, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=(m.FetchTopic(
        name="canary", partitions=(m.FetchPartition(partition_index=0, fetch_offset=10_000, partition_max_bytes=1 << 20),)),))
    answer = raw.call(fetch)
    codes = {p.error_code for t in getattr(answer, "topics", ()) for p in t.partitions} or {answer.error_code}
    assert codes == {31}  # CLUSTER_AUTHORIZATION_FAILED
    raw.close()
    assert cluster.state() == before
    cluster.honest()


def _logged_in(cluster: SecuredCluster, node_id: int, user: str, password: str,
               authorization_id: str = "") -> RawNativeConnection:
    """A native connection to broker ``node_id`` after a SCRAM login (as a broker with ``authorization_id``)."""
    raw = RawNativeConnection(cluster.brokers[node_id - 1].ports["native"])
    raw.call(m.ApiVersionsRequest())
    raw.call(m.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    client = ScramClient(ScramMechanism.SHA_512, user, password, os.urandom, authorization_id=authorization_id)
    first = raw.call(m.SaslAuthenticateRequest(auth_bytes=client.first_message()))
    client.finish(raw.call(m.SaslAuthenticateRequest(auth_bytes=client.respond(first.auth_bytes))).auth_bytes)
    return raw


def _replica_fetch_codes(raw: RawNativeConnection, replica_id: int, topic: str, leader_epoch: int = -1) -> set[int]:
    fetch = m.FetchRequest(replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=(m.FetchTopic(
        name=topic, partitions=(m.FetchPartition(partition_index=0, fetch_offset=10_000, partition_max_bytes=1 << 20,
                                                 current_leader_epoch=leader_epoch),)),))
    answer = raw.call(fetch)
    return {p.error_code for t in getattr(answer, "topics", ()) for p in t.partitions} or {answer.error_code}


def test_a_replica_fetch_by_the_super_user_is_refused(cluster: SecuredCluster) -> None:
    """Part B: cluster ALTER is not enough (the super user has it); only Broker:2 may fetch as replica 2."""
    before = cluster.state()
    with cluster.admin() as admin:
        leader = admin.metadata([CANARY]).topics[0].partitions[0].leader_id
    raw = _logged_in(cluster, leader, "admin", PASSWORDS["admin"])
    assert _replica_fetch_codes(raw, 2 if leader != 2 else 3, CANARY) == {31}  # CLUSTER_AUTHORIZATION_FAILED
    raw.close()
    assert cluster.state() == before
    cluster.honest()


def test_a_broker_cannot_fetch_as_another_broker(cluster: SecuredCluster) -> None:
    """Logged in as Broker:3 (the inter-broker user, authorization identity 3), a fetch as replica 2 is refused:
    the replica id must be the node the connection proved."""
    before = cluster.state()
    with cluster.admin() as admin:
        partition = admin.metadata([CANARY]).topics[0].partitions[0]
    claimed, proven = [node for node in (1, 2, 3) if node != partition.leader_id]
    raw = _logged_in(cluster, partition.leader_id, "broker", INTER_BROKER_PASSWORD, str(proven))
    assert _replica_fetch_codes(raw, claimed, CANARY, partition.leader_epoch) == {31}
    raw.close()
    assert cluster.state() == before
    cluster.honest()


def test_a_broker_that_is_no_replica_cannot_read_past_the_high_watermark(cluster: SecuredCluster) -> None:
    """A broker fetching as itself a partition it does not replicate gets NOT_LEADER_OR_FOLLOWER: only followers
    read past the high watermark (and only they move it)."""
    with cluster.admin() as admin:
        retrying(lambda: admin.create_topics(["solo"], partitions=1, replication_factor=1), timeout_s=30)
        partition = retrying(lambda: admin.metadata(["solo"]).topics[0].partitions[0], timeout_s=30)
    before = cluster.state()
    outsider = next(node for node in (1, 2, 3) if node != partition.leader_id)
    raw = _logged_in(cluster, partition.leader_id, "broker", INTER_BROKER_PASSWORD, str(outsider))
    assert _replica_fetch_codes(raw, outsider, "solo", partition.leader_epoch) == {6}  # NOT_LEADER_OR_FOLLOWER
    raw.close()
    assert cluster.state() == before
    cluster.honest()


def _unknown_user_salt(port: int) -> str:
    raw = RawNativeConnection(port)
    raw.call(m.ApiVersionsRequest())
    raw.call(m.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    client = ScramClient(ScramMechanism.SHA_512, "nobody-here", "x", os.urandom)
    first = raw.call(m.SaslAuthenticateRequest(auth_bytes=client.first_message()))
    raw.close()
    return dict(item.split("=", 1) for item in first.auth_bytes.decode().split(","))["s"]


def test_brokers_cannot_be_compared_to_tell_unknown_users(cluster: SecuredCluster) -> None:
    """An unknown user's decoy salt derives from the cluster's secret: every broker answers the same, as for a
    real user (a per-broker random salt would give unknown users away)."""
    wait_for(lambda: len({_unknown_user_salt(broker.ports["native"]) for broker in cluster.brokers}) == 1, 10,
             "the cluster's decoy secret on every broker")
    cluster.honest()


def test_the_inter_broker_user_cannot_be_created_as_a_client_user(cluster: SecuredCluster) -> None:
    before = cluster.state()
    with cluster.admin() as admin:
        with pytest.raises(Exception, match="inter-broker user"):
            admin.upsert_user("broker", "a-password-of-mine", create=True)
    assert cluster.state() == before


def test_a_secured_cluster_without_inter_broker_credentials_refuses_to_start(tmp_path: pathlib.Path) -> None:
    """security on, three voters, no controller_tls and no inter-broker password: start-up stops with what to set."""
    result = subprocess.run(
        [*TWISTD, "-n", "--pidfile=", "mqbroker", "--data-dir", str(tmp_path / "data"), "--node-id", "1",
         "--controller-quorum", "1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3",
         "--set", "security.allow_anonymous=false"],
        capture_output=True, text=True, timeout=60, env={**os.environ})
    assert result.returncode != 0
    assert "no inter-broker credentials" in result.stdout + result.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was written


def test_controller_tls_without_certificates_refuses_to_start(tmp_path: pathlib.Path) -> None:
    """Issue 17 #1: controller_tls = true used to stay plaintext silently without tls_cert."""
    result = subprocess.run(
        [*TWISTD, "-n", "--pidfile=", "mqbroker", "--data-dir", str(tmp_path / "data"), "--node-id", "1",
         "--controller-quorum", "1@127.0.0.1:1,2@127.0.0.1:2", "--set", "controller_tls=true"],
        capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "controller_tls = true needs tls_cert" in result.stdout + result.stderr


def test_a_stale_leader_heartbeat_from_an_unauthenticated_peer_changes_no_term(cluster: SecuredCluster) -> None:
    """A Heartbeat of term 10**6 sent without the handshake: refused before the Raft core sees it."""
    leader = cluster.controller_leader()
    with cluster.admin() as admin:
        term_before = admin.describe_quorum().term
    attacker = RawController(cluster.controller_ports[leader])
    attacker.send(codec.encode(Heartbeat(term=10**6, from_id=_other_voter(cluster, leader), to_id=leader,
                                         commit_index=0)))
    assert attacker.closed()
    time.sleep(1)
    with cluster.admin() as admin:
        assert admin.describe_quorum().term == term_before
    assert cluster.controller_leader() == leader
    cluster.honest()
