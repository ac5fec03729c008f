"""Kafka's consumer protocol: subscriptions of every version decode, newer versions are read as the newest
known, and garbage ends in the typed error."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.protocols.exceptions import MalformedMessageError
from mqbroker.protocols.kafka.messages.consumer_protocol import (
    ConsumerAssignment,
    ConsumerSubscription,
    TopicPartitions,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

SUBSCRIPTION = ConsumerSubscription(topics=("a", "b"), user_data=b"u",
                                    owned_partitions=(TopicPartitions(topic="a", partitions=(0, 2)),),
                                    generation_id=4, rack_id="r1")


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscriptions_of_every_version_decode_with_the_fields_of_that_version(version: int) -> None:
    decoded = decode_subscription(encode_subscription(SUBSCRIPTION, version))
    assert decoded.topics == ("a", "b") and decoded.user_data == b"u"
    assert decoded.owned_partitions == (SUBSCRIPTION.owned_partitions if version >= 1 else ())
    assert decoded.generation_id == (4 if version >= 2 else -1)
    assert decoded.rack_id == ("r1" if version >= 3 else None)


def test_a_newer_subscription_version_is_read_as_the_newest_known_one() -> None:
    newer = struct.pack(">h", 7) + encode_subscription(SUBSCRIPTION, 3)[2:] + b"future fields"
    assert decode_subscription(newer) == SUBSCRIPTION


def test_assignments_round_trip_and_empty_bytes_assign_nothing() -> None:
    assignment = ConsumerAssignment(assigned_partitions=(TopicPartitions(topic="a", partitions=(1,)),))
    assert decode_assignment(encode_assignment(assignment)) == assignment
    assert decode_assignment(b"") == ConsumerAssignment(assigned_partitions=())


@given(st.binary(max_size=80))
def test_garbage_raises_only_the_malformed_message_error(data: bytes) -> None:
    for decode in (decode_subscription, decode_assignment):
        try:
            decode(data)
        except MalformedMessageError:
            pass
