"""Consumer-group subscription and assignment bytes round-trip and tolerate newer versions."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.protocols.native import consumer_protocol
from mqbroker.protocols.native.consumer_protocol import ConsumerAssignment, ConsumerSubscription, TopicPartitions
from mqbroker.protocols.exceptions import MalformedMessageError
from tests.unit.protocols.native.strategies import messages


@given(subscription=messages(ConsumerSubscription))
def test_subscription_round_trips(subscription: ConsumerSubscription) -> None:
    """What a member puts in JoinGroup metadata the leader reads back unchanged."""
    assert consumer_protocol.decode_subscription(consumer_protocol.encode_subscription(subscription)) == subscription


@given(assignment=messages(ConsumerAssignment))
def test_assignment_round_trips(assignment: ConsumerAssignment) -> None:
    """What the leader puts in SyncGroup the member reads back unchanged."""
    assert consumer_protocol.decode_assignment(consumer_protocol.encode_assignment(assignment)) == assignment


def test_a_newer_version_with_extra_fields_is_read_by_its_known_fields() -> None:
    """Members of a newer client version can share a group with older ones."""
    assignment = ConsumerAssignment(assigned_partitions=(TopicPartitions(topic="t", partitions=(0, 2)),))
    current = consumer_protocol.encode_assignment(assignment)
    newer = struct.pack(">h", consumer_protocol.CONSUMER_PROTOCOL_VERSION + 1) + current[2:] + b"future field"
    assert consumer_protocol.decode_assignment(newer) == assignment
    with pytest.raises(MalformedMessageError, match="trailing"):
        consumer_protocol.decode_assignment(current + b"junk")


def test_an_empty_assignment_means_no_partitions() -> None:
    """A member the leader gave nothing receives empty bytes."""
    assert consumer_protocol.decode_assignment(b"") == ConsumerAssignment(assigned_partitions=())


@given(data=st.binary(max_size=100))
def test_garbage_raises_only_the_protocol_error(data: bytes) -> None:
    """Members decode each other's bytes; a broken peer cannot crash them."""
    for decode in (consumer_protocol.decode_subscription, consumer_protocol.decode_assignment):
        try:
            decode(data)
        except MalformedMessageError:
            pass  # the typed refusal is the expected outcome for most garbage
