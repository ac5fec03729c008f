"""Users, SASL PLAIN and the authenticator: what front ends rely on to know who a client is."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from zope.interface.verify import verifyObject

from mqbroker.security.auth import Authenticator, CredentialStore, UserRecord, encode_plain, parse_plain
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
from mqbroker.model import Principal
from mqbroker.security.principal_mapping import PrincipalMapper
from mqbroker.security.scram import ScramClient, ScramMechanism


def seeded_bytes(seed: int):
    generator = random.Random(seed)
    return lambda count: generator.randbytes(count)


@pytest.fixture
def store():
    users = CredentialStore(seeded_bytes(1), iterations=4096)
    users.add("alice", "wonderland")
    return users


def authenticator(store, **options):
    return Authenticator(store, seeded_bytes(2), **options)


def test_plain_message_parses_into_its_three_parts():
    assert parse_plain(b"alice\x00alice\x00pw").password == "pw"
    assert parse_plain(encode_plain("bob", "secret")).username == "bob"


@pytest.mark.parametrize(
    "message",
    [b"", b"alice\x00pw", b"\x00\x00pw", b"\x00alice\x00", b"a\x00b\x00c\x00d", b"root\x00alice\x00pw", b"\xff\x00a\x00b"],
)
def test_malformed_plain_is_an_authentication_failure(message):
    with pytest.raises(SaslAuthenticationError):
        parse_plain(message)


@given(st.binary(max_size=300))
def test_garbage_into_plain_raises_only_the_typed_error(message):
    try:
        credentials = parse_plain(message)
    except SaslAuthenticationError:
        return
    assert encode_plain(credentials.username, credentials.password) in (message, b"\x00" + message.split(b"\x00", 1)[1])


def test_store_keeps_no_plaintext_and_verifies_passwords(store):
    record = store.lookup("alice", ScramMechanism.SHA_256)
    assert record is not None and record.iterations == 4096
    assert b"wonderland" not in store.to_bytes()
    assert store.verify_password("alice", "wonderland")
    assert not store.verify_password("alice", "wonderlands")
    assert not store.verify_password("nobody", "wonderland")


def test_store_add_remove_list_passwd(store):
    store.add("bob", "builder")
    assert store.list() == ["alice", "bob"]
    with pytest.raises(DuplicateResourceError):
        store.add("bob", "again")
    old_salt = store.lookup("bob", ScramMechanism.SHA_512).salt
    store.passwd("bob", "digger")
    assert store.lookup("bob", ScramMechanism.SHA_512).salt != old_salt
    assert store.verify_password("bob", "digger") and not store.verify_password("bob", "builder")
    store.remove("bob")
    assert store.list() == ["alice"]
    with pytest.raises(ResourceNotFoundError):
        store.remove("bob")
    with pytest.raises(ResourceNotFoundError):
        store.passwd("bob", "x")


def test_store_refuses_empty_passwords_and_bad_names(store):
    with pytest.raises(UnacceptableCredentialError):
        store.add("carol", "")
    with pytest.raises(InvalidRequestError):
        store.add("", "pw")
    with pytest.raises(InvalidRequestError):
        store.add("line\nbreak", "pw")


def test_records_and_snapshots_round_trip_through_bytes(store):
    record = store.add("bob", "builder")
    assert UserRecord.from_bytes(record.to_bytes()) == record
    copy = CredentialStore(seeded_bytes(9))
    copy.load(store.to_bytes())
    assert copy.list() == ["alice", "bob"]
    assert copy.verify_password("bob", "builder")


def test_authenticator_provides_the_interfaces(store):
    auth = authenticator(store)
    assert verifyObject(IAuthenticator, auth)
    assert verifyObject(ISaslExchange, auth.start("SCRAM-SHA-256", False, "10.0.0.1"))
    assert verifyObject(ISaslExchange, auth.start("PLAIN", True, "10.0.0.1"))


def test_scram_through_the_authenticator_yields_a_principal_with_host(store):
    exchange = authenticator(store).start("SCRAM-SHA-512", False, "10.0.0.7")
    client = ScramClient(ScramMechanism.SHA_512, "alice", "wonderland", seeded_bytes(3))
    client.finish(exchange.respond(client.respond(exchange.respond(client.first_message()))))
    assert exchange.complete
    assert exchange.principal == Principal("User", "alice", "10.0.0.7")


def test_plain_is_offered_only_over_tls_unless_allowed(store):
    assert "PLAIN" not in authenticator(store).mechanisms(secure=False)
    assert authenticator(store).mechanisms(secure=True)[-1] == "PLAIN"
    with pytest.raises(UnsupportedSaslMechanismError, match="TLS"):
        authenticator(store).start("PLAIN", False, "h")
    assert "PLAIN" in authenticator(store, plain_without_tls=True).mechanisms(secure=False)
    with pytest.raises(SaslAuthenticationError):
        authenticator(store).authenticate_password("alice", "wonderland", False, "h")


def test_plain_exchange_accepts_the_right_password_once(store):
    exchange = authenticator(store).start("PLAIN", True, "h")
    assert exchange.respond(encode_plain("alice", "wonderland")) == b""
    assert exchange.principal == Principal("User", "alice", "h")
    with pytest.raises(IllegalSaslStateError):
        exchange.respond(encode_plain("alice", "wonderland"))


def test_plain_exchange_refuses_a_wrong_password(store):
    exchange = authenticator(store).start("PLAIN", True, "h")
    with pytest.raises(SaslAuthenticationError):
        exchange.respond(encode_plain("alice", "wrong"))
    assert not exchange.complete


def test_unknown_mechanism_is_unsupported(store):
    with pytest.raises(UnsupportedSaslMechanismError):
        authenticator(store).start("GSSAPI", True, "h")


def test_anonymous_access_follows_the_configuration(store):
    assert authenticator(store).anonymous("h") == Principal("User", "ANONYMOUS", "h")
    with pytest.raises(SaslAuthenticationError, match="anonymous access is disabled"):
        authenticator(store, allow_anonymous=False).anonymous("h")


def test_certificate_subject_becomes_the_principal(store):
    auth = authenticator(store, mapper=PrincipalMapper("RULE:^CN=(.*?),.*$/$1/"))
    assert auth.authenticate_certificate("CN=device-7,O=Acme", [], "h") == Principal("User", "device-7", "h")
    with pytest.raises(SaslAuthenticationError, match="no principal mapping rule"):
        auth.authenticate_certificate("O=Acme", [], "h")
