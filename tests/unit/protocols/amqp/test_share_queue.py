"""A share queue's pure parts: when a plain queue is one, its share group's configs, x-delay as a record header."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker import limits
from mqbroker.protocols.amqp.codec import encode_properties
from mqbroker.protocols.amqp.queues import RecentBatch
from mqbroker.protocols.amqp.share_arguments import (
    delay_header,
    ranges_of,
    share_group_configs,
    takes_share_default,
)
from mqbroker.protocols.amqp.share_consumers import _leased
from mqbroker.protocols.amqp.spec import BasicProperties
from mqbroker.protocols.amqp.stored import EMPTY_PROPERTIES, append_message
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.header import stamp
from mqbroker.shares.messages import SharePartitionRecords
from mqbroker.shares.partition_values import AcquiredRange
from tests.unit.protocols.amqp import strategies


@pytest.mark.parametrize(("declared", "share"), [
    ({}, True),
    ({"durable": False}, False),
    ({"exclusive": True}, False),
    ({"auto_delete": True}, False),
    ({"arguments": {"x-queue-type": "classic"}}, False),
    ({"arguments": {"x-queue-type": "stream"}}, False),
    ({"arguments": {"x-message-ttl": 1000}}, True),
    ({"arguments": {"x-dead-letter-exchange": "dlx"}}, True),
    ({"arguments": {"x-max-length": 10}}, True),
    ({"arguments": {"x-max-length": 10, "x-dead-letter-exchange": "dlx"}}, True),
    ({"arguments": {"x-expires": 1000}}, True),
    ({"arguments": {"x-delivery-limit": 3}}, True),
])
def test_only_a_durable_shared_queue_without_a_type_takes_the_share_default(
        declared: dict, share: bool) -> None:
    declaration = {"durable": True, "exclusive": False, "auto_delete": False, "arguments": {}, **declared}
    assert takes_share_default(**declaration) is share


SHARE_TYPE = {"x-queue-type": "share"}


def test_the_share_group_reads_from_the_start_and_takes_the_limits_and_the_dead_letter_topic() -> None:
    unlimited = {"auto.offset.reset": "earliest", "max.delivery.attempts": str(limits.share_delivery_attempts_max)}
    assert share_group_configs("q", {"x-queue-type": "share"}) == unlimited  # as a classic queue: not the group's 5
    assert share_group_configs("q", {"x-queue-type": "share", "x-delivery-limit": 4}) == {
        **unlimited, "max.delivery.attempts": "4"}
    assert share_group_configs("q", {"x-delivery-limit": 10**6})["max.delivery.attempts"] == str(
        limits.share_delivery_attempts_max)
    assert share_group_configs("q", {"x-max-length": 0, "x-overflow": "drop-head"}) == {
        **unlimited, "max.ready.records": "0"}
    for overflow in ("reject-publish", "reject-publish-dlx"):  # judged at publish: the host drops no head
        assert share_group_configs("q", {**SHARE_TYPE, "x-max-length": 3, "x-overflow": overflow}) == unlimited
    assert share_group_configs("q", {"x-dead-letter-exchange": ""}) == {
        **unlimited, "dead.letter.topic": "amqp.queue.q.dead"}


@pytest.mark.parametrize(("value", "header"), [(1500, b"1500"), ("250", b"250"), (b"7", b"7"), (0, None), (-5, None),
                                               ("soon", None), (True, None), (None, None)])
def test_x_delay_becomes_the_delay_record_header(value: object, header: bytes | None) -> None:
    raw = encode_properties(BasicProperties(headers={"x-delay": value} if value is not None else None))
    assert delay_header(raw) == ((("x-delay", header),) if header else ())


@given(st.binary(max_size=64))
def test_garbage_properties_carry_no_delay(raw: bytes) -> None:
    assert delay_header(raw) in ((),) or delay_header(raw)[0][0] == "x-delay"


@given(st.lists(st.integers(0, 100), max_size=50))
def test_settled_offsets_become_disjoint_consecutive_ranges(offsets: list[int]) -> None:
    ranges = ranges_of(offsets)
    assert [offset for first, last in ranges for offset in range(first, last + 1)] == sorted(set(offsets))
    assert all(later[0] > earlier[1] + 1 for earlier, later in zip(ranges, ranges[1:]))



@given(st.lists(st.integers(0, 40), unique=True, max_size=30),
       st.lists(st.tuples(st.integers(0, 40), st.integers(0, 5)), max_size=6))
def test_leased_gives_each_decoded_acquired_record_and_names_the_rest(
        stored: list[int], spans: list[tuple[int, int]]) -> None:
    """Acquired ranges against the records a fetch returned: each acquired offset is leased or reported
    undecoded, in offset order, with the acquired ranges in that order (their delivery counts flag redeliveries:
    test_share_view.py)."""
    ranges: list[AcquiredRange] = []
    taken: set[int] = set()
    for first, length in sorted(spans):
        span = set(range(first, first + length + 1))
        if not span & taken:
            taken |= span
            ranges.append(AcquiredRange(first, first + length, length + 1))
    offsets = sorted(stored)
    partition = SharePartitionRecords(topic="t", partition=0, records=b"".join(map(_one_message, offsets)),
                                      acquired=tuple(reversed(ranges)))
    recent = RecentBatch()
    counts = {offset: acquired.delivery_count for acquired in ranges
              for offset in range(acquired.first, acquired.last + 1)}
    for _ in range(2):  # the second time with the last batch kept from the first
        leased, acquired, undecoded = _leased(partition, recent)
        assert acquired == sorted(ranges, key=lambda found: found.first)
        assert [message.offset for message in leased] == [offset for offset in offsets if offset in counts]
        assert undecoded == sorted(set(counts) - set(offsets))


def _batch(base_offset: int, bodies: list[bytes]) -> bytes:
    builder = BatchBuilder()
    for body in bodies:
        append_message(builder, 0, "", "q", EMPTY_PROPERTIES, body, None)
    batch = bytearray(builder.build())
    stamp(batch, 0, base_offset, 0)
    return bytes(batch)


def _fetch(records: bytes, first: int, last: int) -> SharePartitionRecords:
    return SharePartitionRecords(topic="t", partition=0, records=records, acquired=(AcquiredRange(first, last, 1),))


def test_leases_of_one_batch_over_several_fetches_decode_it_once() -> None:
    """A batch leased a few records per fetch is decoded by the first fetch and reused by the next; a batch at the
    same offset with other contents (the log was truncated and rewritten) is decoded again; a fetch whose leases
    reach the batch's end lets it go."""
    recent = RecentBatch()
    records = _batch(10, [b"a", b"b", b"c", b"d"])
    first, _, _ = _leased(_fetch(records, 10, 11), recent)
    second, _, _ = _leased(_fetch(records, 12, 12), recent)
    assert [message.payload.body for message in first + second] == [b"a", b"b", b"c"]
    assert second[0] is _leased(_fetch(records, 12, 12), recent)[0][0]  # the same decoded message: reused
    rewritten, _, _ = _leased(_fetch(_batch(10, [b"x", b"y", b"z", b"w"]), 12, 12), recent)
    assert [message.payload.body for message in rewritten] == [b"z"]
    last, _, _ = _leased(_fetch(records, 13, 13), recent)
    assert [message.payload.body for message in last] == [b"d"]
    assert _leased(_fetch(records, 13, 13), recent)[0][0] is not last[0]  # let go after its end was leased


def _one_message(offset: int) -> bytes:
    builder = BatchBuilder()
    append_message(builder, 0, "", "q", EMPTY_PROPERTIES, b"m%d" % offset, None)
    batch = bytearray(builder.build())
    stamp(batch, 0, offset, 0)
    return bytes(batch)


@given(strategies.properties, st.integers(1, 10**9))
def test_the_delay_header_is_read_whatever_other_properties_a_message_has(properties: BasicProperties,
                                                                         delay: int) -> None:
    """Properties without headers give no delay header (the flag is tested, nothing decoded); with an x-delay
    header among others, its value."""
    assert delay_header(encode_properties(dataclasses.replace(properties, headers=None))) == ()
    delayed = dataclasses.replace(properties, headers={**(properties.headers or {}), "x-delay": delay})
    assert delay_header(encode_properties(delayed)) == (("x-delay", str(delay).encode()),)
