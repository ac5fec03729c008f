"""SCRAM-SHA-256/512: server against client, RFC 7677's vector, and every way an exchange fails."""

import base64
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.errors import IllegalSaslStateError, SaslAuthenticationError, UnsupportedSaslMechanismError
from mqbroker.security.scram import (
    ScramClient,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    ScramServerState,
    make_credential,
    parse_client_first,
    password_matches,
)

ITERATIONS = 4096


def seeded_bytes(seed: int):
    """A deterministic bytes source standing in for secrets.token_bytes."""
    generator = random.Random(seed)
    return lambda count: generator.randbytes(count)


def lookup_for(mechanism: ScramMechanism, password: str = "pencil"):
    credential = make_credential(mechanism, password, b"salt-of-alice", ITERATIONS)
    return lambda name, wanted: credential if name == "alice" and wanted is mechanism else None


def run_exchange(mechanism, client_password="pencil", username="alice", seed=1):
    server = ScramServer(mechanism, lookup_for(mechanism), seeded_bytes(seed))
    client = ScramClient(mechanism, username, client_password, seeded_bytes(seed + 100))
    server_first = server.respond(client.first_message())
    server_final = server.respond(client.respond(server_first))
    client.finish(server_final)
    return server, client


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_client_and_server_agree_on_the_right_password(mechanism):
    server, client = run_exchange(mechanism)
    assert server.complete and server.username == "alice"
    assert client.state.value == "complete"


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_wrong_password_is_refused_with_authentication_failed(mechanism):
    with pytest.raises(SaslAuthenticationError) as raised:
        run_exchange(mechanism, client_password="pencils")
    assert raised.value.code.name == "SASL_AUTHENTICATION_FAILED"


def test_unknown_user_gets_a_challenge_then_fails_like_a_wrong_password():
    mechanism = ScramMechanism.SHA_256
    server = ScramServer(mechanism, lookup_for(mechanism), seeded_bytes(3))
    client = ScramClient(mechanism, "mallory", "pencil", seeded_bytes(4))
    server_first = server.respond(client.first_message())
    assert b",i=" in server_first
    with pytest.raises(SaslAuthenticationError):
        server.respond(client.respond(server_first))
    assert server.state is ScramServerState.ERROR


def test_rfc7677_scram_sha_256_vector():
    client_nonce = base64.b64decode("rOprNGfwEbeRWgbNEkqO")
    client = ScramClient(ScramMechanism.SHA_256, "user", "pencil", lambda count: client_nonce)
    assert client.first_message() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    client_final = client.respond(
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert client_final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    client.finish(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    assert client.state.value == "complete"


def test_tampered_proof_is_refused():
    mechanism = ScramMechanism.SHA_512
    server = ScramServer(mechanism, lookup_for(mechanism), seeded_bytes(5))
    client = ScramClient(mechanism, "alice", "pencil", seeded_bytes(6))
    client_final = client.respond(server.respond(client.first_message()))
    without_proof, _, proof = client_final.rpartition(b",p=")
    flipped = bytearray(base64.b64decode(proof))
    flipped[0] ^= 1
    with pytest.raises(SaslAuthenticationError):
        server.respond(without_proof + b",p=" + base64.b64encode(bytes(flipped)))


def test_replayed_client_final_is_refused_by_a_new_exchange():
    mechanism = ScramMechanism.SHA_256
    client = ScramClient(mechanism, "alice", "pencil", seeded_bytes(7))
    client_first = client.first_message()
    first_server = ScramServer(mechanism, lookup_for(mechanism), seeded_bytes(8))
    recorded_final = client.respond(first_server.respond(client_first))
    first_server.respond(recorded_final)
    replay_server = ScramServer(mechanism, lookup_for(mechanism), seeded_bytes(9))
    replay_server.respond(client_first)
    with pytest.raises(SaslAuthenticationError, match="nonce"):
        replay_server.respond(recorded_final)


def test_message_after_completion_is_an_illegal_state():
    server, _ = run_exchange(ScramMechanism.SHA_256)
    with pytest.raises(IllegalSaslStateError):
        server.respond(b"n,,n=alice,r=abc")
    assert server.state is ScramServerState.ERROR


def test_client_refuses_a_server_that_does_not_know_the_credential():
    mechanism = ScramMechanism.SHA_256
    impostor = ScramServer(mechanism, lambda name, wanted: None, seeded_bytes(10))
    client = ScramClient(mechanism, "alice", "pencil", seeded_bytes(11))
    client.respond(impostor.respond(client.first_message()))
    with pytest.raises(SaslAuthenticationError, match="server signature"):
        client.finish(b"v=" + base64.b64encode(b"\x00" * 32))


def test_client_refuses_a_nonce_that_does_not_extend_its_own():
    client = ScramClient(ScramMechanism.SHA_256, "alice", "pencil", seeded_bytes(12))
    client.first_message()
    with pytest.raises(SaslAuthenticationError, match="nonce"):
        client.respond(b"r=someone-elses-nonce,s=c2FsdA==,i=4096")


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"n,,",
        b"p=tls-unique,,n=alice,r=abc",
        b"x,,n=alice,r=abc",
        b"n,,m=ext,n=alice,r=abc",
        b"n,,r=abc,n=alice",
        b"n,,n=al=ice,r=abc",
        b"n,,n=alice,r=a,b",
        b"n,,n=,r=abc",
        b"n,,n=alice,r=ab c",
        b"n,,n=alice",
        b"\xff\xfe",
        b"n,," + b"n=" + b"a" * 5000 + b",r=abc",
    ],
)
def test_malformed_client_first_is_an_authentication_failure(message):
    with pytest.raises(SaslAuthenticationError):
        parse_client_first(message)


def test_escaped_user_names_are_decoded():
    first = parse_client_first(b"n,,n=a=2Cb=3Dc,r=nonce")
    assert first.username == "a,b=c"


def test_mismatched_authorization_identity_is_refused():
    mechanism = ScramMechanism.SHA_256
    server = ScramServer(mechanism, lookup_for(mechanism), seeded_bytes(13))
    with pytest.raises(SaslAuthenticationError, match="authorization"):
        server.respond(b"n,a=root,n=alice,r=abcdef")


def test_unknown_mechanism_name_is_unsupported():
    with pytest.raises(UnsupportedSaslMechanismError):
        ScramMechanism.from_name("SCRAM-SHA-1")


def test_credential_survives_json_and_checks_plain_passwords():
    credential = make_credential(ScramMechanism.SHA_512, "s3cret", b"0123456789abcdef", ITERATIONS)
    restored = ScramCredential.from_json(credential.to_json())
    assert restored == credential
    assert "s3cret" not in str(credential.to_json())
    assert password_matches(restored, "s3cret")
    assert not password_matches(restored, "s3cret!")


@given(mechanism=st.sampled_from(list(ScramMechanism)), first=st.binary(max_size=200), final=st.binary(max_size=200))
def test_garbage_into_the_server_raises_only_typed_errors(mechanism, first, final):
    server = ScramServer(mechanism, lookup_for(mechanism), seeded_bytes(14))
    for message in (first, final, final):
        try:
            server.respond(message)
        except (SaslAuthenticationError, IllegalSaslStateError):
            assert server.state is ScramServerState.ERROR
            return


@given(server_first=st.binary(max_size=200), server_final=st.binary(max_size=200))
def test_garbage_into_the_client_raises_only_typed_errors(server_first, server_final):
    client = ScramClient(ScramMechanism.SHA_256, "alice", "pencil", seeded_bytes(15))
    client.first_message()
    try:
        client.respond(server_first)
        client.finish(server_final)
    except (SaslAuthenticationError, IllegalSaslStateError):
        return
    raise AssertionError("a random server_final verified")


@given(data=st.data())
def test_valid_prefix_with_garbage_fields_raises_only_typed_errors(data):
    mechanism = ScramMechanism.SHA_256
    server = ScramServer(mechanism, lookup_for(mechanism), seeded_bytes(16))
    fields = data.draw(st.lists(st.text(alphabet="cnrpv=,aAbB+/2CD3\x00", max_size=12), max_size=5))
    server.respond(b"n,,n=alice,r=abcdef")
    with pytest.raises(SaslAuthenticationError):
        server.respond(",".join(fields).encode("utf-8"))
