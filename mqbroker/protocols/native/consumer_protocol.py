"""The consumer-group formats clients embed in JoinGroup metadata and SyncGroup assignments.

The coordinator treats these bytes as opaque; only members (and ``groups describe``) read
them, like Kafka's ConsumerProtocol. Each blob is an int16 version followed by the struct.
A reader meeting a *newer* version decodes the fields it knows and ignores the rest, so
members of different client versions can share a group; newer versions only append fields.
"""

from __future__ import annotations

import struct

from mqbroker.protocols.exceptions import MalformedMessageError
from mqbroker.protocols.schema import (
    Int32,
    MessageCodec,
    compile_message,
    decode_value,
    encode_into,
    message,
)

#: ``JoinGroupRequest.protocol_type`` of consumer groups.
CONSUMER_PROTOCOL_TYPE = "consumer"
#: Version written by this code.
CONSUMER_PROTOCOL_VERSION = 0

_VERSION = struct.Struct(">h")


@message
class TopicPartitions:
    """Some partitions of one topic."""

    topic: str
    partitions: tuple[Int32, ...]


@message
class ConsumerSubscription:
    """What a member subscribes to and what it owns (cooperative rebalancing keeps those)."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartitions, ...] = ()
    generation_id: Int32 = -1  # the generation in which ``owned_partitions`` were assigned
    rack_id: str | None = None


@message
class ConsumerAssignment:
    """The partitions the leader assigned to one member."""

    assigned_partitions: tuple[TopicPartitions, ...]
    user_data: bytes | None = None


_SUBSCRIPTION = compile_message(ConsumerSubscription)
_ASSIGNMENT = compile_message(ConsumerAssignment)


def _encode(codec: MessageCodec, value: object) -> bytes:
    """Version prefix plus the struct."""
    parts: list[bytes | memoryview] = [_VERSION.pack(CONSUMER_PROTOCOL_VERSION)]
    encode_into(codec, value, parts)
    return b"".join(parts)


def _decode(codec: MessageCodec, data: bytes, what: str) -> object:
    """Read the version, then the struct; trailing bytes are allowed only from newer versions."""
    view = memoryview(data)
    if len(view) < 2:
        raise MalformedMessageError(f"{what} of {len(view)} bytes has no version")
    (version,) = _VERSION.unpack_from(view, 0)
    if version < 0:
        raise MalformedMessageError(f"{what} has negative version {version}")
    value, end = decode_value(codec, view, 2, what)
    if end != len(view) and version <= CONSUMER_PROTOCOL_VERSION:
        raise MalformedMessageError(f"{what} version {version} has {len(view) - end} trailing bytes")
    return value


def encode_subscription(subscription: ConsumerSubscription) -> bytes:
    """The ``JoinGroupProtocol.metadata`` bytes of a consumer."""
    return _encode(_SUBSCRIPTION, subscription)


def decode_subscription(data: bytes) -> ConsumerSubscription:
    """Read a member's subscription; raises ``MalformedMessageError``."""
    subscription = _decode(_SUBSCRIPTION, data, "consumer subscription")
    assert isinstance(subscription, ConsumerSubscription)
    return subscription


def encode_assignment(assignment: ConsumerAssignment) -> bytes:
    """The ``SyncGroupAssignment.assignment`` bytes for one member."""
    return _encode(_ASSIGNMENT, assignment)


def decode_assignment(data: bytes) -> ConsumerAssignment:
    """Read a member's assignment (empty bytes: nothing assigned); raises ``MalformedMessageError``."""
    if not data:
        return ConsumerAssignment(assigned_partitions=())
    assignment = _decode(_ASSIGNMENT, data, "consumer assignment")
    assert isinstance(assignment, ConsumerAssignment)
    return assignment
