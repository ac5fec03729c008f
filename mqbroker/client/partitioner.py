"""Which partition a record goes to: a stable hash of its key, or a sticky choice without one.

Keyed records hash with CRC-32C (the C implementation the record batch CRC already uses),
not Kafka's murmur2: the hash runs on every keyed ``send`` and a pure-Python murmur2 costs a
microsecond per key, a third of the producer's whole per-record budget. CRC-32C is stable
across processes, platforms and versions, which is all "same key, same partition" needs;
placement is not meant to match a Kafka client's.

Records without a key stick to one partition until its batch closes, then move on (Kafka's
sticky partitioner, KIP-480): spreading such records one by one would fill every batch
slowly and send many small requests.
"""

from __future__ import annotations

import random

import crc32c


def partition_for_key(key: bytes, partition_count: int) -> int:
    """The partition a keyed record belongs to, stable for a given key and partition count."""
    return crc32c.crc32c(key) % partition_count


class StickyPartitioner:
    """Chooses partitions for records without a key: one partition per topic until its batch closes."""

    __slots__ = ("_random", "sticky")

    def __init__(self, rng: random.Random) -> None:
        self._random = rng
        #: The partition each topic's keyless records go to now, once chosen. A producer's ``send`` looks it up
        #: here (one dict look-up per record) and calls ``partition`` only when it is missing or out of range.
        self.sticky: dict[str, int] = {}

    def partition(self, topic: str, partition_count: int) -> int:
        """The partition the next keyless record of ``topic`` goes to."""
        partition = self.sticky.get(topic)
        if partition is None or partition >= partition_count:
            partition = self._random.randrange(partition_count)
            self.sticky[topic] = partition
        return partition

    def batch_closed(self, topic: str, partition: int, partition_count: int) -> None:
        """Move ``topic``'s keyless records off ``partition`` once its batch is full."""
        if self.sticky.get(topic) != partition or partition_count <= 1:
            return
        offset = self._random.randrange(1, partition_count)
        self.sticky[topic] = (partition + offset) % partition_count
