"""The mirror task: copies its share of the source cluster's partitions into this cluster (Twisted).

Each run: look the mirrored topics up (creating, growing and configuring them here), take over
each partition (from its checkpoint, reconciled against the target log; a new partition's first
checkpoint is stored before anything is copied), then loop: fetch committed batches from the
source leaders (long-poll), write each partition's batches here in one produce (acks=all,
idempotent producer, partition ``p`` into partition ``p``), and every ``checkpoint.interval.ms``
store the offset maps and translate the mirrored consumer groups' offsets into this cluster.

Delivery: the reconciliation makes the copy exactly-once across crashes of the task's owner,
given one writer per target partition. Until transactions exist a broker cut off from the
controller may keep copying for a moment after its successor took over (docs/connectors.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from twisted.internet.defer import Deferred, FirstError, gatherResults

from mqbroker import errors
from mqbroker.connectors.broker_calls import ConnectorBroker
from mqbroker.connectors.mirror.batches import Copy, CopiedBatch, copy_batches
from mqbroker.connectors.mirror.naming import group_mirrored, remote_topic
from mqbroker.connectors.mirror.outbound import OutboundMirrorTask
from mqbroker.connectors.mirror.offsets import OffsetMap, decode_maps, encode_maps
from mqbroker.connectors.mirror.reconcile import reconcile
from mqbroker.connectors.mirror.settings import MirrorSettings
from mqbroker.connectors.mirror.kafka_source import KafkaSourceCluster
from mqbroker.connectors.mirror.source import Fetched, IMirrorSource, SourceCluster, SourceUnavailableError
from mqbroker.connectors.mirror.topics import sync_topics
from mqbroker.connectors.producer import SEQUENCE_MODULUS, IdempotentProducer, ProducerStateLostError
from mqbroker.connectors.state import CorruptConnectorStateError
from mqbroker.connectors.task import OutageError, SupervisedTask, TaskContext
from mqbroker.connectors.view import task_for_partition
from mqbroker.model import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

TopicPartition = tuple[str, int]
#: No source partition readable for this long (leaders elected meanwhile, the cluster down) is an outage.
SOURCE_UNREADABLE_S = 10.0
#: Pause before fetching again after a partition's fetch failed (its leader is being looked up again).
RETRY_PAUSE_S = 0.2


class MirrorTask(SupervisedTask):
    """Copies the task's share of the mirrored partitions, translating group offsets as it goes."""

    type_name = "mirror"

    def __init__(self, settings: MirrorSettings, context: TaskContext) -> None:
        super().__init__(context)
        self.settings = settings
        self.broker: ConnectorBroker = context.broker
        self._checkpointed = _checkpointed_maps(context.progress)
        #: The copy of each partition taken over in this run (source partition -> offset map).
        self._maps: dict[TopicPartition, OffsetMap] = {}
        self._producer = IdempotentProducer(context.broker, context.clock)
        self._high_watermarks: dict[TopicPartition, int] = {}
        self._copied_timestamp_ms: dict[TopicPartition, int] = {}
        self._unreadable_since_s: float | None = None

    # -- the run -----------------------------------------------------------------------------

    async def run(self) -> None:
        settings = self.settings
        client_id = f"mqbroker-mirror-{self.context.name}-{self.context.task}"
        source: IMirrorSource = (KafkaSourceCluster(self.clock, settings, client_id) if settings.source_protocol == "kafka"
                                 else SourceCluster(self.clock, settings, client_id))
        self._producer.reset()  # a new run reconciles from the target log: no earlier sequence may be reused
        self._maps = {}
        try:
            await self._take_over(source, await self._partitions(source))
            self.healthy()
            now_s = self.clock.seconds()
            next_checkpoint_s = now_s + settings.checkpoint_interval_ms / 1000.0
            next_refresh_s = now_s + settings.refresh_interval_ms / 1000.0
            while True:
                await self._copy_round(source)
                now_s = self.clock.seconds()
                if now_s >= next_checkpoint_s:
                    next_checkpoint_s = now_s + settings.checkpoint_interval_ms / 1000.0
                    await self._checkpoint()
                    await self._sync_groups(source)
                if now_s >= next_refresh_s:
                    next_refresh_s = now_s + settings.refresh_interval_ms / 1000.0
                    await self._take_over(source, await self._partitions(source))
        finally:
            source.close()

    async def _partitions(self, source: IMirrorSource) -> list[TopicPartition]:
        """This task's share of the mirrored partitions that exist here (topics made, grown and configured)."""
        ready, problems = await sync_topics(self.settings, source, self.broker, await source.topics())
        for problem in problems:
            self.counters.error(problem, self.clock.seconds())
            self.log.warn("connector {task}: {problem}", task=self.label, problem=problem)
        context = self.context
        return [(topic, partition) for topic, count in ready.items() for partition in range(count)
                if task_for_partition(topic, partition, context.tasks_count) == context.task]

    async def _take_over(self, source: IMirrorSource, partitions: list[TopicPartition]) -> None:
        """Resume each new partition from its reconciled checkpoint, or start it (checkpointed before copying)."""
        fresh = []
        for tp in partitions:
            if tp in self._maps:
                continue
            remote = remote_topic(self.settings, tp[0])
            checkpoint = self._checkpointed.get(tp)
            if checkpoint is None:
                start = EARLIEST_TIMESTAMP if self.settings.start == "earliest" else LATEST_TIMESTAMP
                self._maps[tp] = OffsetMap(source_end=await source.offset(*tp, start),
                                           target_end=await self.broker.latest_offset(remote, tp[1]))
                fresh.append(tp)
                continue
            reconciled = await reconcile(self.settings, source, self.broker, tp, remote, checkpoint)
            if reconciled.unmatched:
                message = (f"{tp[0]}-{tp[1]}: {reconciled.unmatched} batch(es) in {remote} past the checkpoint do not "
                           "match the source; copying resumes after the last match (records may repeat)")
                self.counters.error(message, self.clock.seconds())
                self.log.warn("connector {task}: {message}", task=self.label, message=message)
            elif reconciled.matched:
                self.log.info("connector {task}: {topic}-{partition} resumes after {count} batch(es) it copied past "
                              "its checkpoint", task=self.label, topic=tp[0], partition=tp[1], count=reconciled.matched)
            self._maps[tp] = reconciled.offset_map
        if fresh:
            await self._checkpoint(required=True)

    # -- copying -----------------------------------------------------------------------------

    async def _copy_round(self, source: IMirrorSource) -> None:
        """One fetch from the source leaders, and each partition's batches written here."""
        settings = self.settings
        positions = {tp: offset_map.source_end for tp, offset_map in self._maps.items()}
        if not positions:
            await self.sleep(settings.fetch_wait_ms / 1000.0)
            return
        fetched = await source.fetch(positions, settings.fetch_wait_ms, settings.fetch_partition_bytes)
        writes = []
        retry_pause = False
        for tp, outcome in fetched.items():
            if outcome.error is not None:
                await self._fetch_failed(source, tp, outcome.error)
                retry_pause = True
                continue
            self._high_watermarks[tp] = outcome.high_watermark
            copy = copy_batches(outcome.records, positions[tp], topic=tp[0], partition=tp[1],
                                check_origin=settings.naming == "identity", source_alias=settings.source_alias,
                                target_alias=settings.target_alias)
            copy.next_position = max(copy.next_position, outcome.next_position)
            self.skipped(copy.skipped)
            if copy.batches:
                writes.append((tp, copy))
            else:
                self._maps[tp].source_end = copy.next_position
        if writes and not await self.context.still_owner():
            raise OutageError("this broker no longer owns the task (its __connectors partition moved): stopping here")
        try:
            await gatherResults([Deferred.fromCoroutine(self._write(tp, copy)) for tp, copy in writes],
                                consumeErrors=True)
        except FirstError as error:
            raise error.subFailure.value from None
        self._update_lag()
        self._check_source_readable(fetched)
        if retry_pause:
            await self.sleep(RETRY_PAUSE_S)

    def _check_source_readable(self, fetched: Mapping[TopicPartition, Fetched]) -> None:
        """A moved leader is looked up again next round; no partition readable for a while is an outage."""
        now_s = self.clock.seconds()
        failures = [outcome.error for outcome in fetched.values() if outcome.error is not None]
        if not fetched or len(failures) < len(fetched):
            self._unreadable_since_s = None
            return
        if self._unreadable_since_s is None:
            self._unreadable_since_s = now_s
        elif now_s - self._unreadable_since_s > SOURCE_UNREADABLE_S:
            self._unreadable_since_s = None
            raise SourceUnavailableError(f"no source partition readable for {SOURCE_UNREADABLE_S:.0f} s: {failures[0]}")

    async def _write(self, tp: TopicPartition, copy: Copy) -> None:
        """Write one partition's copied batches here in one produce; extend its offset map."""
        remote, partition = remote_topic(self.settings, tp[0]), tp[1]
        batches = copy.batches
        span = sum(batch.span for batch in batches)
        data = await self._producer.build(remote, partition, lambda pid, epoch, seq: _joined(batches, pid, epoch, seq))
        try:
            result = await self._producer.send(remote, partition, data, span)
        except ProducerStateLostError as error:
            raise OutageError(f"{error}; reconciling with the target log") from None
        offset_map = self._maps[tp]
        target = result.base_offset
        for batch in batches:
            offset_map.copied(batch.source_base, target, batch.source_next, target + batch.span)
            target += batch.span
        offset_map.source_end = copy.next_position
        self.counters.records_total += sum(batch.records_count for batch in batches)
        self._copied_timestamp_ms[tp] = max(batch.max_timestamp for batch in batches)
        self.healthy()

    async def _fetch_failed(self, source: IMirrorSource, tp: TopicPartition, error: errors.BrokerError) -> None:
        """Source retention deleted records before they were copied: count the gap, go on from its log start."""
        if isinstance(error, errors.OffsetOutOfRangeError):
            earliest = await source.offset(*tp, EARLIEST_TIMESTAMP)
            offset_map = self._maps[tp]
            if earliest > offset_map.source_end:
                self.counters.error(f"{tp[0]}-{tp[1]}: source offsets {offset_map.source_end}..{earliest - 1} were "
                                    "deleted before they were copied", self.clock.seconds())
                offset_map.source_end = earliest
        # a moved or dead leader: the source cluster looks it up again for the next round

    def _update_lag(self) -> None:
        """Records behind the source high watermarks, and the age of the newest record copied while behind."""
        now_ms = int(self.clock.seconds() * 1000)
        lag, age_ms = 0, 0
        for tp, offset_map in self._maps.items():
            behind = max(0, self._high_watermarks.get(tp, offset_map.source_end) - offset_map.source_end)
            lag += behind
            if behind:
                age_ms = max(age_ms, now_ms - self._copied_timestamp_ms.get(tp, now_ms))
        self.counters.lag_records = lag
        self.counters.lag_seconds = age_ms / 1000.0

    # -- checkpoints and groups ----------------------------------------------------------------

    async def _checkpoint(self, required: bool = False) -> None:
        """Store every partition's offset map (``required``: failing raises, nothing may be copied before it)."""
        maps = {tp: dataclasses.replace(offset_map, points=list(offset_map.points))
                for tp, offset_map in self._maps.items()}
        try:
            await self.context.checkpoint(encode_maps(maps))
        except errors.BrokerError as error:
            if required:
                raise
            self.log.info("connector {task}: checkpoint not stored ({error}); the next one retries", task=self.label,
                          error=error)
            return
        self._checkpointed = maps

    async def _sync_groups(self, source: IMirrorSource) -> None:
        """Commit the mirrored groups' translated offsets here, where they are ahead and the group has no members."""
        if not self.settings.sync_group_offsets or not self._maps:
            return
        for group_id in await source.groups():
            if not group_mirrored(self.settings, group_id):
                continue
            translated = {}
            for tp, offset in (await source.committed_offsets(group_id)).items():
                offset_map = self._maps.get(tp)
                target = offset_map.translate(offset) if offset_map is not None else None
                if target is not None:
                    translated[remote_topic(self.settings, tp[0]), tp[1]] = target
            if translated:
                await self._commit_translated(group_id, translated)

    async def _commit_translated(self, group_id: str, translated: Mapping[TopicPartition, int]) -> None:
        try:
            current = await self.broker.committed_offsets(group_id)
            ahead = {tp: offset for tp, offset in translated.items() if current.get(tp, -1) < offset}
            if ahead:
                await self.broker.commit_offsets(group_id, ahead)
        except errors.UnknownMemberIdError:
            return  # the group has members here: it consumes here now, its own commits count
        except errors.BrokerError as error:
            self.counters.error(f"group {group_id}: translated offsets not committed: {error.message}",
                                self.clock.seconds())

    async def finish(self) -> None:
        """The last checkpoint before stopping."""
        if self._maps:
            await self._checkpoint()


def _joined(batches: list[CopiedBatch], producer_id: int, producer_epoch: int, sequence: int) -> bytes:
    """The batches as one produce's records, numbered from ``sequence``."""
    parts = []
    for batch in batches:
        parts.append(batch.build(producer_id, producer_epoch, sequence))
        sequence = (sequence + batch.span) % SEQUENCE_MODULUS
    return b"".join(parts)


def _checkpointed_maps(progress: Mapping[str, Any] | None) -> dict[TopicPartition, OffsetMap]:
    if progress is None:
        return {}
    try:
        return decode_maps(progress)
    except CorruptConnectorStateError as error:
        MirrorTask.log.warn("ignoring an unreadable mirror checkpoint: {error}", error=error)
        return {}


def build_task(settings: MirrorSettings, context: TaskContext) -> MirrorTask | OutboundMirrorTask:
    """The ``mirror`` task factory: into this cluster, or out of it into a Kafka-protocol cluster."""
    if settings.target_bootstrap is not None:
        return OutboundMirrorTask(settings, context)
    return MirrorTask(settings, context)



