"""The ``__share_group_state`` record formats: what is written reads back, and bytes the broker did not
write (garbage, truncations, flipped bytes) raise only ``CorruptMessageError`` (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.errors import CorruptMessageError
from mqbroker.shares import state_records as sr
from mqbroker.shares.partition_snapshot import PartitionSnapshot, SnapshotRun
from mqbroker.shares.partition_values import DueEntry

names = st.text(min_size=1, max_size=20)
partitions = st.integers(0, 2**31 - 1)
offsets = st.integers(0, 2**62)


@st.composite
def snapshots(draw: st.DrawFn) -> PartitionSnapshot:
    """A region with runs in order inside it."""
    start = draw(st.integers(0, 2**40))
    cuts = sorted(draw(st.sets(st.integers(0, 1_000), max_size=8)))
    runs, position = [], start
    for low, high in zip(cuts[::2], cuts[1::2]):
        done = draw(st.booleans())
        owner = "" if done else draw(st.sampled_from(["", "member-1", "member-2"]))
        deadline_ms = draw(st.integers(0, 2**50)) if owner else 0
        runs.append(SnapshotRun(start + low, start + high, done, draw(st.integers(0, 32767)), owner, deadline_ms))
        position = start + high + 1
    end = max(position, start) + draw(st.integers(0, 10))
    return PartitionSnapshot(start_offset=start, end_offset=end, runs=tuple(runs))


keys = st.one_of(
    st.builds(sr.GroupKey, names),
    st.builds(sr.PartitionKey, names, names, partitions),
    st.builds(sr.DelayKey, names, names, partitions, offsets),
)


@given(key=keys)
def test_every_key_reads_back(key: sr.StateKey) -> None:
    """Keys decode to what was encoded."""
    assert sr.decode_key(sr.encode_key(key)) == key


@given(group=names, created_ms=st.integers(0, 2**50), topics=st.lists(names, max_size=4).map(tuple),
       configs=st.dictionaries(names, st.text(max_size=30), max_size=4))
def test_a_group_definition_reads_back(group: str, created_ms: int, topics: tuple[str, ...],
                                       configs: dict[str, str]) -> None:
    """A group's definition decodes to what was written."""
    record = sr.group_record(group, sr.GroupDefinition(created_ms=created_ms, topics=topics, configs=configs))
    assert record.value is not None
    decoded = sr.decode_group_value(record.value)
    assert (decoded.created_ms, decoded.topics, dict(decoded.configs)) == (created_ms, topics, configs)


@given(snapshot=snapshots(), due=st.builds(DueEntry, offsets, st.integers(0, 2**50), st.integers(0, 32767)))
def test_partition_regions_and_delay_entries_read_back(snapshot: PartitionSnapshot, due: DueEntry) -> None:
    """A share partition's region and a scheduled record's entry decode to what was written."""
    key = sr.PartitionKey("g", "t", 0)
    region = sr.partition_record(key, snapshot)
    assert region.value is not None and sr.decode_partition_value(region.value) == snapshot
    delay = sr.delay_record(key, due)
    assert delay.value is not None and sr.decode_delay_value(delay.value, due.offset) == due


def _decode_any(data: bytes) -> None:
    for decode in (sr.decode_key, sr.decode_group_value, sr.decode_partition_value,
                   lambda raw: sr.decode_delay_value(raw, 0)):
        try:
            decode(data)
        except CorruptMessageError:
            pass  # the typed refusal is the expected outcome for most garbage


@settings(max_examples=500)
@given(data=st.binary(max_size=200))
def test_garbage_raises_only_corrupt_message(data: bytes) -> None:
    """No bytes make a decoder fail with anything but CorruptMessageError."""
    _decode_any(data)


@settings(max_examples=300)
@given(data=st.data(), key=keys, snapshot=snapshots())
def test_flipped_and_cut_records_raise_only_corrupt_message(data: st.DataObject, key: sr.StateKey,
                                                            snapshot: PartitionSnapshot) -> None:
    """Real records with bytes flipped and tails cut reach deep into the decoders without escaping them."""
    group = sr.group_record("g", sr.GroupDefinition(created_ms=1, topics=("t",), configs={"lease.ms": "5"}))
    region = sr.partition_record(sr.PartitionKey("g", "t", 0), snapshot)
    for original in (sr.encode_key(key), group.value, region.value):
        assert original is not None
        mutated = bytearray(original)
        for _ in range(data.draw(st.integers(1, 3))):
            mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
        _decode_any(bytes(mutated[: data.draw(st.integers(0, len(mutated)))]))


def test_a_corrupt_record_names_the_topic_and_the_byte() -> None:
    """The error says where: the operator can find the record."""
    try:
        sr.decode_partition_value(b"\x00\x01" + b"\x00" * 8)
    except CorruptMessageError as error:
        assert "__share_group_state" in str(error) and "byte" in str(error)
    else:
        raise AssertionError("a truncated region decoded")


def test_a_version_1_region_still_reads_without_leases() -> None:
    """Regions written before leases were stored (version 1) read back with every waiting run available."""
    value = sr._REGION.pack(1, 10, 20) + sr._INT32.pack(2) + sr._RUN_V1.pack(10, 12, 1, 0) + sr._RUN_V1.pack(13, 14, 0, 3)
    assert sr.decode_partition_value(value) == PartitionSnapshot(
        start_offset=10, end_offset=20, runs=(SnapshotRun(10, 12, True, 0), SnapshotRun(13, 14, False, 3)))
