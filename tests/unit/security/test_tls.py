"""TLS on loopback: the listener's context factory against the blocking client's SSLContext and the
Twisted client options; hostname checks, TLS 1.1 refused, mutual TLS, reload without restart."""

import shutil
import socket
import ssl
import subprocess
import warnings

import pytest
import pytest_twisted
from twisted.internet import defer, endpoints, protocol, threads

from mqbroker.security.certs import init_directory
from mqbroker.client.tls import client_ssl_context
from mqbroker.security.tls import ClientAuth, ReloadingServerContextFactory, ServerTlsFiles, client_options, peer_identity


class Echo(protocol.Protocol):
    """Echoes bytes and records the peer's certificate identity once the handshake is done."""

    def dataReceived(self, data):
        self.factory.identities.append(peer_identity(self.transport))
        self.transport.write(data)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    directory = tmp_path_factory.mktemp("certs")
    init_directory(directory, ["localhost", "127.0.0.1"], ["alice"])
    return directory


def server_files(certificates, client_auth=ClientAuth.NONE):
    return ServerTlsFiles(
        certificate=certificates / "server.pem",
        key=certificates / "server-key.pem",
        ca=certificates / "ca.pem",
        client_auth=client_auth,
    )


@defer.inlineCallbacks
def listen(context_factory):
    from twisted.internet import reactor

    factory = protocol.Factory.forProtocol(Echo)
    factory.identities = []
    endpoint = endpoints.SSL4ServerEndpoint(reactor, 0, context_factory, interface="127.0.0.1")
    port = yield endpoint.listen(factory)
    return port, factory


def blocking_echo(port, context, server_hostname="localhost", payload=b"ping"):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=server_hostname) as tls:
            tls.sendall(payload)
            return tls.recv(100), tls.getpeercert(binary_form=True)


@pytest_twisted.inlineCallbacks
def test_blocking_client_round_trip_verifies_the_server(certificates):
    port, factory = yield listen(ReloadingServerContextFactory(server_files(certificates)))
    try:
        echoed, _ = yield threads.deferToThread(blocking_echo, port.getHost().port, client_ssl_context(certificates / "ca.pem"))
        assert echoed == b"ping"
        assert factory.identities == [None]
    finally:
        yield port.stopListening()


@pytest_twisted.inlineCallbacks
def test_wrong_hostname_is_refused_by_the_client(certificates):
    port, _ = yield listen(ReloadingServerContextFactory(server_files(certificates)))
    try:
        attempt = threads.deferToThread(
            blocking_echo, port.getHost().port, client_ssl_context(certificates / "ca.pem"), "wrong.example"
        )
        with pytest.raises(ssl.SSLCertVerificationError, match="mismatch|doesn't match"):
            yield attempt
    finally:
        yield port.stopListening()


def tls11_client_context():
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client really offer TLS 1.1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # deprecated is the point here
        context.minimum_version = ssl.TLSVersion.TLSv1_1
        context.maximum_version = ssl.TLSVersion.TLSv1_1
    return context


@pytest_twisted.inlineCallbacks
def test_tls_1_1_is_refused_by_the_server(certificates):
    port, _ = yield listen(ReloadingServerContextFactory(server_files(certificates)))
    try:
        with pytest.raises(ssl.SSLError) as raised:
            yield threads.deferToThread(blocking_echo, port.getHost().port, tls11_client_context())
        assert "PROTOCOL_VERSION" in str(raised.value), raised.value  # the server's alert, not a client refusal
        result = yield threads.deferToThread(
            subprocess.run,
            ["openssl", "s_client", "-tls1_1", "-cipher", "DEFAULT:@SECLEVEL=0", "-connect", f"127.0.0.1:{port.getHost().port}"],
            input=b"", capture_output=True, timeout=10,
        )
        assert result.returncode != 0
        assert b"alert protocol version" in result.stderr
    finally:
        yield port.stopListening()


@pytest_twisted.inlineCallbacks
def test_required_client_certificate_becomes_the_peer_identity(certificates):
    port, factory = yield listen(ReloadingServerContextFactory(server_files(certificates, ClientAuth.REQUIRED)))
    number = port.getHost().port
    try:
        with_certificate = client_ssl_context(certificates / "ca.pem", certificates / "alice.pem", certificates / "alice-key.pem")
        echoed, _ = yield threads.deferToThread(blocking_echo, number, with_certificate)
        assert echoed == b"ping"
        assert factory.identities[0].subject == "CN=alice"
        with pytest.raises((ssl.SSLError, ConnectionError)):
            yield threads.deferToThread(blocking_echo, number, client_ssl_context(certificates / "ca.pem"))
    finally:
        yield port.stopListening()


@pytest_twisted.inlineCallbacks
def test_changed_certificate_files_are_served_without_restart(certificates, tmp_path):
    for name in ("server.pem", "server-key.pem", "ca.pem", "ca-key.pem"):
        shutil.copy(certificates / name, tmp_path / name)
    errors = []
    port, _ = yield listen(ReloadingServerContextFactory(server_files(tmp_path), on_reload_error=errors.append))
    number = port.getHost().port
    context = client_ssl_context(tmp_path / "ca.pem")
    try:
        _, before = yield threads.deferToThread(blocking_echo, number, context)
        init_directory(tmp_path, ["localhost", "127.0.0.1"], [])  # same CA, new server certificate
        _, after = yield threads.deferToThread(blocking_echo, number, context)
        assert before != after and errors == []
    finally:
        yield port.stopListening()


@pytest_twisted.inlineCallbacks
def test_twisted_client_options_check_the_hostname(certificates):
    from twisted.internet import reactor

    port, _ = yield listen(ReloadingServerContextFactory(server_files(certificates)))
    number = port.getHost().port

    class Once(protocol.Protocol):
        def connectionMade(self):
            self.transport.write(b"hello")
            self.received = defer.Deferred()

        def dataReceived(self, data):
            self.received.callback(data)

        def connectionLost(self, reason):
            if not self.received.called:
                self.received.errback(reason)

    def connect(hostname):
        endpoint = endpoints.wrapClientTLS(
            client_options(hostname, certificates / "ca.pem"),
            endpoints.TCP4ClientEndpoint(reactor, "127.0.0.1", number),
        )
        return endpoint.connect(protocol.Factory.forProtocol(Once))

    try:
        good = yield connect("localhost")
        assert (yield good.received.addTimeout(5, reactor)) == b"hello"
        good.transport.loseConnection()
        bad = yield connect("wrong.example")
        with pytest.raises(Exception, match="(?i)verif|mismatch"):
            yield bad.received.addTimeout(5, reactor)
    finally:
        yield port.stopListening()


def test_context_factory_provides_the_twisted_interface(certificates):
    from twisted.internet.interfaces import IOpenSSLServerConnectionCreator
    from zope.interface.verify import verifyObject

    assert verifyObject(IOpenSSLServerConnectionCreator, ReloadingServerContextFactory(server_files(certificates)))


def test_unusable_new_files_keep_the_old_context_and_report_the_error(certificates, tmp_path):
    for name in ("server.pem", "server-key.pem", "ca.pem"):
        shutil.copy(certificates / name, tmp_path / name)
    errors = []
    factory = ReloadingServerContextFactory(server_files(tmp_path), on_reload_error=errors.append)
    before = factory.getContext()
    (tmp_path / "server-key.pem").write_bytes(b"not a key")
    assert factory.getContext() is before
    assert len(errors) == 1


def test_client_auth_without_a_ca_is_a_configuration_error(certificates):
    with pytest.raises(ValueError, match="--tls-ca"):
        ServerTlsFiles(certificate=certificates / "server.pem", key=certificates / "server-key.pem",
                       client_auth=ClientAuth.REQUIRED)
