"""A share queue's host-decided dead letters read back for the dead-letter exchange: reasons, offsets, garbage."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mqbroker.protocols.amqp.queue_arguments import DeathReason
from mqbroker.protocols.amqp.share_dead_letters import dead_letters_in
from mqbroker.protocols.amqp.stored import EMPTY_PROPERTIES, append_message, dead_letter_topic, queue_topic
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.header import stamp
from mqbroker.shares.dead_letters import dead_letter_batch
from mqbroker.shares.messages import SharePartitionRecords
from mqbroker.shares.partition_values import AcquiredRange, DeadLetter
from mqbroker.shares.partition_values import DeathReason as ShareDeathReason


def _copied(offset: int, origin: int, reason: ShareDeathReason) -> bytes:
    """Message ``m<origin>`` of queue ``q`` as the host copies it to the dead-letter topic, stored at ``offset``."""
    builder = BatchBuilder()
    append_message(builder, 0, "", "q", EMPTY_PROPERTIES, b"m%d" % origin, None)
    batch = bytearray(builder.build())
    stamp(batch, 0, origin, 0)
    copy = dead_letter_batch(bytes(batch), DeadLetter(origin, origin, reason, 1, "why"), group_id="g", topic="t",
                             partition=0)
    assert copy is not None
    moved = bytearray(copy)
    stamp(moved, 0, offset, 0)
    return bytes(moved)


def test_each_acquired_dead_letter_comes_back_as_the_message_with_its_reason() -> None:
    records = (_copied(0, 7, ShareDeathReason.MAXLEN) + _copied(1, 9, ShareDeathReason.DELIVERY_LIMIT)
               + _copied(2, 11, ShareDeathReason.REJECTED))
    partition = SharePartitionRecords(topic="d", partition=0, records=records, acquired=(AcquiredRange(0, 1, 1),))
    dead, undecoded = dead_letters_in(partition)
    assert [(message.offset, message.payload.body, message.payload.routing_key, reason) for message, reason in dead] == [
        (0, b"m7", "q", DeathReason.MAXLEN), (1, b"m9", "q", DeathReason.DELIVERY_LIMIT)]
    assert undecoded == []


def test_acquired_offsets_missing_from_the_batches_are_reported_undecoded() -> None:
    partition = SharePartitionRecords(topic="d", partition=0, records=_copied(3, 1, ShareDeathReason.MAXLEN),
                                      acquired=(AcquiredRange(2, 4, 1),))
    dead, undecoded = dead_letters_in(partition)
    assert [message.offset for message, _ in dead] == [3] and undecoded == [2, 4]


@given(st.binary(max_size=400), st.integers(0, 20), st.integers(0, 5))
def test_garbage_gives_undecoded_offsets_never_an_exception(records: bytes, first: int, length: int) -> None:
    acquired = AcquiredRange(first, first + length, 1)
    partition = SharePartitionRecords(topic="d", partition=0, records=records, acquired=(acquired,))
    dead, undecoded = dead_letters_in(partition)
    offsets = [message.offset for message, _ in dead] + undecoded
    assert sorted(offsets) == list(range(acquired.first, acquired.last + 1))


@given(st.text(min_size=1, max_size=300))
def test_a_dead_letter_topic_belongs_to_one_queue_and_is_no_queue_topic(queue: str) -> None:
    topic = dead_letter_topic(queue)
    assert len(topic) <= 249 and topic.endswith(".dead") and topic != queue_topic(queue)
    assert not queue_topic(queue + "x").endswith(".dead")
