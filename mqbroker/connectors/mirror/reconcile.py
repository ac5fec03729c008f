"""After a crash: how far a partition's copy really got, read from the target log (Twisted).

A checkpoint says "source offset S is at target offset T". The task may have copied more
before it died. Every batch it writes is one source batch, in order, into a partition nobody
else writes, so the batches past T in the target are the next copyable batches past S in the
source: the task walks both, matching each pair by record count and max timestamp, and resumes
after the last match. Nothing is written twice and nothing is skipped. A pair that does not
match (the source was compacted meanwhile, or someone else wrote the target partition) ends
the walk there: copying resumes after the last match and the task reports it (records may then
repeat: at-least-once).
"""

from __future__ import annotations

from dataclasses import dataclass

from mqbroker.connectors.broker_calls import ConnectorBroker
from mqbroker.connectors.mirror.batches import copy_batches
from mqbroker.connectors.mirror.offsets import OffsetMap
from mqbroker.connectors.mirror.settings import MirrorSettings
from mqbroker.connectors.mirror.source import IMirrorSource, SourceUnavailableError
from mqbroker.model import FetchPosition
from mqbroker.records.header import iter_batches

#: Bytes one read of the target log takes while reconciling.
_TARGET_READ_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetBatch:
    """What identifies a batch the mirror wrote: where it is, its record count and max timestamp."""

    base_offset: int
    next_offset: int
    records_count: int
    max_timestamp: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Reconciled:
    """The map to resume from; batches past the checkpoint matched, and those that did not."""

    offset_map: OffsetMap
    matched: int
    unmatched: int


async def target_batches(broker: ConnectorBroker, topic: str, partition: int, start: int) -> list[TargetBatch]:
    """The batch headers of a target partition from ``start`` to its high watermark."""
    end = await broker.latest_offset(topic, partition)
    found: list[TargetBatch] = []
    position = start
    while position < end:
        (result,) = await broker.fetch([FetchPosition(topic=topic, partition=partition, offset=position,
                                                      max_bytes=_TARGET_READ_BYTES)], 0, _TARGET_READ_BYTES)
        if result.error is not None:
            raise result.error
        read = [header for _, header in iter_batches(result.records, check=False) if header.next_offset > position]
        if not read:
            break
        for header in read:
            if not header.is_control:
                found.append(TargetBatch(base_offset=header.base_offset, next_offset=header.next_offset,
                                         records_count=header.records_count, max_timestamp=header.max_timestamp))
        position = read[-1].next_offset
    return found


async def reconcile(settings: MirrorSettings, source: IMirrorSource, broker: ConnectorBroker,
                    source_partition: tuple[str, int], remote: str, checkpoint: OffsetMap) -> Reconciled:
    """Walk the target partition past the checkpoint and the source alongside; the map after the last match."""
    topic, partition = source_partition
    offset_map = OffsetMap(source_end=checkpoint.source_end, target_end=checkpoint.target_end,
                           points=list(checkpoint.points))
    written = await target_batches(broker, remote, partition, checkpoint.target_end)
    matched = 0
    position = offset_map.source_end
    while matched < len(written):
        fetched = (await source.fetch({source_partition: position}, 0, settings.fetch_partition_bytes))[source_partition]
        if fetched.error is not None:
            raise SourceUnavailableError(f"reading {topic}-{partition} to reconcile: {fetched.error}")
        copy = copy_batches(fetched.records, position, topic=topic, partition=partition,
                            check_origin=settings.naming == "identity",
                            source_alias=settings.source_alias, target_alias=settings.target_alias)
        copy.next_position = max(copy.next_position, fetched.next_position)
        if copy.next_position == position:
            break  # the source has nothing more: the target holds batches it cannot explain
        for batch in copy.batches:
            target = written[matched]
            if (batch.records_count, batch.max_timestamp) != (target.records_count, target.max_timestamp):
                return Reconciled(offset_map=offset_map, matched=matched, unmatched=len(written) - matched)
            offset_map.copied(batch.source_base, target.base_offset, batch.source_next, target.next_offset)
            matched += 1
            if matched == len(written):
                return Reconciled(offset_map=offset_map, matched=matched, unmatched=0)
        position = copy.next_position
        offset_map.source_end = position  # transaction markers past the last match: nothing of them is here
    return Reconciled(offset_map=offset_map, matched=matched, unmatched=len(written) - matched)
