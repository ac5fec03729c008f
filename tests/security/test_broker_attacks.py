"""Attacks on one broker's client listeners: user enumeration, oversized pre-authentication input,
slow and flooding HTTP clients, unauthenticated admin paths, AMQP memory, configuration and files.

Each test performs the attack, checks the documented refusal, that the users, ACLs, topics and
offsets did not change, and that an honest client is still served (docs/security.md, tested attacks).
"""

from __future__ import annotations

import base64
import os
import pathlib
import socket
import ssl
import stat
import struct
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from types import SimpleNamespace

import pika
import pytest

from mqbroker.protocols.amqp import codec as amqp_codec
from mqbroker.protocols.amqp import spec
from mqbroker.protocols.mqtt.packets import PROTOCOL_LEVEL_5, ConnAck, Connect
from mqbroker.protocols.native import messages as m
from mqbroker.protocols.native.codec import ErrorResponse
from mqbroker.security.scram import ScramClient, ScramMechanism
from tests.integration.brokerprocess import TWISTD, BrokerProcess, running
from tests.integration.clusterprocess import wait_for
from tests.integration.mqtt_support import RawClient
from tests.integration.nativewire import RawNativeConnection
from tests.integration.security_support import SecuredBroker, acl, start_secured_broker
from tests.security.support import CANARY, honest_round_trip, state_of

HTTP_REQUEST_TIMEOUT_MS = 2000
HTTP_CONNECTIONS_MAX = 30


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    """TLS, SCRAM users, ACLs, no anonymous access; passwords over plaintext allowed (for HTTP basic auth)."""
    for broker in start_secured_broker(tmp_path_factory.mktemp("secured-broker"), extra_args=(
            "--set", f"http_request_timeout_ms={HTTP_REQUEST_TIMEOUT_MS}",
            "--set", f"quotas.http_connections_max={HTTP_CONNECTIONS_MAX}",
            "--set", "security.plain_without_tls=true")):
        with broker.admin() as admin:
            admin.create_topics([CANARY], partitions=1)
            admin.create_acls([acl("User:alice", "read", "topic", CANARY)])
        yield broker


@pytest.fixture(scope="module")
def open_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The embedded default: anonymous, allow-all (AMQP guest)."""
    yield from running(BrokerProcess(data_dir=tmp_path_factory.mktemp("open-broker") / "data"))


def _state(broker: SecuredBroker):  # type: ignore[no-untyped-def]
    with broker.admin() as admin:
        return state_of(admin)


def _honest(broker: SecuredBroker) -> None:
    honest_round_trip(broker.tls_bootstrap, broker.security(certificate="admin"))


# -- enumeration -------------------------------------------------------------------------------


def _server_first(port: int, user: str) -> tuple[str, str, RawNativeConnection, ScramClient, bytes]:
    raw = RawNativeConnection(port)
    raw.call(m.ApiVersionsRequest())
    raw.call(m.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    client = ScramClient(ScramMechanism.SHA_512, user, "some-guess", os.urandom)
    first = raw.call(m.SaslAuthenticateRequest(auth_bytes=client.first_message()))
    fields = dict(item.split("=", 1) for item in first.auth_bytes.decode().split(","))
    return fields["s"], fields["i"], raw, client, first.auth_bytes


def test_scram_salts_do_not_tell_unknown_users_from_real_ones(secured: SecuredBroker) -> None:
    """Issue 17 #7: an unknown user's salt used to change on every attempt while a real user's stayed."""
    before = _state(secured)
    port = secured.process.ports["native"]
    unknown = [_server_first(port, "nobody-here")[:2] for _ in range(3)]
    real = [_server_first(port, "alice")[:2] for _ in range(3)]
    assert len(set(unknown)) == 1 and len(set(real)) == 1  # both stable
    assert unknown[0][1] == real[0][1]  # the same iteration count
    *_, raw, client, server_first = _server_first(port, "nobody-here")
    final = raw.call(m.SaslAuthenticateRequest(auth_bytes=client.respond(server_first)))
    assert isinstance(final, ErrorResponse) and final.error_code == 58
    raw.close()
    assert _state(secured) == before
    _honest(secured)


def test_mqtt_unknown_user_and_wrong_password_get_the_same_connack(secured: SecuredBroker) -> None:
    before = _state(secured)
    shim = SimpleNamespace(mqtt_port=secured.process.ports["mqtt"])
    answers = []
    for username, password in (("nobody-here", b"x"), ("alice", b"wrong-password")):
        client = RawClient(shim, level=PROTOCOL_LEVEL_5)  # type: ignore[arg-type]
        client.send(Connect(client_id=f"probe-{username}", username=username, password=password))
        answer = client.receive()
        assert isinstance(answer, ConnAck)
        answers.append(answer.reason_code)
        assert client.closed_within(5)
    assert answers == [0x86, 0x86]  # bad user name or password, for both
    assert _state(secured) == before
    _honest(secured)


def test_amqp_unknown_user_and_wrong_password_are_refused_alike(secured: SecuredBroker) -> None:
    before = _state(secured)
    refusals = []
    for username, password in (("nobody-here", "x"), ("alice", "wrong-password")):
        parameters = pika.ConnectionParameters("127.0.0.1", secured.process.ports["amqp"],
                                               credentials=pika.PlainCredentials(username, password),
                                               connection_attempts=1, socket_timeout=5)
        with pytest.raises(pika.exceptions.ProbableAuthenticationError) as refused:
            pika.BlockingConnection(parameters)
        refusals.append((type(refused.value), refused.value.args[0] if refused.value.args else None))
    assert refusals[0][0] is refusals[1][0]
    assert all("403" in str(args) or "ACCESS_REFUSED" in str(args) for _, args in refusals)
    assert _state(secured) == before
    _honest(secured)


# -- pre-authentication bounds -------------------------------------------------------------------


def test_a_large_native_frame_before_authentication_closes_the_connection(secured: SecuredBroker) -> None:
    """Issue 17 #6: 16 MiB frames used to be accepted before authentication; now 512 KiB."""
    before = _state(secured)
    raw = RawNativeConnection(secured.process.ports["native"])
    raw.send_bytes(struct.pack(">i", 1024 * 1024) + b"\0" * 4096)
    assert raw.read_until_closed() == b""  # no header was readable: closed without an answer
    raw.close()
    assert "exceeds the limit of 524288 bytes" in secured.process.log_text()
    assert _state(secured) == before
    _honest(secured)


def test_a_large_mqtt_connect_before_authentication_is_refused(secured: SecuredBroker) -> None:
    before = _state(secured)
    shim = SimpleNamespace(mqtt_port=secured.process.ports["mqtt"])
    client = RawClient(shim, level=PROTOCOL_LEVEL_5)  # type: ignore[arg-type]
    remaining = 600 * 1024  # a CONNECT announcing 600 KiB (user properties can make one that large)
    length = bytearray()
    while True:
        remaining, digit = divmod(remaining, 128)
        length.append(digit | (0x80 if remaining else 0))
        if not remaining:
            break
    client.send_bytes(b"\x10" + bytes(length) + b"\0" * 1024)
    assert client.closed_within(5)
    assert _state(secured) == before
    _honest(secured)


# -- HTTP ------------------------------------------------------------------------------------------


def test_slow_http_requests_are_cut_at_the_deadline_and_do_not_lock_out_clients(secured: SecuredBroker) -> None:
    """Issue 17 #6: 40 half-sent HTTP requests used to lock the native listener out for 40 s+."""
    before = _state(secured)
    slow = []
    for _ in range(HTTP_CONNECTIONS_MAX - 5):
        connection = socket.create_connection(("127.0.0.1", secured.process.ports["http"]), timeout=10)
        connection.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # never finished
        slow.append(connection)
    started = time.monotonic()
    _honest(secured)  # native clients are served meanwhile
    for connection in slow:
        assert _closed_by_broker(connection)
    assert time.monotonic() - started < HTTP_REQUEST_TIMEOUT_MS / 1000 + 5
    for connection in slow:
        connection.close()
    after = _state(secured)  # the honest client wrote one message to the canary meanwhile; nothing else changed
    assert (after.users, after.acls, after.topics) == (before.users, before.acls, before.topics)


def _closed_by_broker(connection: socket.socket) -> bool:
    try:
        return connection.recv(1024) == b""
    except ConnectionResetError:  # aborted: the broker does not wait to flush anything to a slow client
        return True


def test_an_http_connection_flood_is_refused_beyond_its_own_budget(secured: SecuredBroker) -> None:
    flood = []
    try:
        for _ in range(HTTP_CONNECTIONS_MAX + 10):
            flood.append(socket.create_connection(("127.0.0.1", secured.process.ports["http"]), timeout=5))
        wait_for(lambda: "http: refused a connection" in secured.process.log_text(), 10, "the refusal log")
        _honest(secured)  # the native listener has its own budget
    finally:
        for connection in flood:
            connection.close()


def _get(secured: SecuredBroker, path: str, user: str | None = None, password: str | None = None) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{secured.process.ports['http']}{path}")
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_http_admin_paths_need_an_authenticated_principal(secured: SecuredBroker) -> None:
    before = _state(secured)
    assert _get(secured, "/metrics") == 401
    assert _get(secured, "/metrics", "admin", "wrong-password") == 401
    assert _get(secured, "/metrics", "nobody-here", "x") == 401
    assert _get(secured, "/metrics", "alice", "alice-secret") == 403  # no describe on the cluster
    assert _get(secured, "/metrics", "admin", "admin-secret") == 200
    assert _get(secured, "/health") == 200 and _get(secured, "/ready") == 200  # security.http_open_paths
    assert "AUTHENTICATION FAILED protocol=http" in secured.process.log_text()
    assert _state(secured) == before


# -- AMQP memory -----------------------------------------------------------------------------------


def _amqp_frames(sock: socket.socket, decoder: amqp_codec.FrameDecoder) -> list[object]:
    sock.settimeout(5)
    data = sock.recv(65536)
    return [] if not data else list(decoder.receive_data(data))


def test_partial_amqp_messages_on_many_channels_are_bounded(open_broker: BrokerProcess) -> None:
    """Issue 17 #5: each of 2047 channels could hold a partial 64 MiB message; now the connection holds at
    most 128 MiB of unfinished messages and the channel past it is closed with 406."""
    sock = socket.create_connection(("127.0.0.1", open_broker.ports["amqp"]), timeout=10)
    decoder = amqp_codec.FrameDecoder(1 << 20, expect_protocol_header=False)
    sock.sendall(spec.PROTOCOL_HEADER)
    _amqp_frames(sock, decoder)  # connection.start
    sock.sendall(amqp_codec.encode_method(0, spec.ConnectionStartOk(
        client_properties={}, mechanism="PLAIN", response=b"\0guest\0guest", locale="en_US")))
    _amqp_frames(sock, decoder)  # connection.tune
    sock.sendall(amqp_codec.encode_method(0, spec.ConnectionTuneOk(channel_max=0, frame_max=131072, heartbeat=0))
                 + amqp_codec.encode_method(0, spec.ConnectionOpen(virtual_host="/")))
    _amqp_frames(sock, decoder)  # connection.open-ok
    announced = 64 * 1024 * 1024
    closes = []
    for channel in (1, 2, 3):
        sock.sendall(amqp_codec.encode_method(channel, spec.ChannelOpen()))
        _amqp_frames(sock, decoder)
        sock.sendall(_publish_head(channel, announced))  # the method and a header announcing 64 MiB; no body
        time.sleep(0.2)
        sock.setblocking(False)
        try:
            closes += [frame for frame in decoder.receive_data(sock.recv(65536))]
        except BlockingIOError:
            pass
        sock.setblocking(True)
    texts = [getattr(getattr(frame, "method", None), "reply_text", "") for frame in closes]
    assert any("unfinished messages" in text for text in texts), closes
    sock.close()
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", open_broker.ports["amqp"]))
    channel = connection.channel()
    channel.queue_declare("honest")
    channel.confirm_delivery()
    channel.basic_publish("", "honest", b"still served")
    method, _, body = channel.basic_get("honest", auto_ack=True)
    assert body == b"still served"
    connection.close()


def _peak_rss_bytes(process: BrokerProcess) -> int:
    """The broker's peak resident memory so far (VmHWM)."""
    assert process.process is not None
    for line in pathlib.Path(f"/proc/{process.process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_an_open_amqp_transaction_cannot_hold_unbounded_memory(open_broker: BrokerProcess) -> None:
    """Issue 17 #5: 256 publishes of 1 MiB in an open transaction took the broker from 69 to 327 MiB with no
    flow control; now the channel is closed with 406 once the connection holds 128 MiB."""
    peak_before = _peak_rss_bytes(open_broker)
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", open_broker.ports["amqp"]))
    channel = connection.channel()
    channel.queue_declare("tx-flood")
    channel.tx_select()
    body = b"x" * (1024 * 1024)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        for _ in range(256):
            channel.basic_publish("", "tx-flood", body)
        channel.tx_commit()
    assert closed.value.reply_code == 406 and "commit transactions sooner" in closed.value.reply_text
    growth = _peak_rss_bytes(open_broker) - peak_before
    print(f"\nthe broker's peak RSS grew by {growth / 2**20:.0f} MiB during the transaction flood")
    assert growth < 200 * 1024 * 1024  # the 128 MiB bound and the frames in flight, not 256 MiB and more
    honest = connection.channel()  # the connection and the broker go on
    honest.queue_declare("tx-flood")
    assert honest.queue_declare("tx-flood", passive=True).method.message_count == 0  # nothing was committed
    honest.confirm_delivery()
    honest.basic_publish("", "tx-flood", b"after")
    assert honest.basic_get("tx-flood", auto_ack=True)[2] == b"after"
    connection.close()


def _publish_head(channel: int, body_size: int) -> bytes:
    """basic.publish and a content header announcing ``body_size`` bytes (no body frames)."""
    method = amqp_codec.encode_method(channel, spec.BasicPublish(exchange="", routing_key="q"))
    header_payload = struct.pack(">HHQH", spec.BASIC_CLASS_ID, 0, body_size, 0)
    return method + struct.pack(">BHI", 2, channel, len(header_payload)) + header_payload + b"\xce"


# -- configuration and files -----------------------------------------------------------------------


def test_a_set_value_of_the_wrong_type_stops_start_up_by_name(tmp_path: pathlib.Path) -> None:
    """Issue 17 #9: a --set value used to be taken as text whatever the key's type."""
    result = subprocess.run([*TWISTD, "-n", "--pidfile=", "mqbroker", "--data-dir", str(tmp_path / "data"),
                             "--set", "security.allow_anonymous=[1, 2]"], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "'security.allow_anonymous'" in result.stdout + result.stderr


def test_the_metadata_log_and_data_directory_are_private(secured: SecuredBroker) -> None:
    """Issue 17 #8: the Raft entries log, which holds the users' SCRAM keys, was world-readable."""
    data_dir = secured.process.data_dir
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    raft = data_dir / "controller-raft"
    assert stat.S_IMODE(raft.stat().st_mode) == 0o700
    files = [path for path in raft.iterdir() if path.is_file()]
    assert files and all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in files)
    assert b"stored_key" in (raft / "entries.log").read_bytes() + (raft / "snapshot").read_bytes()


def test_an_unauthenticated_tls_client_cannot_reach_the_admin_apis(secured: SecuredBroker) -> None:
    """A client with no certificate and no SASL is refused before any admin API (metadata, users)."""
    before = _state(secured)
    context = ssl.create_default_context(cafile=str(secured.files.ca))
    with socket.create_connection(("127.0.0.1", secured.tls_ports["native"]), timeout=5) as plain:
        with context.wrap_socket(plain, server_hostname="localhost") as tls:
            from mqbroker.protocols.native.connection import ClientConnection

            codec = ClientConnection("attacker")
            correlation_id, data = codec.send_request(m.DescribeUserScramCredentialsRequest())
            tls.sendall(data)
            answers = []
            while not answers:
                answers = [event for event in codec.receive_data(tls.recv(65536))]
    assert isinstance(answers[0].response, ErrorResponse) and answers[0].response.error_code == 58
    assert _state(secured) == before
    _honest(secured)
