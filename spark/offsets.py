"""Spark's JSON offsets <-> ``{topic: {partition: offset}}``, and the picklable read ranges.

Pure: no sockets, no clock. Spark stores a source's offsets as JSON, whose object keys are
strings, so a partition number travels as ``"0"`` and comes back as ``"0"``; this module is the
one place that converts. The layout is the Kafka source's, so operators can read and edit a
checkpoint's ``offsets/<batchId>`` file the same way: ``{"topic": {"0": 12, "1": 40}}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

#: ListOffsets timestamps: the log start and the high watermark (Kafka's -2 and -1).
EARLIEST = -2
LATEST = -1

#: ``{topic: {partition: offset}}``; an offset may be EARLIEST or LATEST before it is resolved.
TopicOffsets = dict[str, dict[int, int]]


class OffsetsFormatError(ValueError):
    """An offsets option or checkpoint entry that is not ``{"topic": {"partition": offset}}``."""


def to_json(offsets: Mapping[str, Mapping[int, int]]) -> dict[str, dict[str, int]]:
    """The JSON-ready form Spark checkpoints: string partition keys, in partition order."""
    return {
        topic: {str(partition): offset for partition, offset in sorted(partitions.items())}
        for topic, partitions in sorted(offsets.items())
    }


def from_json(value: object) -> TopicOffsets:
    """Read offsets Spark hands back (or a user wrote): ``{"topic": {"0": 12}}`` into int keys."""
    if not isinstance(value, Mapping):
        raise OffsetsFormatError(f'offsets must be an object like {{"topic": {{"0": 12}}}}, got {value!r}')
    offsets: TopicOffsets = {}
    for topic, partitions in value.items():
        if not isinstance(topic, str) or not isinstance(partitions, Mapping):
            raise OffsetsFormatError(f"offsets of topic {topic!r} must be an object of partition -> offset")
        parsed: dict[int, int] = {}
        for partition, offset in partitions.items():
            if not str(partition).isdigit() or isinstance(offset, bool) or not isinstance(offset, int):
                raise OffsetsFormatError(f"offset {topic}/{partition}={offset!r}: partitions and offsets are integers")
            if offset < EARLIEST:
                raise OffsetsFormatError(f"offset {topic}/{partition}={offset} is below -2 (earliest)")
            parsed[int(partition)] = offset
        offsets[topic] = parsed
    return offsets


def parse_option(text: str) -> str | TopicOffsets:
    """A ``startingOffsets``/``endingOffsets`` option: ``"earliest"``, ``"latest"`` or JSON offsets."""
    stripped = text.strip()
    if stripped.lower() in ("earliest", "latest"):
        return stripped.lower()
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError as error:
        raise OffsetsFormatError(
            f'offsets option {text!r} is neither "earliest", "latest" nor JSON like {{"topic": {{"0": 12}}}}: {error}'
        ) from None
    return from_json(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetRange(InputPartition):
    """One Spark input partition: records ``[start, end)`` of one log partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def record_count(self) -> int:
        """Offsets covered (records may be fewer: compaction leaves gaps)."""
        return self.end - self.start


def plan_ranges(start: TopicOffsets, end: TopicOffsets, records_per_range_max: int) -> list[OffsetRange]:
    """Input partitions reading ``start`` up to ``end``: one per log partition, large ones split.

    A partition missing from ``start`` is new since the previous batch and is read from offset 0
    (the reader moves up to the log start if retention removed the beginning).
    """
    assert records_per_range_max > 0, records_per_range_max
    ranges: list[OffsetRange] = []
    for topic, partitions in sorted(end.items()):
        for partition, stop in sorted(partitions.items()):
            first = start.get(topic, {}).get(partition, 0)
            while first < stop:
                last = min(stop, first + records_per_range_max)
                ranges.append(OffsetRange(topic=topic, partition=partition, start=first, end=last))
                first = last
    return ranges


def limit_end(start: TopicOffsets, latest: TopicOffsets, records_max: int) -> TopicOffsets:
    """End offsets reading at most ``records_max`` past ``start``, shared in proportion to each backlog.

    Like the Kafka source's ``maxOffsetsPerTrigger``: each partition gets its share of the limit,
    rounded down, but at least one record while it has any, so a small limit still progresses.
    """
    assert records_max > 0, records_max
    backlog = {
        (topic, partition): stop - start.get(topic, {}).get(partition, 0)
        for topic, partitions in latest.items()
        for partition, stop in partitions.items()
    }
    total = sum(count for count in backlog.values() if count > 0)
    limited: TopicOffsets = {topic: dict(partitions) for topic, partitions in latest.items()}
    if total <= records_max:
        return limited
    for (topic, partition), count in backlog.items():
        if count <= 0:
            continue
        share = max(1, count * records_max // total)
        limited[topic][partition] = start.get(topic, {}).get(partition, 0) + min(count, share)
    return limited
