"""The outbound mirror task: copies its share of this cluster's topics into a Kafka-protocol cluster (Twisted).

Each run: list this cluster's mirrored topics, create (or grow) them in the target cluster under
their remote names, then loop: fetch the task's partitions here (long-poll, read_committed: no
aborted transaction leaves the cluster), write each round's records there through an idempotent
producer (partition ``p`` into partition ``p``, keys, values, headers and timestamps kept) and
move on once all are acknowledged; every ``checkpoint.interval.ms`` store the positions.

Delivery is at-least-once: after a crash of the owner (or an outage of the target) the task
resumes from its last checkpoint, and what it wrote after it is written again.
"""

from __future__ import annotations


from mqbroker import errors
from mqbroker.connectors.broker_calls import ConnectorBroker
from mqbroker.connectors.mirror.kafka_client import KafkaClusterError
from mqbroker.connectors.mirror.kafka_target import KafkaTargetCluster, Run
from mqbroker.connectors.mirror.naming import mirrored, remote_topic, with_origin
from mqbroker.connectors.mirror.settings import MirrorSettings
from mqbroker.connectors.reading import read_committed
from mqbroker.connectors.state import encode_positions
from mqbroker.connectors.task import checkpointed_positions, OutageError, SupervisedTask, TaskContext, partitions_lag
from mqbroker.connectors.view import task_for_partition
from mqbroker.model import FetchPosition, IsolationLevel

TopicPartition = tuple[str, int]
#: Pause before fetching again after a partition's fetch here failed.
RETRY_PAUSE_S = 0.2


class OutboundMirrorTask(SupervisedTask):
    """Copies the task's share of this cluster's mirrored partitions into a Kafka-protocol cluster."""

    type_name = "mirror"

    def __init__(self, settings: MirrorSettings, context: TaskContext) -> None:
        super().__init__(context)
        self.settings = settings
        self.broker: ConnectorBroker = context.broker
        #: The offset after the last record the target acknowledged, per partition here.
        self._positions: dict[TopicPartition, int] = checkpointed_positions(context.progress, "outbound mirror")
        self._checkpointed = dict(self._positions)
        self._high_watermarks: dict[TopicPartition, int] = {}
        self._copied_timestamp_ms: dict[TopicPartition, int] = {}

    async def run(self) -> None:
        settings = self.settings
        target = KafkaTargetCluster(self.clock, settings, f"mqbroker-mirror-{self.context.name}-{self.context.task}")
        try:
            fetching = await self._take_over(target, {})
            self.healthy()
            now_s = self.clock.seconds()
            next_checkpoint_s = now_s + settings.checkpoint_interval_ms / 1000.0
            next_refresh_s = now_s + settings.refresh_interval_ms / 1000.0
            while True:
                await self._copy_round(target, fetching)
                now_s = self.clock.seconds()
                if now_s >= next_checkpoint_s:
                    next_checkpoint_s = now_s + settings.checkpoint_interval_ms / 1000.0
                    await self._checkpoint()
                if now_s >= next_refresh_s:
                    next_refresh_s = now_s + settings.refresh_interval_ms / 1000.0
                    fetching = await self._take_over(target, fetching)
        finally:
            target.close()

    async def _take_over(self, target: KafkaTargetCluster,
                         fetching: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The task's share of the mirrored partitions here, each with a topic there; new ones from their start."""
        settings, context = self.settings, self.context
        remote_topics = await target.topics()
        for topic in sorted(await self.broker.topic_names()):
            if not mirrored(settings, topic):
                continue
            count = len(await self.broker.partitions(topic))
            remote = remote_topic(settings, topic)
            try:
                await target.shape_topic(remote, count, settings.replication_factor, remote_topics.get(remote))
            except KafkaClusterError as error:
                self.counters.error(f"mirroring {topic} into {remote}: {error}", self.clock.seconds())
                continue
            for partition in range(count):
                tp = (topic, partition)
                if tp not in fetching and task_for_partition(topic, partition, context.tasks_count) == context.task:
                    fetching[tp] = await self._start_position(tp)
        return fetching

    async def _start_position(self, tp: TopicPartition) -> int:
        known = self._positions.get(tp)
        if known is None:
            known = await (self.broker.earliest_offset(*tp) if self.settings.start == "earliest"
                           else self.broker.latest_offset(*tp))
            self._positions[tp] = known
        return known

    async def _copy_round(self, target: KafkaTargetCluster, fetching: dict[TopicPartition, int]) -> None:
        """One fetch here (read_committed), its records written there and acknowledged."""
        settings = self.settings
        if not fetching:
            await self.sleep(settings.fetch_wait_ms / 1000.0)
            return
        positions = [FetchPosition(topic=topic, partition=partition, offset=offset,
                                   max_bytes=settings.fetch_partition_bytes)
                     for (topic, partition), offset in fetching.items()]
        results = await self.broker.fetch(positions, settings.fetch_wait_ms,
                                          settings.fetch_partition_bytes * len(positions), IsolationLevel.READ_COMMITTED)
        runs: list[Run] = []
        moved: dict[TopicPartition, int] = {}
        newest_ms: dict[TopicPartition, int] = {}
        for result in results:
            tp = (result.topic, result.partition)
            if result.error is not None:
                await self._fetch_failed(tp, fetching, result.error)
                continue
            stable = result.last_stable_offset
            self._high_watermarks[tp] = stable if stable >= 0 else result.high_watermark
            fetched = read_committed(result, fetching[tp])
            self.skipped(fetched.skipped)
            records = fetched.records
            if settings.naming == "identity":
                records = with_origin(records, settings.source_alias, settings.target_alias)
            if records:
                runs.append((remote_topic(settings, tp[0]), tp[1], records))
                newest_ms[tp] = max(record[4] for record in records)
            moved[tp] = fetched.next_position
        if runs:
            if not await self.context.still_owner():
                raise OutageError("this broker no longer owns the task (its __connectors partition moved): stopping here")
            await target.send(runs)
            self.counters.records_total += sum(len(run[2]) for run in runs)
            self._copied_timestamp_ms.update(newest_ms)
            self.healthy()
        fetching.update(moved)
        self._positions.update(moved)
        self.counters.lag_records, self.counters.lag_seconds = partitions_lag(
            self._high_watermarks, self._positions, self._copied_timestamp_ms, int(self.clock.seconds() * 1000))

    async def _fetch_failed(self, tp: TopicPartition, fetching: dict[TopicPartition, int], error: Exception) -> None:
        """Records deleted by retention before they were copied: count the gap, go on from the log start."""
        if isinstance(error, errors.OffsetOutOfRangeError):
            earliest = await self.broker.earliest_offset(*tp)
            if earliest > fetching[tp]:
                self.counters.error(f"{tp[0]}-{tp[1]}: offsets {fetching[tp]}..{earliest - 1} were deleted before "
                                    "they were copied", self.clock.seconds())
                fetching[tp] = self._positions[tp] = earliest
            return
        self.counters.error(f"{tp[0]}-{tp[1]}: {error}", self.clock.seconds())
        await self.sleep(RETRY_PAUSE_S)

    async def _checkpoint(self) -> None:
        if self._positions == self._checkpointed:
            return
        positions = dict(self._positions)
        try:
            await self.context.checkpoint({"positions": encode_positions(positions)})
        except errors.BrokerError as error:
            self.log.info("connector {task}: checkpoint not stored ({error}); the next one retries", task=self.label,
                          error=error)
            return
        self._checkpointed = positions

    async def finish(self) -> None:
        """The last checkpoint before stopping."""
        await self._checkpoint()
