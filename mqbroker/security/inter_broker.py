"""Broker identities: who may speak for node N on the controller port and between brokers (pure).

A peer proves it is broker N in one of two ways:

* **a broker certificate** (mutual TLS): a certificate from the cluster's CA that the broker
  certificate rules map to a node id. The default rule takes the id from the subject
  alternative name ``URI:urn:mqbroker:broker:<id>``, which ``mqbroker certs init --broker N``
  writes and a user certificate (``--client alice``) never carries, so a user certificate from
  the same CA is not a broker.
* **the inter-broker SCRAM user** (for clusters without mutual TLS): every broker is configured
  with the same user name and password (``security.inter_broker_user``,
  ``security.inter_broker_password_file``); its credential is derived from them with a salt fixed
  by the cluster id, so it is never stored and needs no metadata (the controller must
  authenticate before any metadata exists). A broker logs in as that user with its node id as
  the SCRAM authorization identity. This proves "a broker of this cluster"; the node id is the
  broker's claim (as in Kafka, where brokers share one inter-broker principal).

Either way the peer's principal is ``Broker:<id>``. ``ServerHandshake`` and ``ClientHandshake``
are the sans-I/O opening of a controller connection (before any Raft frame): the dialing broker
says who it is (HELLO) and proves it; the listening broker checks the proof and that the node is
a configured voter, then answers ACCEPT, or REFUSE with the reason and closes.
"""

from __future__ import annotations

import enum
import hashlib
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from mqbroker.errors import SaslAuthenticationError
from mqbroker.model import Principal
from mqbroker.security.principal_mapping import PrincipalMapper
from mqbroker.security.scram import (
    DEFAULT_ITERATIONS,
    SALT_BYTES,
    RandomBytes,
    ScramClient,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    make_credential,
)

#: The principal type of a broker speaking for itself (never a client's: no login yields it but these).
BROKER = "Broker"
#: The default broker certificate rule: the node id from the SAN ``URI:urn:mqbroker:broker:<id>``.
BROKER_URI_PREFIX = "urn:mqbroker:broker:"
DEFAULT_BROKER_CERTIFICATE_RULES = r"SAN:^URI:urn:mqbroker:broker:([0-9]{1,9})$/$1/"
#: The SCRAM variant brokers use with each other.
INTER_BROKER_MECHANISM = ScramMechanism.SHA_512


def broker_principal(node_id: int, host: str = "") -> Principal:
    """``Broker:<node_id>``."""
    return Principal(BROKER, str(node_id), host)


def broker_node_id(principal: Principal) -> int | None:
    """The node id of a ``Broker:<id>`` principal, None for any other principal."""
    if principal.kind != BROKER or not principal.name.isdigit():
        return None
    return int(principal.name)


def broker_uri(node_id: int) -> str:
    """The SAN URI a broker certificate carries (``mqbroker certs init --broker N``)."""
    return f"{BROKER_URI_PREFIX}{node_id}"


class BrokerCertificateRules:
    """Maps a verified certificate to the node id it names, or None (not a broker certificate)."""

    def __init__(self, rules: str = DEFAULT_BROKER_CERTIFICATE_RULES) -> None:
        self._mapper = PrincipalMapper(rules)

    def node_id(self, subject: str, alternative_names: tuple[str, ...]) -> int | None:
        """The node id the first matching rule yields, if it is a decimal number."""
        mapped = self._mapper.map(subject, alternative_names)
        if mapped is None or not mapped.isascii() or not mapped.isdigit() or len(mapped) > 9:
            return None
        return int(mapped)


def inter_broker_credentials(cluster_id: str, username: str, password: str) -> Mapping[ScramMechanism, ScramCredential]:
    """The inter-broker user's SCRAM credentials: the same on every broker of ``cluster_id``, never stored."""
    credentials = {}
    for mechanism in ScramMechanism:
        seed = f"mqbroker inter-broker salt\0{cluster_id}\0{username}\0{mechanism.value}".encode()
        salt = hashlib.sha256(seed).digest()[:SALT_BYTES]
        credentials[mechanism] = make_credential(mechanism, password, salt, DEFAULT_ITERATIONS)
    return credentials


@dataclass(frozen=True, slots=True, kw_only=True)
class InterBrokerLogin:
    """The inter-broker SCRAM user and password a broker logs in with (the same on every broker)."""

    username: str
    password: str


# -- the controller handshake -----------------------------------------------------------------


class HandshakeMethod(enum.IntEnum):
    """How a dialing broker proves its identity."""

    NONE = 0  #: only accepted by a controller that requires no authentication
    CERTIFICATE = 1  #: its TLS client certificate is a broker certificate naming its node id
    SCRAM = 2  #: the inter-broker SCRAM user


class _Tag(enum.IntEnum):
    HELLO = 0xC1
    STEP = 0xC2
    ACCEPT = 0xC3
    REFUSE = 0xC4


_HELLO = struct.Struct(">IB")  # node id, method; then the SCRAM client-first message, if any


class PeerAuthenticationError(SaslAuthenticationError):
    """A peer did not prove a broker identity (or the handshake was malformed); the connection closes."""


def _body(tag: _Tag, payload: bytes = b"") -> bytes:
    return bytes([tag]) + payload


def _split(body: bytes) -> tuple[_Tag, bytes]:
    if not body or body[0] not in _Tag._value2member_map_:
        raise PeerAuthenticationError("not a controller handshake frame")
    return _Tag(body[0]), body[1:]


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerPolicy:
    """What the controller listener accepts: which nodes, proven how."""

    voters: frozenset[int]
    require_authentication: bool
    certificate_rules: BrokerCertificateRules | None = None
    scram_username: str = ""
    scram_credentials: Mapping[ScramMechanism, ScramCredential] = field(default_factory=dict)


class ServerHandshake:
    """The listening side: ``receive(frame body) -> frame bodies to send`` until ``node_id`` is set.

    Raises ``PeerAuthenticationError`` for a peer that does not prove a voter's identity; send
    ``refusal(error)`` and close.
    """

    def __init__(self, policy: PeerPolicy, tls_identity: tuple[str, tuple[str, ...]] | None,
                 random_bytes: RandomBytes) -> None:
        self._policy = policy
        self._tls_identity = tls_identity
        self._random_bytes = random_bytes
        self._scram: ScramServer | None = None
        self._claimed = 0
        self.node_id: int | None = None
        self.method: HandshakeMethod | None = None

    @property
    def complete(self) -> bool:
        """True once the peer proved who it is."""
        return self.node_id is not None

    def receive(self, body: bytes) -> list[bytes]:
        """Step the handshake with one frame from the peer."""
        tag, payload = _split(body)
        if self.complete:
            raise PeerAuthenticationError("a handshake frame after the handshake")
        if tag is _Tag.HELLO and self.method is None:
            return self._hello(payload)
        if tag is _Tag.STEP and self._scram is not None:
            final = self._scram.respond(payload)
            return [self._accept(final)]
        raise PeerAuthenticationError(f"unexpected {tag.name} in the controller handshake")

    def _hello(self, payload: bytes) -> list[bytes]:
        if len(payload) < _HELLO.size:
            raise PeerAuthenticationError("a truncated HELLO")
        node_id, method = _HELLO.unpack_from(payload)
        if method not in HandshakeMethod._value2member_map_:
            raise PeerAuthenticationError(f"unknown handshake method {method}")
        self.method = HandshakeMethod(method)
        self._claimed = node_id
        if node_id not in self._policy.voters:
            raise PeerAuthenticationError(
                f"node {node_id} is not a controller voter here (voters: {sorted(self._policy.voters)})")
        if self.method is HandshakeMethod.NONE:
            if self._policy.require_authentication:
                raise PeerAuthenticationError(
                    f"node {node_id} did not authenticate; this controller requires a broker certificate or the "
                    "inter-broker SCRAM user")
            return [self._accept()]
        if self.method is HandshakeMethod.CERTIFICATE:
            self._check_certificate(node_id)
            return [self._accept()]
        credentials = self._policy.scram_credentials
        if not credentials:
            raise PeerAuthenticationError("this controller has no inter-broker SCRAM user configured")
        username = self._policy.scram_username
        self._scram = ScramServer(INTER_BROKER_MECHANISM,
                                  lambda name, mechanism: credentials.get(mechanism) if name == username else None,
                                  self._random_bytes)
        return [_body(_Tag.STEP, self._scram.respond(payload[_HELLO.size :]))]

    def _check_certificate(self, node_id: int) -> None:
        rules = self._policy.certificate_rules
        if self._tls_identity is None or rules is None:
            raise PeerAuthenticationError(f"node {node_id} claims a certificate but the connection has none")
        named = rules.node_id(*self._tls_identity)
        if named != node_id:
            raise PeerAuthenticationError(
                f"the certificate {self._tls_identity[0]!r} is not broker {node_id}'s"
                f" ({'names broker ' + str(named) if named is not None else 'not a broker certificate'})")

    def _accept(self, payload: bytes = b"") -> bytes:
        self.node_id = self._claimed
        return _body(_Tag.ACCEPT, payload)


def refusal(error: Exception) -> bytes:
    """The REFUSE frame body telling the peer why it is being disconnected."""
    return _body(_Tag.REFUSE, str(error).encode("utf-8", "replace")[:1024])


class ClientHandshake:
    """The dialing side: ``start()``, then ``receive(frame body)`` until ``complete``."""

    def __init__(self, *, node_id: int, peer_id: int, method: HandshakeMethod, random_bytes: RandomBytes,
                 login: InterBrokerLogin | None = None, certificate_rules: BrokerCertificateRules | None = None,
                 tls_identity: tuple[str, tuple[str, ...]] | None = None) -> None:
        assert method is not HandshakeMethod.SCRAM or login is not None, "SCRAM needs the inter-broker login"
        self._node_id = node_id
        self._peer_id = peer_id
        self._method = method
        self._certificate_rules = certificate_rules
        #: The listener's certificate (subject, SANs), for CERTIFICATE: set by the driver once TLS is up.
        self.tls_identity = tls_identity
        self._scram = (ScramClient(INTER_BROKER_MECHANISM, login.username, login.password, random_bytes)
                       if login is not None and method is HandshakeMethod.SCRAM else None)
        self.complete = False

    def start(self) -> bytes:
        """The HELLO frame body."""
        first = self._scram.first_message() if self._scram is not None else b""
        return _body(_Tag.HELLO, _HELLO.pack(self._node_id, self._method) + first)

    def receive(self, body: bytes) -> bytes | None:
        """Step with the listener's frame; returns the next frame body to send, if any."""
        tag, payload = _split(body)
        if tag is _Tag.REFUSE:
            raise PeerAuthenticationError(f"node {self._peer_id} refused us: {payload.decode('utf-8', 'replace')}")
        if tag is _Tag.STEP and self._scram is not None:
            return _body(_Tag.STEP, self._scram.respond(payload))
        if tag is _Tag.ACCEPT and not self.complete:
            if self._scram is not None:
                self._scram.finish(payload)  # the listener, too, knew the inter-broker credential
            if self._method is HandshakeMethod.CERTIFICATE:
                self._check_listener_certificate()
            self.complete = True
            return None
        raise PeerAuthenticationError(f"unexpected {tag.name} from node {self._peer_id}")

    def _check_listener_certificate(self) -> None:
        rules = self._certificate_rules
        named = rules.node_id(*self.tls_identity) if rules is not None and self.tls_identity is not None else None
        if named != self._peer_id:
            raise PeerAuthenticationError(
                f"the controller at node {self._peer_id}'s address did not present node {self._peer_id}'s broker"
                " certificate")
