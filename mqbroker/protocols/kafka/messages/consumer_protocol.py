"""Kafka's consumer protocol: the subscription a consumer embeds in JoinGroup and the assignment in SyncGroup.

Each blob is an int16 version followed by the struct in that version (never flexible). Versions
0 to 3 are modelled; a newer version is read as version 3 and its extra trailing fields ignored,
as Kafka's own clients do, so members of newer clients can still join.
"""

from __future__ import annotations

import struct

from mqbroker.protocols.exceptions import MalformedMessageError
from mqbroker.protocols.schema import Int32, compile_message, decode_value, encode_into, message, wire

#: ``JoinGroupRequest.protocol_type`` of consumer groups.
CONSUMER_PROTOCOL_TYPE = "consumer"
#: The newest version modelled here.
CONSUMER_PROTOCOL_VERSION_MAX = 3
#: The version of the assignments mqbroker writes (every version since 0 has the same fields).
ASSIGNMENT_VERSION = 0

_VERSION = struct.Struct(">h")


@message
class TopicPartitions:
    """Some partitions of one topic."""

    topic: str
    partitions: tuple[Int32, ...]


@message
class ConsumerSubscription:
    """The topics a member subscribes to; from version 1 the partitions it owns (cooperative rebalancing)."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartitions, ...] = wire(since=1, default=())
    generation_id: Int32 = wire(since=2, default=-1)
    rack_id: str | None = wire(since=3, default=None)


@message
class ConsumerAssignment:
    """The partitions assigned to one member."""

    assigned_partitions: tuple[TopicPartitions, ...]
    user_data: bytes | None = None


def _decode(cls: type, data: bytes, what: str) -> object:
    """Read the version, then the struct in that version (newer versions: as the newest known)."""
    view = memoryview(data)
    if len(view) < 2:
        raise MalformedMessageError(f"{what} of {len(view)} bytes has no version")
    (version,) = _VERSION.unpack_from(view, 0)
    if version < 0:
        raise MalformedMessageError(f"{what} has negative version {version}")
    known = min(version, CONSUMER_PROTOCOL_VERSION_MAX)
    value, end = decode_value(compile_message(cls, known), view, 2, what)
    if end != len(view) and version <= CONSUMER_PROTOCOL_VERSION_MAX:
        raise MalformedMessageError(f"{what} version {version} has {len(view) - end} trailing bytes")
    return value


def decode_subscription(data: bytes) -> ConsumerSubscription:
    """Read a member's subscription; raises ``MalformedMessageError``."""
    subscription = _decode(ConsumerSubscription, data, "consumer subscription")
    assert isinstance(subscription, ConsumerSubscription)
    return subscription


def encode_subscription(subscription: ConsumerSubscription, version: int = CONSUMER_PROTOCOL_VERSION_MAX) -> bytes:
    """The JoinGroup protocol metadata of a consumer (tests build members' subscriptions with it)."""
    parts: list[bytes | memoryview] = [_VERSION.pack(version)]
    encode_into(compile_message(ConsumerSubscription, version), subscription, parts)
    return b"".join(parts)


def encode_assignment(assignment: ConsumerAssignment) -> bytes:
    """The SyncGroup assignment bytes for one member."""
    parts: list[bytes | memoryview] = [_VERSION.pack(ASSIGNMENT_VERSION)]
    encode_into(compile_message(ConsumerAssignment, ASSIGNMENT_VERSION), assignment, parts)
    return b"".join(parts)


def decode_assignment(data: bytes) -> ConsumerAssignment:
    """Read an assignment (empty bytes: nothing assigned); raises ``MalformedMessageError``."""
    if not data:
        return ConsumerAssignment(assigned_partitions=())
    assignment = _decode(ConsumerAssignment, data, "consumer assignment")
    assert isinstance(assignment, ConsumerAssignment)
    return assignment
