"""The __consumer_offsets record format, replay into the store, and retention expiry."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.errors import CorruptMessageError, ErrorCode
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.offsets import (
    CommittedOffset,
    GroupKey,
    GroupMetadata,
    MemberMetadata,
    OffsetKey,
    OffsetsRecord,
    OffsetStore,
    decode_group_value,
    decode_key,
    decode_offset_value,
    group_metadata_record,
    offset_commit_record,
    tombstone,
    offset_key,
)

EVENTS_0 = TopicPartition("events", 0)
EVENTS_1 = TopicPartition("events", 1)

texts = st.text(max_size=20)
committed_offsets = st.builds(
    CommittedOffset,
    offset=st.integers(-1, 2**63 - 1),
    metadata=texts,
    commit_timestamp_ms=st.integers(0, 2**62),
    leader_epoch=st.none() | st.integers(0, 2**31 - 1),
)
topic_partitions = st.builds(TopicPartition, texts, st.integers(0, 2**31 - 1))
members = st.builds(
    MemberMetadata,
    member_id=texts,
    group_instance_id=st.none() | texts,
    client_id=texts,
    client_host=texts,
    session_timeout_ms=st.integers(0, 2**31 - 1),
    rebalance_timeout_ms=st.integers(0, 2**31 - 1),
    topics=st.lists(texts, max_size=3).map(tuple),
    assignment=st.lists(topic_partitions, max_size=4).map(tuple),
)
group_metadata = st.builds(
    GroupMetadata,
    protocol_type=texts,
    generation_id=st.integers(0, 2**31 - 1),
    assignor=texts,
    state_timestamp_ms=st.integers(0, 2**62),
    members=st.lists(members, max_size=3).map(tuple),
)


def commit(offset: int, at_ms: int, metadata: str = "") -> CommittedOffset:
    return CommittedOffset(offset=offset, metadata=metadata, commit_timestamp_ms=at_ms)


@given(group_id=texts, topic_partition=topic_partitions, committed=committed_offsets)
def test_offset_records_round_trip(group_id, topic_partition, committed) -> None:
    record = offset_commit_record(group_id, topic_partition, committed)
    assert decode_key(record.key) == OffsetKey(group_id=group_id, topic_partition=topic_partition)
    assert record.value is not None and decode_offset_value(record.value) == committed


@given(group_id=texts, metadata=group_metadata)
def test_group_metadata_records_round_trip(group_id, metadata) -> None:
    record = group_metadata_record(group_id, metadata)
    assert decode_key(record.key) == GroupKey(group_id=group_id)
    assert record.value is not None and decode_group_value(record.value) == metadata


@given(data=st.binary(max_size=200))
def test_garbage_raises_only_corrupt_message(data) -> None:
    for decode in (decode_key, decode_offset_value, decode_group_value):
        try:
            decode(data)
        except CorruptMessageError as error:
            assert error.code is ErrorCode.CORRUPT_MESSAGE


@given(metadata=group_metadata, cut=st.integers(0, 10_000), flip=st.integers(0, 255))
def test_damaged_group_values_raise_only_corrupt_message(metadata, cut, flip) -> None:
    value = group_metadata_record("g", metadata).value
    assert value is not None
    damaged = bytearray(value[: cut % (len(value) + 1)])
    if damaged:
        damaged[cut % len(damaged)] ^= flip
    try:
        decode_group_value(bytes(damaged))
    except CorruptMessageError as error:
        assert "__consumer_offsets" in error.message


def test_trailing_bytes_are_corrupt() -> None:
    record = offset_commit_record("g", EVENTS_0, commit(5, 1))
    with pytest.raises(CorruptMessageError, match="trailing"):
        decode_key(record.key + b"\x00")


def test_replay_keeps_the_newest_offset_and_applies_tombstones() -> None:
    records = [
        offset_commit_record("g", EVENTS_0, commit(5, 100)),
        offset_commit_record("g", EVENTS_1, commit(7, 100)),
        offset_commit_record("g", EVENTS_0, commit(9, 200, "checkpoint")),
        tombstone(offset_key("g", EVENTS_1)),
    ]
    store = OffsetStore.replay(records)
    assert store.offsets("g") == {EVENTS_0: commit(9, 200, "checkpoint")}
    assert store.committed("g", EVENTS_1) is None


def test_replay_rejects_a_corrupt_record_with_a_typed_error() -> None:
    with pytest.raises(CorruptMessageError):
        OffsetStore.replay([OffsetsRecord(key=b"\x00\x09", value=None)])


def test_offsets_of_an_active_group_never_expire() -> None:
    store = OffsetStore.replay([offset_commit_record("g", EVENTS_0, commit(5, 0))])
    assert store.expire(now_ms=10**12, retention_ms=1000, empty_since_ms={}, active_group_ids={"g"}) == []
    assert store.committed("g", EVENTS_0) is not None


def test_an_empty_groups_offsets_expire_together_after_retention_from_emptiness() -> None:
    store = OffsetStore.replay([
        offset_commit_record("g", EVENTS_0, commit(5, 0)),
        offset_commit_record("g", EVENTS_1, commit(6, 900)),
    ])
    # Retention counts from when the group became empty, not from each old commit.
    assert store.expire(now_ms=1999, retention_ms=1000, empty_since_ms={"g": 1000}, active_group_ids=()) == []
    expired = store.expire(now_ms=2000, retention_ms=1000, empty_since_ms={"g": 1000}, active_group_ids=())
    assert expired == [tombstone(offset_key("g", EVENTS_0)), tombstone(offset_key("g", EVENTS_1))]
    assert store.group_ids() == set()


def test_standalone_offsets_expire_one_by_one_from_their_commit() -> None:
    store = OffsetStore.replay([
        offset_commit_record("solo", EVENTS_0, commit(5, 0)),
        offset_commit_record("solo", EVENTS_1, commit(6, 500)),
    ])
    expired = store.expire(now_ms=1000, retention_ms=1000, empty_since_ms={}, active_group_ids=())
    assert expired == [tombstone(offset_key("solo", EVENTS_0))]
    assert set(store.offsets("solo")) == {EVENTS_1}
    # The tombstones replay to the same state.
    replayed = OffsetStore.replay([
        offset_commit_record("solo", EVENTS_0, commit(5, 0)),
        offset_commit_record("solo", EVENTS_1, commit(6, 500)),
        *expired,
    ])
    assert replayed.offsets("solo") == store.offsets("solo")


def test_deleting_a_group_tombstones_offsets_and_metadata() -> None:
    metadata = GroupMetadata(protocol_type="consumer", generation_id=3, assignor="range", state_timestamp_ms=1,
                             members=())
    store = OffsetStore.replay([offset_commit_record("g", EVENTS_0, commit(1, 0)),
                                group_metadata_record("g", metadata)])
    assert store.group_metadata("g") == metadata
    records = store.delete_group("g")
    assert [decode_key(r.key) for r in records] == [OffsetKey(group_id="g", topic_partition=EVENTS_0),
                                                   GroupKey(group_id="g")]
    assert all(r.value is None for r in records) and store.group_ids() == set()
