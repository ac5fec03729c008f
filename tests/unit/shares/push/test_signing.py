"""Push request signatures: what is signed verifies, and anything else does not (hypothesis)."""

from __future__ import annotations

import hashlib
import hmac

from hypothesis import given
from hypothesis import strategies as st

from mqbroker.records.record import Record
from mqbroker.shares.push.signing import Delivery, batch_request, sign, single_request, verify

secrets = st.text(min_size=1, max_size=40)


@given(secret=secrets, now_ms=st.integers(0, 2**50), body=st.binary(max_size=200))
def test_a_signature_is_hmac_sha256_of_timestamp_and_body(secret: str, now_ms: int, body: bytes) -> None:
    """An endpoint can check it with nothing but hashlib (the documented recipe)."""
    expected = hmac.new(secret.encode(), f"{now_ms}.".encode() + body, hashlib.sha256).hexdigest()
    assert sign(secret, now_ms, body) == f"v1={expected}"
    assert verify(secret, str(now_ms), body, sign(secret, now_ms, body))


@given(secret=secrets, other=secrets, timestamp=st.text(max_size=20), body=st.binary(max_size=50),
       signature=st.text(max_size=80))
def test_verify_answers_a_bool_for_any_input_and_refuses_other_secrets(secret: str, other: str, timestamp: str,
                                                                       body: bytes, signature: str) -> None:
    """A forged or garbled request is refused, never an exception."""
    assert isinstance(verify(secret, timestamp, body, signature), bool)
    if secret != other:
        assert not verify(other, "5", body, sign(secret, 5, body))


@given(secret=secrets, value=st.none() | st.binary(max_size=40), key=st.none() | st.binary(max_size=10),
       attempt=st.integers(1, 100))
def test_single_and_batched_requests_are_signed_over_their_bodies(secret: str, value: bytes | None,
                                                                  key: bytes | None, attempt: int) -> None:
    """Both request shapes carry a signature over exactly the body sent."""
    delivery = Delivery("t", 0, Record(offset=7, timestamp_ms=1, key=key, value=value, headers=(("h", b"v"),)),
                        attempt)
    for request in (single_request(delivery, subscription="s", secret=secret, now_ms=9),
                    batch_request([delivery, delivery], subscription="s", secret=secret, now_ms=9)):
        assert verify(secret, request.headers["X-MQ-Timestamp"], request.body, request.headers["X-MQ-Signature"])
