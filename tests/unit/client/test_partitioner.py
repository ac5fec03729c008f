"""Partition choice: keyed records always land together; keyless records stick, then move."""

import random

from hypothesis import given
from hypothesis import strategies as st

from mqbroker.client.partitioner import StickyPartitioner, partition_for_key


@given(key=st.binary(max_size=64), partition_count=st.integers(1, 1000))
def test_same_key_always_maps_to_the_same_partition_in_range(key: bytes, partition_count: int) -> None:
    first = partition_for_key(key, partition_count)
    assert first == partition_for_key(bytes(key), partition_count)
    assert 0 <= first < partition_count


def test_key_placement_is_stable_across_releases() -> None:
    # Pinned values: changing the hash would move every keyed stream to other partitions.
    assert [partition_for_key(key, 12) for key in (b"", b"user-1", b"user-2")] == [0, 4, 0]


def test_keys_spread_over_partitions() -> None:
    used = {partition_for_key(f"key-{number}".encode(), 8) for number in range(200)}
    assert used == set(range(8))


def test_keyless_records_stick_to_one_partition_until_its_batch_fills() -> None:
    partitioner = StickyPartitioner(random.Random(7))
    chosen = {partitioner.partition("events", 4) for _ in range(100)}
    assert len(chosen) == 1
    (first,) = chosen
    partitioner.batch_closed("events", first, 4)
    assert partitioner.partition("events", 4) != first


def test_keyless_records_cover_every_partition_over_many_batches() -> None:
    partitioner = StickyPartitioner(random.Random(1))
    seen = set()
    for _ in range(100):
        partition = partitioner.partition("events", 5)
        seen.add(partition)
        partitioner.batch_closed("events", partition, 5)
    assert seen == set(range(5))


def test_sticky_partition_follows_a_shrunk_partition_count() -> None:
    partitioner = StickyPartitioner(random.Random(3))
    partitioner.sticky["events"] = 9
    assert partitioner.partition("events", 2) in (0, 1)
