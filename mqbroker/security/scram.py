"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677): credentials and both sides of the exchange.

Sans-I/O: each side is a small state machine fed whole SASL messages (bytes) and returning the
reply; nonces and salts come from an injected ``random_bytes(count)`` source. No channel binding
(``n,,`` / ``y,,`` only) and no SASLprep (as Kafka), so names and passwords are compared as UTF-8.
A malformed or wrong message raises ``SaslAuthenticationError``; a message in the wrong state
raises ``IllegalSaslStateError``; either moves the exchange to the terminal ERROR state.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mqbroker import limits
from mqbroker.errors import IllegalSaslStateError, SaslAuthenticationError, UnsupportedSaslMechanismError

RandomBytes = Callable[[int], bytes]
"""A source of unpredictable bytes (``secrets.token_bytes`` in production, seeded in tests)."""

NONCE_BYTES = 24
SALT_BYTES = 24
DEFAULT_ITERATIONS = 8192


class ScramMechanism(enum.Enum):
    """A SCRAM variant: its SASL name and the hash it is built on."""

    SHA_256 = "SCRAM-SHA-256"
    SHA_512 = "SCRAM-SHA-512"

    @property
    def hash_name(self) -> str:
        """The hashlib name of the mechanism's hash function."""
        return "sha256" if self is ScramMechanism.SHA_256 else "sha512"

    @classmethod
    def from_name(cls, name: str) -> ScramMechanism:
        """The mechanism called ``name``, or UnsupportedSaslMechanismError."""
        try:
            return cls(name)
        except ValueError:
            raise UnsupportedSaslMechanismError(f"SASL mechanism {name!r} is not a supported SCRAM variant") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class ScramCredential:
    """What the server keeps for one user and mechanism: never the password itself."""

    mechanism: ScramMechanism
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (binary fields in base64) for cluster metadata."""
        return {
            "mechanism": self.mechanism.value,
            "salt": _b64(self.salt),
            "iterations": self.iterations,
            "stored_key": _b64(self.stored_key),
            "server_key": _b64(self.server_key),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScramCredential:
        """Rebuild a credential written by ``to_json``."""
        mechanism = ScramMechanism(data["mechanism"])
        iterations = int(data["iterations"])
        if not limits.scram_iterations_min <= iterations <= limits.scram_iterations_max:
            raise ValueError(f"{iterations} SCRAM iterations are outside {limits.scram_iterations_min}.."
                             f"{limits.scram_iterations_max}")
        return cls(
            mechanism=mechanism,
            salt=base64.b64decode(data["salt"], validate=True),
            iterations=iterations,
            stored_key=base64.b64decode(data["stored_key"], validate=True),
            server_key=base64.b64decode(data["server_key"], validate=True),
        )


#: A credential set from a client's salted password: (mechanism, salt, iterations, salted password).
ScramUpsertion = tuple[ScramMechanism, bytes, int, bytes]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _hmac(mechanism: ScramMechanism, key: bytes, message: bytes) -> bytes:
    return hmac.digest(key, message, mechanism.hash_name)


def _hash(mechanism: ScramMechanism, data: bytes) -> bytes:
    return hashlib.new(mechanism.hash_name, data).digest()


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode("utf-8"), salt, iterations)


def make_credential(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> ScramCredential:
    """Derive the stored credential for ``password`` (the salt is the caller's fresh random bytes)."""
    assert limits.scram_iterations_min <= iterations <= limits.scram_iterations_max, iterations
    return credential_from_salted_password(mechanism, salt, iterations, salted_password(mechanism, password, salt, iterations))


def credential_from_salted_password(mechanism: ScramMechanism, salt: bytes, iterations: int,
                                    salted: bytes) -> ScramCredential:
    """The stored credential of an already salted password (Kafka clients send those to set credentials)."""
    client_key = _hmac(mechanism, salted, b"Client Key")
    return ScramCredential(
        mechanism=mechanism,
        salt=salt,
        iterations=iterations,
        stored_key=_hash(mechanism, client_key),
        server_key=_hmac(mechanism, salted, b"Server Key"),
    )


def password_matches(credential: ScramCredential, password: str) -> bool:
    """True if ``password`` derives ``credential``'s stored key (used to check SASL PLAIN)."""
    salted = salted_password(credential.mechanism, password, credential.salt, credential.iterations)
    client_key = _hmac(credential.mechanism, salted, b"Client Key")
    return hmac.compare_digest(_hash(credential.mechanism, client_key), credential.stored_key)


class DecoyCredentials:
    """Plausible credentials for users that do not exist, so probing cannot tell them from real ones.

    Derived from a server secret and the user name: the same salt and iteration count every time
    for the same name (a real user's salt is stable too), and keys nobody can know.
    """

    def __init__(self, secret: bytes, iterations: int = DEFAULT_ITERATIONS) -> None:
        assert len(secret) >= 16, "the decoy secret must be unguessable"
        self.secret = secret
        self.iterations = iterations

    def credential(self, username: str, mechanism: ScramMechanism) -> ScramCredential:
        """The decoy for ``username`` under ``mechanism``."""
        def derive(purpose: bytes, size: int) -> bytes:
            message = purpose + b"\0" + mechanism.value.encode() + b"\0" + username.encode("utf-8", "surrogatepass")
            return hmac.digest(self.secret, message, "sha512")[:size]

        digest_size = hashlib.new(mechanism.hash_name).digest_size
        return ScramCredential(mechanism=mechanism, salt=derive(b"salt", SALT_BYTES), iterations=self.iterations,
                               stored_key=derive(b"stored-key", digest_size), server_key=derive(b"server-key", digest_size))


# -- message syntax ------------------------------------------------------------------------


def _fail(reason: str) -> SaslAuthenticationError:
    return SaslAuthenticationError(f"SCRAM authentication failed: {reason}")


def _text(message: bytes) -> str:
    if len(message) > limits.sasl_message_bytes_max:
        raise _fail(f"message of {len(message)} bytes exceeds {limits.sasl_message_bytes_max}")
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise _fail("message is not UTF-8") from None


def _attributes(text: str, expected: str) -> dict[str, str]:
    """Split ``a=x,b=y`` checking the leading attribute names against ``expected`` (extensions may follow)."""
    fields = text.split(",")
    if len(fields) < len(expected):
        raise _fail(f"expected attributes {','.join(expected)}")
    values: dict[str, str] = {}
    for index, field in enumerate(fields):
        name, equals, value = field.partition("=")
        if not equals or len(name) != 1:
            raise _fail(f"malformed attribute {field[:32]!r}")
        if index < len(expected) and name != expected[index]:
            raise _fail(f"expected attribute {expected[index]!r}, got {name!r}")
        values.setdefault(name, value)
    return values


def _decode_saslname(value: str) -> str:
    """Undo RFC 5802's escaping of ',' and '=' in user names."""
    parts = value.split("=")
    decoded = [parts[0]]
    for part in parts[1:]:
        if part.startswith("2C"):
            decoded.append("," + part[2:])
        elif part.startswith("3D"):
            decoded.append("=" + part[2:])
        else:
            raise _fail("user name has an unescaped '='")
    return "".join(decoded)


def _encode_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _check_nonce(nonce: str) -> str:
    if not nonce or any(not ("\x21" <= character <= "\x7e") or character == "," for character in nonce):
        raise _fail("nonce must be printable ASCII without ','")
    return nonce


def _b64decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise _fail(f"{what} is not valid base64") from None


def _new_nonce(random_bytes: RandomBytes) -> str:
    return base64.b64encode(random_bytes(NONCE_BYTES)).decode("ascii")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientFirst:
    """The parsed client-first message."""

    gs2_header: str
    authorization_id: str
    username: str
    client_nonce: str
    bare: str


def parse_client_first(message: bytes) -> ClientFirst:
    """Parse ``gs2-header client-first-message-bare`` (RFC 5802 §7)."""
    text = _text(message)
    flag, _, rest = text.partition(",")
    authorization, comma, bare = rest.partition(",")
    if not comma:
        raise _fail("client-first message has no GS2 header")
    if flag.startswith("p="):
        raise _fail("channel binding is not supported")
    if flag not in ("n", "y"):
        raise _fail(f"bad GS2 channel-binding flag {flag[:8]!r}")
    authorization_id = ""
    if authorization:
        if not authorization.startswith("a="):
            raise _fail("bad GS2 authorization identity")
        authorization_id = _decode_saslname(authorization[2:])
    if bare.startswith("m="):
        raise _fail("mandatory extensions are not supported")
    attributes = _attributes(bare, "nr")
    username = _decode_saslname(attributes["n"])
    if not username:
        raise _fail("empty user name")
    return ClientFirst(
        gs2_header=f"{flag},{authorization},",
        authorization_id=authorization_id,
        username=username,
        client_nonce=_check_nonce(attributes["r"]),
        bare=bare,
    )


# -- the server ----------------------------------------------------------------------------


class ScramServerState(enum.Enum):
    """Where a server-side exchange is."""

    AWAIT_CLIENT_FIRST = "await_client_first"
    AWAIT_CLIENT_FINAL = "await_client_final"
    COMPLETE = "complete"
    ERROR = "error"


CredentialLookup = Callable[[str, ScramMechanism], "ScramCredential | None"]
"""Finds a user's credential for a mechanism, or None if the user has none."""


class ScramServer:
    """The server side of one SCRAM exchange: ``respond(message) -> reply`` until ``complete``."""

    def __init__(self, mechanism: ScramMechanism, lookup: CredentialLookup, random_bytes: RandomBytes, *,
                 decoys: DecoyCredentials | None = None,
                 may_act_for_others: Callable[[str], bool] = lambda username: False) -> None:
        """``decoys`` answer for unknown users (random ones without it); a user for whom
        ``may_act_for_others`` is true may name a different authorization identity (brokers: their node id)."""
        self.mechanism = mechanism
        self.state = ScramServerState.AWAIT_CLIENT_FIRST
        self.username = ""
        self.authorization_id = ""
        self._lookup = lookup
        self._random_bytes = random_bytes
        self._decoys = decoys
        self._may_act_for_others = may_act_for_others
        self._credential: ScramCredential | None = None
        self._client_first: ClientFirst | None = None
        self._server_first = ""
        self._nonce = ""

    @property
    def complete(self) -> bool:
        """True once the client proved it knows the password."""
        return self.state is ScramServerState.COMPLETE

    def respond(self, message: bytes) -> bytes:
        """Consume the client's next message and return the server's reply."""
        handler = {
            ScramServerState.AWAIT_CLIENT_FIRST: self._on_client_first,
            ScramServerState.AWAIT_CLIENT_FINAL: self._on_client_final,
        }.get(self.state)
        if handler is None:
            finished = self.state
            self.state = ScramServerState.ERROR
            raise IllegalSaslStateError(f"SCRAM exchange is {finished.value}; no further message is expected")
        try:
            return handler(message)
        except SaslAuthenticationError:
            self.state = ScramServerState.ERROR
            raise

    def _on_client_first(self, message: bytes) -> bytes:
        first = parse_client_first(message)
        if (first.authorization_id and first.authorization_id != first.username
                and not self._may_act_for_others(first.username)):
            raise _fail("authorization identity differs from the user name")
        credential = self._lookup(first.username, self.mechanism)
        # An unknown user gets a plausible challenge and fails on the proof, so that
        # probing cannot tell unknown users from wrong passwords (RFC 5802 §5.1).
        self._credential = credential or self._decoy_credential(first.username)
        self._client_first = first
        self.username = first.username
        self.authorization_id = first.authorization_id
        self._nonce = first.client_nonce + _new_nonce(self._random_bytes)
        self._server_first = f"r={self._nonce},s={_b64(self._credential.salt)},i={self._credential.iterations}"
        self.state = ScramServerState.AWAIT_CLIENT_FINAL
        return self._server_first.encode("ascii")

    def _decoy_credential(self, username: str) -> ScramCredential:
        if self._decoys is not None:
            return self._decoys.credential(username, self.mechanism)
        digest_size = hashlib.new(self.mechanism.hash_name).digest_size
        return ScramCredential(
            mechanism=self.mechanism,
            salt=self._random_bytes(SALT_BYTES),
            iterations=DEFAULT_ITERATIONS,
            stored_key=self._random_bytes(digest_size),
            server_key=self._random_bytes(digest_size),
        )

    def _on_client_final(self, message: bytes) -> bytes:
        assert self._client_first is not None and self._credential is not None
        text = _text(message)
        without_proof, separator, proof_field = text.rpartition(",p=")
        if not separator:
            raise _fail("client-final message has no proof")
        attributes = _attributes(without_proof, "cr")
        if _b64decode(attributes["c"], "channel binding") != self._client_first.gs2_header.encode("utf-8"):
            raise _fail("channel binding does not match the GS2 header")
        if not hmac.compare_digest(attributes["r"].encode("utf-8"), self._nonce.encode("ascii")):
            raise _fail("nonce does not match this exchange")
        proof = _b64decode(proof_field, "proof")
        auth_message = f"{self._client_first.bare},{self._server_first},{without_proof}".encode("utf-8")
        signature = _hmac(self.mechanism, self._credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise _fail("proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(_hash(self.mechanism, client_key), self._credential.stored_key):
            raise _fail(f"invalid credentials for user {self.username!r}")
        self.state = ScramServerState.COMPLETE
        server_signature = _hmac(self.mechanism, self._credential.server_key, auth_message)
        return f"v={_b64(server_signature)}".encode("ascii")


# -- the client ----------------------------------------------------------------------------


class ScramClientState(enum.Enum):
    """Where a client-side exchange is."""

    INITIAL = "initial"
    AWAIT_SERVER_FIRST = "await_server_first"
    AWAIT_SERVER_FINAL = "await_server_final"
    COMPLETE = "complete"
    ERROR = "error"


class ScramClient:
    """The client side: ``first_message()``, ``respond(server_first)``, ``finish(server_final)``."""

    def __init__(self, mechanism: ScramMechanism, username: str, password: str, random_bytes: RandomBytes,
                 authorization_id: str = "") -> None:
        """``authorization_id``: act as this identity (a broker names its node id); empty: as ``username``."""
        self.mechanism = mechanism
        self.state = ScramClientState.INITIAL
        self._password = password
        self._gs2_header = f"n,a={_encode_saslname(authorization_id)}," if authorization_id else "n,,"
        self._nonce = _new_nonce(random_bytes)
        self._bare = f"n={_encode_saslname(username)},r={self._nonce}"
        self._auth_message = b""
        self._salted_password = b""

    def first_message(self) -> bytes:
        """The client-first message (no channel binding, no authorization identity)."""
        self._expect(ScramClientState.INITIAL)
        self.state = ScramClientState.AWAIT_SERVER_FIRST
        return f"{self._gs2_header}{self._bare}".encode("utf-8")

    def respond(self, server_first: bytes) -> bytes:
        """Check the server-first message and return the client-final message with the proof."""
        self._expect(ScramClientState.AWAIT_SERVER_FIRST)
        try:
            text = _text(server_first)
            attributes = _attributes(text, "rsi")
            nonce = _check_nonce(attributes["r"])
            if not nonce.startswith(self._nonce) or nonce == self._nonce:
                raise _fail("server nonce does not extend the client nonce")
            salt = _b64decode(attributes["s"], "salt")
            iterations = _iterations(attributes["i"])
        except SaslAuthenticationError:
            self.state = ScramClientState.ERROR
            raise
        without_proof = f"c={_b64(self._gs2_header.encode('utf-8'))},r={nonce}"
        self._auth_message = f"{self._bare},{text},{without_proof}".encode("utf-8")
        self._salted_password = salted_password(self.mechanism, self._password, salt, iterations)
        client_key = _hmac(self.mechanism, self._salted_password, b"Client Key")
        signature = _hmac(self.mechanism, _hash(self.mechanism, client_key), self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self.state = ScramClientState.AWAIT_SERVER_FINAL
        return f"{without_proof},p={_b64(proof)}".encode("ascii")

    def finish(self, server_final: bytes) -> None:
        """Verify the server's signature: the server, too, knew the credential."""
        self._expect(ScramClientState.AWAIT_SERVER_FINAL)
        try:
            attributes = _attributes(_text(server_final), "v")
            server_key = _hmac(self.mechanism, self._salted_password, b"Server Key")
            expected = _hmac(self.mechanism, server_key, self._auth_message)
            if not hmac.compare_digest(_b64decode(attributes["v"], "server signature"), expected):
                raise _fail("server signature is wrong: the server does not know the credential")
        except SaslAuthenticationError:
            self.state = ScramClientState.ERROR
            raise
        self.state = ScramClientState.COMPLETE

    def _expect(self, state: ScramClientState) -> None:
        if self.state is not state:
            actual = self.state
            self.state = ScramClientState.ERROR
            raise IllegalSaslStateError(f"SCRAM client is {actual.value}, not {state.value}")


def _iterations(value: str) -> int:
    if not value.isascii() or not value.isdigit() or len(value) > 9:
        raise _fail(f"bad iteration count {value[:16]!r}")
    iterations = int(value)
    if not limits.scram_iterations_min <= iterations <= limits.scram_iterations_max:
        raise _fail(
            f"iteration count {iterations} outside {limits.scram_iterations_min}..{limits.scram_iterations_max}"
        )
    return iterations
