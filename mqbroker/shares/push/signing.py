"""What a push delivery looks like on the wire: the HTTP request a record becomes, and its signature. Pure.

One record per request (the default): the body is the record's value, the rest travels in headers::

    Content-Type: application/octet-stream
    X-MQ-Subscription: orders-push        X-MQ-Topic: orders   X-MQ-Partition: 0   X-MQ-Offset: 42
    X-MQ-Attempt: 1                       X-MQ-Publish-Time: 1767225600000 (the record's timestamp, ms)
    X-MQ-Key: b3JkZXItNDI=                (base64; absent for a record without a key)
    X-MQ-Headers: [["type", "cGFpZA=="]]  (the record's headers: JSON pairs, values base64 or null)
    X-MQ-Timestamp: 1767225600123         (when the request was signed, ms)
    X-MQ-Signature: v1=5257a869e7...      (HMAC-SHA256 of "<X-MQ-Timestamp>." + body with the subscription's secret)

Batched (``push.batch.max.messages`` > 1): the body is JSON, ``{"messages": [{"topic", "partition",
"offset", "attempt", "publish_time", "key", "value", "headers"}]}`` (key and values base64), with
``X-MQ-Batch-Size``; the same signature headers. An endpoint verifies a request with ``verify``
(reject a timestamp too far from its own clock, to refuse replays).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
from collections.abc import Sequence

from mqbroker.records.record import Record

SIGNATURE_VERSION = "v1"


@dataclasses.dataclass(frozen=True, slots=True)
class Delivery:
    """One record to push, with where it came from and how often it was delivered."""

    topic: str
    partition: int
    record: Record
    attempt: int


@dataclasses.dataclass(frozen=True, slots=True)
class PushRequest:
    """An HTTP POST: header values as text, the body as bytes."""

    headers: dict[str, str]
    body: bytes


def sign(secret: str, timestamp_ms: int, body: bytes) -> str:
    """The ``X-MQ-Signature`` value of ``body`` signed at ``timestamp_ms``."""
    digest = hmac.new(secret.encode("utf-8"), f"{timestamp_ms}.".encode() + body, hashlib.sha256).hexdigest()
    return f"{SIGNATURE_VERSION}={digest}"


def verify(secret: str, timestamp_ms: str, body: bytes, signature: str) -> bool:
    """Whether ``signature`` is this body's, signed at ``timestamp_ms`` with ``secret`` (constant time)."""
    if not (timestamp_ms.isascii() and timestamp_ms.isdigit()):  # int() refuses some Unicode digits ("²")
        return False
    # As bytes: compare_digest refuses str with non-ASCII characters, which a forged header may hold.
    return hmac.compare_digest(sign(secret, int(timestamp_ms), body).encode(), signature.encode("utf-8", "replace"))


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


def _headers_json(record: Record) -> str:
    return json.dumps([[name, _b64(value)] for name, value in record.headers], separators=(",", ":"))


def single_request(delivery: Delivery, *, subscription: str, secret: str, now_ms: int) -> PushRequest:
    """The POST of one record: its value as the body."""
    record = delivery.record
    body = record.value or b""
    headers = {
        "Content-Type": "application/octet-stream",
        "X-MQ-Subscription": subscription,
        "X-MQ-Topic": delivery.topic,
        "X-MQ-Partition": str(delivery.partition),
        "X-MQ-Offset": str(record.offset),
        "X-MQ-Attempt": str(delivery.attempt),
        "X-MQ-Publish-Time": str(record.timestamp_ms),
    }
    if record.key is not None:
        headers["X-MQ-Key"] = _b64(record.key) or ""
    if record.headers:
        headers["X-MQ-Headers"] = _headers_json(record)
    return _signed(headers, body, secret, now_ms)


def batch_request(deliveries: Sequence[Delivery], *, subscription: str, secret: str, now_ms: int) -> PushRequest:
    """The POST of several records as one JSON body."""
    messages = [{
        "topic": d.topic, "partition": d.partition, "offset": d.record.offset, "attempt": d.attempt,
        "publish_time": d.record.timestamp_ms, "key": _b64(d.record.key), "value": _b64(d.record.value),
        "headers": [[name, _b64(value)] for name, value in d.record.headers],
    } for d in deliveries]
    body = json.dumps({"messages": messages}, separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json", "X-MQ-Subscription": subscription,
               "X-MQ-Batch-Size": str(len(deliveries))}
    return _signed(headers, body, secret, now_ms)


def _signed(headers: dict[str, str], body: bytes, secret: str, now_ms: int) -> PushRequest:
    headers["X-MQ-Timestamp"] = str(now_ms)
    headers["X-MQ-Signature"] = sign(secret, now_ms, body)
    return PushRequest(headers=headers, body=body)
