"""The share consumer's pure core: membership, acknowledgement ranges, outcomes and leased records."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.client.share_core import (
    AcknowledgeOutcome,
    Rejoin,
    ShareConsumerCore,
    ShareMembership,
    ShareMessage,
    decode_leased,
)
from mqbroker.errors import (
    CorruptMessageError,
    GroupAuthorizationError,
    NotCoordinatorError,
    UnknownMemberIdError,
)
from mqbroker.model import AcknowledgeType
from mqbroker.protocols.native import share_messages as wire
from mqbroker.records.builder import encode_batch
from mqbroker.records.header import stamp
from mqbroker.records.record import Record
from tests.poison import poison_batch

ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT


def message(offset: int, topic: str = "t", partition: int = 0) -> ShareMessage:
    return ShareMessage(topic, partition, offset, None, b"v", (), 0, 1)


def sent_ranges(core: ShareConsumerCore) -> list[tuple[str, int, int, int, int, str | None]]:
    request, _ = core.fetch_request("m", 0)
    return [(topic.name, part.partition_index, batch.first_offset, batch.last_offset, batch.acknowledge_type,
             batch.error) for topic in request.acknowledgements for part in topic.partitions for batch in part.batches]


def test_consecutive_verdicts_of_one_kind_go_as_one_range() -> None:
    """500 accepted records of one partition travel as one range; a gap or another kind starts a new one."""
    core = ShareConsumerCore("g")
    core.acknowledge([message(offset) for offset in range(500)], ACCEPT)
    core.acknowledge([message(501)], ACCEPT)
    core.acknowledge([message(502)], RELEASE, "later")
    core.acknowledge([message(503, partition=1)], ACCEPT)
    assert sent_ranges(core) == [("t", 0, 0, 499, 1, None), ("t", 0, 501, 501, 1, None),
                                 ("t", 0, 502, 502, 2, "later"), ("t", 1, 503, 503, 1, None)]
    assert core.pending_acknowledgements == 0 and sent_ranges(core) == []


def test_the_last_verdict_on_an_offset_wins() -> None:
    """Acknowledging an offset twice before sending keeps only the second verdict."""
    core = ShareConsumerCore("g")
    core.acknowledge([message(1), message(2)], ACCEPT)
    core.acknowledge([message(2)], REJECT, "poison")
    assert sent_ranges(core) == [("t", 0, 1, 1, 1, None), ("t", 0, 2, 2, 3, "poison")]


@given(st.lists(st.tuples(st.integers(0, 40), st.sampled_from([ACCEPT, RELEASE, REJECT]), st.sampled_from(["", "e"])),
                max_size=60))
def test_ranges_cover_exactly_the_acknowledged_offsets_with_their_last_verdict(
        verdicts: list[tuple[int, AcknowledgeType, str]]) -> None:
    """Whatever the order, the ranges sent are disjoint and give each offset its last verdict."""
    core = ShareConsumerCore("g")
    for offset, kind, error in verdicts:
        core.acknowledge([message(offset)], kind, error)
    expected = {offset: (int(kind), error or None) for offset, kind, error in verdicts}
    got: dict[int, tuple[int, str | None]] = {}
    for _, _, first, last, kind, error in sent_ranges(core):
        for offset in range(first, last + 1):
            assert offset not in got
            got[offset] = (kind, error)
    assert got == expected


def test_each_sent_range_gets_the_brokers_verdict_and_unanswered_ones_fail() -> None:
    """Outcomes match the reply's ranges; a range the reply leaves out comes back with an error."""
    core = ShareConsumerCore("g")
    core.acknowledge([message(0), message(1), message(5)], ACCEPT)
    request, sent = core.acknowledge_request("m")
    assert request is not None
    reply = wire.ShareAcknowledgeResponse(topics=(wire.ShareAcknowledgeTopicResult(name="t", partitions=(
        wire.ShareAcknowledgePartitionResult(partition_index=0, batches=(
            wire.ShareAcknowledgeBatchResult(first_offset=0, last_offset=1),)),)),))
    first, second = core.acknowledge_completed(reply, sent)
    assert first == AcknowledgeOutcome("t", 0, 0, 1, ACCEPT)
    assert (second.first_offset, second.last_offset) == (5, 5) and isinstance(second.error, NotCoordinatorError)
    assert core.acknowledge_request("m") == (None, [])


def leased_batch() -> bytes:
    records = [Record(offset=offset, timestamp_ms=100 + offset, key=b"k", value=b"%d" % offset,
                      headers=(("h", b"x"),)) for offset in range(10, 20)]
    return encode_batch(records, base_offset=10)


def test_only_acquired_records_are_returned_with_their_delivery_counts() -> None:
    """A fetch returns whole batches: records outside the acquired ranges are dropped."""
    into: list[ShareMessage] = []
    acquired = [wire.AcquiredRecords(first_offset=15, last_offset=16, delivery_count=3),
                wire.AcquiredRecords(first_offset=11, last_offset=12, delivery_count=1)]
    decode_leased("t", 2, leased_batch(), acquired, into)
    assert [(m.offset, m.delivery_count, m.value) for m in into] == [(11, 1, b"11"), (12, 1, b"12"), (15, 3, b"15"),
                                                                     (16, 3, b"16")]
    assert into[0] == ShareMessage("t", 2, 11, b"k", b"11", (("h", b"x"),), 111, 1)


def test_a_batch_inside_one_acquired_range_is_returned_whole_with_its_delivery_count() -> None:
    """The usual case, one range over the whole batch, gives the same messages as the general path."""
    whole: list[ShareMessage] = []
    decode_leased("t", 2, leased_batch(), [wire.AcquiredRecords(first_offset=5, last_offset=30, delivery_count=2)],
                  whole)
    assert [(m.offset, m.delivery_count) for m in whole] == [(offset, 2) for offset in range(10, 20)]
    split: list[ShareMessage] = []
    decode_leased("t", 2, leased_batch(), [wire.AcquiredRecords(first_offset=5, last_offset=14, delivery_count=2),
                                           wire.AcquiredRecords(first_offset=15, last_offset=30, delivery_count=2)],
                  split)
    assert split == whole


def test_a_partitions_error_waits_for_raise_failure_beside_the_others_records() -> None:
    """A failed partition beside one with records: the records come back and the error waits in ``raise_failure``
    (the driver raises it from a poll with no records, else from the next one); alone, it gives no records."""
    core = ShareConsumerCore("g")
    good = wire.ShareFetchPartitionResult(partition_index=0, records=leased_batch(), acquired_records=(
        wire.AcquiredRecords(first_offset=10, last_offset=10, delivery_count=1),))
    bad = wire.ShareFetchPartitionResult(partition_index=1, error_code=int(GroupAuthorizationError.code),
                                         error_message="no")
    messages, _ = core.fetch_completed(wire.ShareFetchResponse(topics=(
        wire.ShareFetchTopicResult(name="t", partitions=(good, bad)),)), [])
    assert [m.offset for m in messages] == [10]
    with pytest.raises(GroupAuthorizationError):
        core.raise_failure()
    core.raise_failure()  # raised once
    assert core.fetch_completed(wire.ShareFetchResponse(topics=(wire.ShareFetchTopicResult(name="t", partitions=(
        bad,)),)), []) == ([], [])
    with pytest.raises(GroupAuthorizationError):
        core.raise_failure()


def test_a_leased_batch_that_does_not_decode_stops_only_itself() -> None:
    """Partition 0 holds a good batch, one that does not decode and a good one; partition 1 a good one; the reply
    carries an acknowledgement's outcome. Every good record is returned (leased to this consumer, it would be held
    by nobody until its lease ended), and the outcome; ``CorruptMessageError`` waits in ``raise_failure``."""
    poison = bytearray(poison_batch(records_count=2))
    stamp(poison, 0, 20, 0)
    after = encode_batch([Record(offset=22, timestamp_ms=122, key=None, value=b"22", headers=())], base_offset=22)
    core = ShareConsumerCore("g")
    core.acknowledge([message(5)], ACCEPT)
    _, sent = core.fetch_request("m", 0)
    first = wire.ShareFetchPartitionResult(partition_index=0, records=leased_batch() + bytes(poison) + after,
                                           acquired_records=(wire.AcquiredRecords(first_offset=10, last_offset=22,
                                                                                  delivery_count=1),))
    second = wire.ShareFetchPartitionResult(partition_index=1, records=leased_batch(), acquired_records=(
        wire.AcquiredRecords(first_offset=10, last_offset=11, delivery_count=1),))
    reply = wire.ShareFetchResponse(
        topics=(wire.ShareFetchTopicResult(name="t", partitions=(first, second)),),
        acknowledgements=(wire.ShareAcknowledgeTopicResult(name="t", partitions=(
            wire.ShareAcknowledgePartitionResult(partition_index=0, batches=(
                wire.ShareAcknowledgeBatchResult(first_offset=5, last_offset=5),)),)),))
    messages, outcomes = core.fetch_completed(reply, sent)
    assert [(m.partition, m.offset) for m in messages] == [(0, offset) for offset in [*range(10, 20), 22]] + [
        (1, 10), (1, 11)]
    assert outcomes == [AcknowledgeOutcome("t", 0, 5, 5, ACCEPT)]
    with pytest.raises(CorruptMessageError, match="t-0"):
        core.raise_failure()


@given(st.binary(max_size=200))
def test_garbage_fetch_data_raises_only_a_corrupt_message_error(data: bytes) -> None:
    """Bytes that are not batches give records or ``CorruptMessageError``, nothing else."""
    try:
        decode_leased("t", 0, data, [wire.AcquiredRecords(first_offset=0, last_offset=2**40, delivery_count=1)], [])
    except CorruptMessageError:
        pass


def test_membership_follows_the_hosts_answers() -> None:
    """A heartbeat reply makes the member joined; an unknown member joins again; a moved host is looked up."""
    membership = ShareMembership("g", ["t"])
    assert not membership.joined and membership.heartbeat_request().member_epoch == 0
    membership.heartbeat_completed(wire.ShareGroupHeartbeatResponse(
        member_id="m-1", member_epoch=3, heartbeat_interval_ms=10,
        assignment=(wire.ShareAssignedTopic(name="t", partitions=(0, 1)),)))
    assert membership.joined and membership.heartbeat_interval_ms == 100
    assert membership.assignment == (("t", 0), ("t", 1))
    assert membership.leave_request().member_epoch == -1
    assert membership.failed(NotCoordinatorError("moved")) is Rejoin.FIND_COORDINATOR
    rejoin = membership.heartbeat_request()  # the same member id at epoch 0: a new host keeps its leases
    assert (rejoin.member_id, rejoin.member_epoch) == ("m-1", 0) and not membership.joined
    membership.heartbeat_completed(wire.ShareGroupHeartbeatResponse(
        member_id="m-1", member_epoch=1, heartbeat_interval_ms=10, assignment=()))
    assert membership.failed(BrokerUnavailableError("unreachable")) is Rejoin.FIND_COORDINATOR
    assert membership.heartbeat_request().member_id == "m-1"
    assert membership.failed(UnknownMemberIdError("gone")) is Rejoin.JOIN_AGAIN and not membership.joined
    with pytest.raises(GroupAuthorizationError):
        membership.failed(GroupAuthorizationError("no"))
