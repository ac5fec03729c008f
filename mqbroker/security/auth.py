"""Authentication: users' salted SCRAM credentials, SASL PLAIN, and the authenticator front ends call.

Pure: randomness (salts, nonces) comes from an injected ``random_bytes(count)``. The store keeps
only derived SCRAM keys, never a password; PLAIN passwords are checked by deriving the stored key
again. Records serialize to JSON bytes for the cluster metadata log.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from zope.interface import implementer

from mqbroker import limits
from mqbroker.errors import (
    DuplicateResourceError,
    IllegalSaslStateError,
    InvalidRequestError,
    ResourceNotFoundError,
    SaslAuthenticationError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from mqbroker.interfaces import IAuthenticator, ISaslExchange
from mqbroker.model import ANONYMOUS, Principal
from mqbroker.security.inter_broker import BrokerCertificateRules, broker_principal
from mqbroker.security.names import name_problem
from mqbroker.security.principal_mapping import PrincipalMapper
from mqbroker.security.scram import (
    DEFAULT_ITERATIONS,
    SALT_BYTES,
    DecoyCredentials,
    RandomBytes,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    make_credential,
    password_matches,
)

PLAIN = "PLAIN"
USER = "User"


# -- SASL PLAIN ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PlainCredentials:
    """A parsed SASL PLAIN message (RFC 4616)."""

    authorization_id: str
    username: str
    password: str


def parse_plain(message: bytes) -> PlainCredentials:
    """Parse ``authzid NUL authcid NUL passwd``, or raise SaslAuthenticationError."""
    if len(message) > limits.sasl_message_bytes_max:
        raise SaslAuthenticationError(f"SASL PLAIN message of {len(message)} bytes is too large")
    parts = message.split(b"\x00")
    if len(parts) != 3:
        raise SaslAuthenticationError("invalid SASL PLAIN message: expected authzid, username and password")
    try:
        authorization_id, username, password = (part.decode("utf-8") for part in parts)
    except UnicodeDecodeError:
        raise SaslAuthenticationError("invalid SASL PLAIN message: not UTF-8") from None
    if not username or not password:
        raise SaslAuthenticationError("invalid SASL PLAIN message: empty username or password")
    if authorization_id and authorization_id != username:
        raise SaslAuthenticationError("SASL PLAIN authorization identity differs from the username")
    return PlainCredentials(authorization_id=authorization_id, username=username, password=password)


def encode_plain(username: str, password: str) -> bytes:
    """The client's SASL PLAIN message (no separate authorization identity)."""
    return b"\x00" + username.encode("utf-8") + b"\x00" + password.encode("utf-8")


# -- the credential store ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class UserRecord:
    """A user and their SCRAM credentials, one per mechanism: the unit stored in cluster metadata."""

    name: str
    credentials: tuple[ScramCredential, ...]

    def to_bytes(self) -> bytes:
        """Canonical JSON for the metadata log."""
        document = {"name": self.name, "credentials": [credential.to_json() for credential in self.credentials]}
        return json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> UserRecord:
        """Rebuild a record written by ``to_bytes``; InvalidRequestError (and nothing else) if it is not one."""
        try:
            document = json.loads(data)
            credentials = tuple(ScramCredential.from_json(item) for item in document["credentials"])
            name = document["name"]
        except (ValueError, KeyError, TypeError, AttributeError) as error:  # binascii.Error is a ValueError
            raise InvalidRequestError(f"malformed user record: {error!r}") from None
        if not isinstance(name, str):
            raise InvalidRequestError("malformed user record: the name is not a string")
        return cls(name=name, credentials=credentials)

    def credential(self, mechanism: ScramMechanism) -> ScramCredential | None:
        """The credential for ``mechanism``, if the user has one."""
        return next((item for item in self.credentials if item.mechanism is mechanism), None)


def check_username(name: str) -> str:
    """Return ``name`` if it can name a user, else raise InvalidRequestError saying why."""
    problem = name_problem(name, limits.username_length_max)
    if problem is not None:
        raise InvalidRequestError(f"user name {name[:64]!r} {problem}; use printable characters")
    return name


class CredentialStore:
    """Users and their salted SCRAM credentials (the in-memory image of the metadata records)."""

    def __init__(
        self,
        random_bytes: RandomBytes,
        iterations: int = DEFAULT_ITERATIONS,
        mechanisms: Iterable[ScramMechanism] = tuple(ScramMechanism),
    ) -> None:
        assert limits.scram_iterations_min <= iterations <= limits.scram_iterations_max, iterations
        self._random_bytes = random_bytes
        self._iterations = iterations
        self._mechanisms = tuple(mechanisms)
        self._users: dict[str, UserRecord] = {}
        #: Answer for users that do not exist (replace with ``use_decoy_secret`` once the cluster's secret is known).
        self.decoys = DecoyCredentials(random_bytes(32), iterations)

    def use_decoy_secret(self, secret: bytes) -> None:
        """Derive unknown users' decoys from ``secret`` (the same on every broker of the cluster)."""
        self.decoys = DecoyCredentials(secret, self._iterations)

    def add(self, name: str, password: str) -> UserRecord:
        """Create a user; returns the record to store. DuplicateResourceError if the user exists."""
        if check_username(name) in self._users:
            raise DuplicateResourceError(f"user {name!r} already exists; use `mqbroker users passwd {name}`")
        return self.put(self._derive(name, password))

    def passwd(self, name: str, password: str) -> UserRecord:
        """Replace a user's credentials with fresh ones (new salt) for ``password``."""
        if name not in self._users:
            raise ResourceNotFoundError(f"user {name!r} does not exist; create it with `mqbroker users add {name}`")
        return self.put(self._derive(name, password))

    def remove(self, name: str) -> None:
        """Delete a user. ResourceNotFoundError if there is none."""
        if self._users.pop(name, None) is None:
            raise ResourceNotFoundError(f"user {name!r} does not exist")

    def put(self, record: UserRecord) -> UserRecord:
        """Install a record as it comes from the metadata log (replacing any older one)."""
        self._users[record.name] = record
        return record

    def get(self, name: str) -> UserRecord | None:
        """The user's record, or None."""
        return self._users.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._users

    def list(self) -> list[str]:
        """Every user name, sorted."""
        return sorted(self._users)

    def lookup(self, name: str, mechanism: ScramMechanism) -> ScramCredential | None:
        """The user's credential for ``mechanism`` (None for an unknown user or mechanism)."""
        record = self._users.get(name)
        return record.credential(mechanism) if record else None

    def verify_password(self, name: str, password: str) -> bool:
        """True if ``password`` is the user's (checked against the stored SCRAM key)."""
        record = self._users.get(name)
        # An unknown user costs the same derivation as a real one, so timing cannot tell them apart.
        credential = record.credentials[0] if record else self.decoys.credential(name, self._mechanisms[0])
        matches = password_matches(credential, password)
        return matches and record is not None

    def to_bytes(self) -> bytes:
        """Every record as one JSON document (a snapshot for the metadata image)."""
        records = [json.loads(self._users[name].to_bytes()) for name in sorted(self._users)]
        return json.dumps(records, sort_keys=True, separators=(",", ":")).encode("utf-8")

    def load(self, data: bytes) -> None:
        """Replace the contents with a snapshot written by ``to_bytes``."""
        records = [UserRecord.from_bytes(json.dumps(item).encode("utf-8")) for item in json.loads(data)]
        self._users = {record.name: record for record in records}

    def _derive(self, name: str, password: str) -> UserRecord:
        if not password:
            raise UnacceptableCredentialError(f"the password of user {name!r} may not be empty")
        credentials = tuple(
            make_credential(mechanism, password, self._random_bytes(SALT_BYTES), self._iterations)
            for mechanism in self._mechanisms
        )
        return UserRecord(name=name, credentials=credentials)


# -- the authenticator ------------------------------------------------------------------------


@implementer(ISaslExchange)
class ScramExchange:
    """A SCRAM exchange whose result is a principal (``Broker:<id>`` for the inter-broker user)."""

    def __init__(self, server: ScramServer, host: str, inter_broker_username: str = "") -> None:
        self._server = server
        self._host = host
        self._inter_broker_username = inter_broker_username
        self.principal: Principal | None = None

    @property
    def complete(self) -> bool:
        """True once the client's proof was accepted."""
        return self._server.complete

    def respond(self, message: bytes) -> bytes:
        """Step the SCRAM server."""
        reply = self._server.respond(message)
        if self._server.complete:
            self.principal = self._principal_of(self._server)
        return reply

    def _principal_of(self, server: ScramServer) -> Principal:
        if not self._inter_broker_username or server.username != self._inter_broker_username:
            return Principal(USER, server.username, self._host)
        node = server.authorization_id
        if not (node.isascii() and node.isdigit() and 0 < len(node) <= 9):
            raise SaslAuthenticationError(
                "the inter-broker user must name its node id as the SCRAM authorization identity")
        return broker_principal(int(node), self._host)


@implementer(ISaslExchange)
class PlainExchange:
    """A one-message SASL PLAIN exchange."""

    def __init__(self, authenticator: Authenticator, secure: bool, host: str) -> None:
        self._authenticator = authenticator
        self._secure = secure
        self._host = host
        self._used = False
        self.principal: Principal | None = None

    @property
    def complete(self) -> bool:
        """True once the password was accepted."""
        return self.principal is not None

    def respond(self, message: bytes) -> bytes:
        """Check the PLAIN message; the reply is empty."""
        if self._used:
            raise IllegalSaslStateError("SASL PLAIN takes exactly one message")
        self._used = True
        credentials = parse_plain(message)
        self.principal = self._authenticator.authenticate_password(
            credentials.username, credentials.password, self._secure, self._host
        )
        return b""


@implementer(IAuthenticator)
class Authenticator:
    """Authenticates against a CredentialStore, maps certificates, and applies the anonymous policy."""

    def __init__(
        self,
        store: CredentialStore,
        random_bytes: RandomBytes,
        *,
        allow_anonymous: bool = True,
        plain_without_tls: bool = False,
        mapper: PrincipalMapper | None = None,
        scram_mechanisms: Iterable[ScramMechanism] = (ScramMechanism.SHA_512, ScramMechanism.SHA_256),
        broker_certificates: BrokerCertificateRules | None = None,
        inter_broker_username: str = "",
        inter_broker_credentials: Mapping[ScramMechanism, ScramCredential] | None = None,
    ) -> None:
        """``broker_certificates`` recognise other brokers' certificates (principal ``Broker:<id>``);
        ``inter_broker_username`` with its credentials is the SCRAM user brokers log in as."""
        self._store = store
        self._broker_certificates = broker_certificates
        self._inter_broker_username = inter_broker_username if inter_broker_credentials else ""
        self._inter_broker_credentials = dict(inter_broker_credentials or {})
        self._random_bytes = random_bytes
        self._allow_anonymous = allow_anonymous
        self._plain_without_tls = plain_without_tls
        self._mapper = mapper or PrincipalMapper()
        self._scram_mechanisms = tuple(scram_mechanisms)

    def mechanisms(self, secure: bool) -> list[str]:
        """SCRAM variants first; PLAIN only on TLS unless ``plain_without_tls``."""
        names = [mechanism.value for mechanism in self._scram_mechanisms]
        if secure or self._plain_without_tls:
            names.append(PLAIN)
        return names

    def start(self, mechanism: str, secure: bool, host: str) -> ISaslExchange:
        """A fresh exchange for ``mechanism``."""
        if mechanism not in self.mechanisms(secure):
            hint = " (PLAIN needs TLS)" if mechanism == PLAIN else ""
            raise UnsupportedSaslMechanismError(
                f"SASL mechanism {mechanism!r} is not enabled{hint}; use one of {', '.join(self.mechanisms(secure))}"
            )
        if mechanism == PLAIN:
            return PlainExchange(self, secure, host)
        server = ScramServer(ScramMechanism.from_name(mechanism), self._lookup, self._random_bytes,
                             decoys=self._store.decoys,
                             may_act_for_others=lambda username: username == self._inter_broker_username)
        return ScramExchange(server, host, self._inter_broker_username)

    def _lookup(self, name: str, mechanism: ScramMechanism) -> ScramCredential | None:
        if self._inter_broker_username and name == self._inter_broker_username:
            return self._inter_broker_credentials.get(mechanism)
        return self._store.lookup(name, mechanism)

    def authenticate_password(self, username: str, password: str, secure: bool, host: str) -> Principal:
        """The principal for a correct username and password."""
        if not secure and not self._plain_without_tls:
            raise SaslAuthenticationError("passwords are accepted only over TLS on this broker")
        if not self._store.verify_password(username, password):
            raise SaslAuthenticationError(f"authentication failed for user {username!r}: invalid credentials")
        return Principal(USER, username, host)

    def authenticate_password_or_anonymous(self, username: str, password: str, secure: bool, host: str) -> Principal:
        """For protocols whose clients always send credentials (AMQP's guest, MQTT's username): the user's
        principal; or, if anonymous access is allowed and the credentials cannot be checked (an unknown
        user, or a password over plaintext), the anonymous principal. A wrong password is always refused."""
        try:
            return self.authenticate_password(username, password, secure, host)
        except SaslAuthenticationError:
            uncheckable = username not in self._store or not (secure or self._plain_without_tls)
            if self._allow_anonymous and uncheckable:
                return self.anonymous(host)
            raise

    def authenticate_certificate(self, subject: str, alternative_names: Iterable[str], host: str) -> Principal:
        """``Broker:<id>`` for a broker certificate, else the principal the mapping rules give it."""
        alternative_names = tuple(alternative_names)
        if self._broker_certificates is not None:
            node_id = self._broker_certificates.node_id(subject, alternative_names)
            if node_id is not None:
                return broker_principal(node_id, host)
        name = self._mapper.map(subject, alternative_names)
        if name is None:
            raise SaslAuthenticationError(f"no principal mapping rule matches certificate subject {subject!r}")
        return Principal(USER, name, host)

    def anonymous(self, host: str) -> Principal:
        """``User:ANONYMOUS`` if anonymous access is allowed."""
        if not self._allow_anonymous:
            raise SaslAuthenticationError("anonymous access is disabled; authenticate with SASL or a client certificate")
        return dataclasses.replace(ANONYMOUS, host=host)
