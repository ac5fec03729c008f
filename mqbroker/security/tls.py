"""TLS for listeners and the Twisted client: context factories from PEM files, reloadable in place.

Servers speak TLS 1.2 or newer with forward-secret AEAD ciphers only, and may ask for (optional)
or demand (required) a client certificate signed by the configured CA. The server context is
rebuilt when the certificate, key or CA file changes (checked at each new connection), so a
renewed certificate takes effect without a restart; a half-written set of files keeps the old
context and is reported to ``on_reload_error``.
"""

from __future__ import annotations

import enum
import os
import pathlib
from collections.abc import Callable
from dataclasses import dataclass

from cryptography import x509
from OpenSSL import SSL
from twisted.internet import ssl as twisted_ssl
from twisted.internet.interfaces import IOpenSSLServerConnectionCreator
from zope.interface import implementer

from mqbroker.model import PeerIdentity

#: TLS 1.2 suites (TLS 1.3 has its own, all modern): ECDHE/DHE key exchange, AEAD only.
MODERN_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:DHE+AESGCM:DHE+CHACHA20:!aNULL:!eNULL:!MD5:!DSS:!SHA1"


class ClientAuth(enum.Enum):
    """Whether a listener asks clients for a certificate."""

    NONE = "none"
    OPTIONAL = "optional"
    REQUIRED = "required"


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerTlsFiles:
    """The PEM files of a TLS listener (``--tls-cert``, ``--tls-key``, ``--tls-ca``, ``--tls-client-auth``)."""

    certificate: pathlib.Path
    key: pathlib.Path
    ca: pathlib.Path | None = None
    client_auth: ClientAuth = ClientAuth.NONE

    def __post_init__(self) -> None:
        if self.client_auth is not ClientAuth.NONE and self.ca is None:
            raise ValueError(f"--tls-client-auth {self.client_auth.value} needs --tls-ca to verify client certificates")

    def paths(self) -> tuple[pathlib.Path, ...]:
        """Every file the context is built from."""
        return (self.certificate, self.key) + ((self.ca,) if self.ca else ())


def build_server_context(files: ServerTlsFiles) -> SSL.Context:
    """An OpenSSL context for a listener; raises ``SSL.Error``/``OSError`` for unusable files."""
    context = SSL.Context(SSL.TLS_SERVER_METHOD)
    context.set_min_proto_version(SSL.TLS1_2_VERSION)
    context.set_options(SSL.OP_NO_COMPRESSION | SSL.OP_CIPHER_SERVER_PREFERENCE | SSL.OP_NO_RENEGOTIATION)
    context.set_cipher_list(MODERN_CIPHERS.encode("ascii"))
    context.use_certificate_chain_file(str(files.certificate))
    context.use_privatekey_file(str(files.key))
    context.check_privatekey()
    if files.client_auth is not ClientAuth.NONE:
        assert files.ca is not None
        context.load_verify_locations(str(files.ca))
        mode = SSL.VERIFY_PEER
        if files.client_auth is ClientAuth.REQUIRED:
            mode |= SSL.VERIFY_FAIL_IF_NO_PEER_CERT
        context.set_verify(mode)
    # Distinct per process and listener so sessions from elsewhere are never resumed here.
    context.set_session_id(os.urandom(16))
    return context


def _file_state(paths: tuple[pathlib.Path, ...]) -> tuple[tuple[int, int, int], ...]:
    states = []
    for path in paths:
        status = path.stat()
        states.append((status.st_ino, status.st_size, status.st_mtime_ns))
    return tuple(states)


@implementer(IOpenSSLServerConnectionCreator)
class ReloadingServerContextFactory:
    """A listener's TLS context factory that picks up changed certificate files."""

    def __init__(self, files: ServerTlsFiles, on_reload_error: Callable[[Exception], None] | None = None) -> None:
        self.files = files
        self._on_reload_error = on_reload_error
        self._state = _file_state(files.paths())
        self._context = build_server_context(files)

    def reload(self) -> None:
        """Rebuild the context from the files now; on error the old one stays and the error is raised."""
        state = _file_state(self.files.paths())
        self._context = build_server_context(self.files)
        self._state = state

    def _reload_if_changed(self) -> None:
        try:
            if _file_state(self.files.paths()) != self._state:
                self.reload()
        except (OSError, SSL.Error, ValueError) as error:
            if self._on_reload_error is None:
                raise
            self._on_reload_error(error)

    def getContext(self) -> SSL.Context:
        """The current context (for APIs that take an old-style context factory)."""
        self._reload_if_changed()
        return self._context

    def serverConnectionForTLS(self, tlsProtocol: object) -> SSL.Connection:
        """A server-side connection on the current context."""
        return SSL.Connection(self.getContext(), None)


def client_options(
    hostname: str,
    ca: pathlib.Path | None = None,
    certificate: pathlib.Path | None = None,
    key: pathlib.Path | None = None,
) -> object:
    """Twisted client TLS options: TLS 1.2+, the server verified against ``ca`` (else the system
    store) and its hostname checked by service_identity; optionally our own certificate."""
    trust_root = twisted_ssl.Certificate.loadPEM(pathlib.Path(ca).read_bytes()) if ca else twisted_ssl.platformTrust()
    client_certificate = None
    if certificate is not None:
        pem = pathlib.Path(certificate).read_bytes() + pathlib.Path(key or certificate).read_bytes()
        client_certificate = twisted_ssl.PrivateCertificate.loadPEM(pem)
    return twisted_ssl.optionsForClientTLS(
        hostname,
        trustRoot=trust_root,
        clientCertificate=client_certificate,
        extraCertificateOptions={"raiseMinimumTo": twisted_ssl.TLSVersion.TLSv1_2},
    )


def certificate_identity(certificate: x509.Certificate) -> PeerIdentity:
    """Subject (RFC 4514) and SANs written ``DNS:``, ``IP:``, ``URI:``, ``EMAIL:``."""
    names: list[str] = []
    try:
        extension = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        extension = None
    if extension is not None:
        for prefix, kind in (("DNS", x509.DNSName), ("IP", x509.IPAddress), ("URI", x509.UniformResourceIdentifier),
                             ("EMAIL", x509.RFC822Name)):
            names.extend(f"{prefix}:{value}" for value in extension.get_values_for_type(kind))
    return PeerIdentity(subject=certificate.subject.rfc4514_string(), alternative_names=tuple(names))


def peer_identity(transport: object) -> PeerIdentity | None:
    """The identity in the peer certificate of a Twisted TLS transport (after the handshake), if any."""
    get_peer_certificate = getattr(transport, "getPeerCertificate", None)
    peer = get_peer_certificate() if get_peer_certificate else None
    return None if peer is None else certificate_identity(peer.to_cryptography())
