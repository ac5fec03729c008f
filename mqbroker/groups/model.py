"""Value types shared by the coordinator, the assignors and the offsets store."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    """One partition of one topic; ordered by topic, then partition."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


#: What a group hands each member: member id -> the partitions it reads.
Assignment = dict[str, frozenset[TopicPartition]]
