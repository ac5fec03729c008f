"""The Redis sink task: topic partitions into a Stream, pub/sub channels or keys (Twisted, txredisapi).

One loop per task: fetch the task's partitions through the broker (long-poll, read_committed: the
records of aborted transactions are never written), cut the records
into runs of ``batch.records`` per partition, and send each run as one script call
(``scripts``); up to ``redis.pipeline.depth`` calls are in flight on the connection, their
replies confirm the runs in order. Progress is checkpointed every ``checkpoint.interval.ms``,
and on start the task resumes from the later of its checkpoint and the positions hash in Redis.
Because the scripts skip what the positions hash says is written, a replay writes nothing twice:
exactly-once into Redis, with at-least-once reads from the log.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from twisted.internet.defer import Deferred

from mqbroker import errors
from mqbroker.connectors.reading import FetchedRecord, read_committed
from mqbroker.connectors.redis.client import RedisConnection, connect
from mqbroker.connectors.redis.resp import Argument, EncodedArguments
from mqbroker.connectors.redis.scripts import (
    SCRIPTS,
    keys_arguments,
    position_field,
    pubsub_arguments,
    stream_arguments,
)
from mqbroker.connectors.redis.settings import RedisSinkSettings
from mqbroker.connectors.settings import fill
from mqbroker.connectors.state import encode_positions
from mqbroker.connectors.task import checkpointed_positions, SupervisedTask, TaskContext, partitions_lag
from mqbroker.connectors.view import task_for_partition
from mqbroker.model import FetchPosition, IsolationLevel

#: Bytes one fetch reads per partition.
PARTITION_FETCH_BYTES = 4 * 1024 * 1024
#: How long a fetch waits for records when the task is caught up.
FETCH_WAIT_MS = 500
#: How often the task looks for partitions added to its topics.
PARTITIONS_REFRESH_S = 10.0

TopicPartition = tuple[str, int]


class _Run:
    """One script call in flight: the partition, the offset after its last record, its size and newest timestamp."""

    __slots__ = ("call", "partition", "next_offset", "count", "timestamp_ms")

    def __init__(self, call: Deferred[Any], partition: TopicPartition, next_offset: int, count: int,
                 timestamp_ms: int) -> None:
        self.call = call
        self.partition = partition
        self.next_offset = next_offset
        self.count = count
        self.timestamp_ms = timestamp_ms


class RedisSinkTask(SupervisedTask):
    """Copies the task's share of ``topics`` into Redis, exactly once per record."""

    type_name = "redis-sink"

    def __init__(self, settings: RedisSinkSettings, context: TaskContext) -> None:
        super().__init__(context)
        self.settings = settings
        #: The offset after the last record Redis confirmed, per partition.
        self._confirmed: dict[TopicPartition, int] = checkpointed_positions(context.progress, "redis-sink")
        self._checkpointed: dict[TopicPartition, int] = dict(self._confirmed)
        self._written_timestamp_ms: dict[TopicPartition, int] = {}
        self._high_watermarks: dict[TopicPartition, int] = {}

    # -- the loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        connection = await connect(self.clock, self.settings.address)
        pending: deque[_Run] = deque()
        try:
            script = await connection.execute(b"SCRIPT", b"LOAD", SCRIPTS[self.settings.mode])
            self.healthy()
            await self._copy(connection, _as_bytes(script), pending)
        finally:
            for run in pending:
                run.call.addErrback(lambda _: None)  # the connection is closing: their outcome is moot
            await _quietly_closed(connection)

    async def _copy(self, connection: RedisConnection, script: bytes, pending: deque[_Run]) -> None:
        settings = self.settings
        partitions = await self._partitions()
        stored = await self._stored_positions(connection)
        fetching = {tp: await self._start_position(tp, stored) for tp in partitions}
        next_refresh_s = self.clock.seconds() + PARTITIONS_REFRESH_S
        next_checkpoint_s = self.clock.seconds() + settings.checkpoint_interval_ms / 1000.0
        while True:
            positions = [FetchPosition(topic=topic, partition=partition, offset=offset, max_bytes=PARTITION_FETCH_BYTES)
                         for (topic, partition), offset in fetching.items()]
            results = await self.context.broker.fetch(positions, FETCH_WAIT_MS, PARTITION_FETCH_BYTES * len(positions),
                                                      IsolationLevel.READ_COMMITTED)
            for result in results:
                tp = (result.topic, result.partition)
                if result.error is not None:
                    fetching[tp] = await self._fetch_failed(tp, fetching[tp], result.error)
                    continue
                stable = result.last_stable_offset
                self._high_watermarks[tp] = stable if stable >= 0 else result.high_watermark
                fetched = read_committed(result, fetching[tp])
                self.skipped(fetched.skipped)
                for start in range(0, len(fetched.records), settings.batch_records):
                    run = fetched.records[start:start + settings.batch_records]
                    pending.append(self._send(connection, script, tp, run))
                    while len(pending) > settings.pipeline_depth:
                        await self._confirm(pending.popleft())
                fetching[tp] = fetched.next_position
            while pending and pending[0].call.called:
                await self._confirm(pending.popleft())
            self._update_lag()
            now_s = self.clock.seconds()
            if now_s >= next_checkpoint_s:
                next_checkpoint_s = now_s + settings.checkpoint_interval_ms / 1000.0
                await self._checkpoint()
            if now_s >= next_refresh_s:
                next_refresh_s = now_s + PARTITIONS_REFRESH_S
                for tp in await self._partitions():
                    if tp not in fetching:
                        fetching[tp] = await self._start_position(tp, await self._stored_positions(connection))

    def _send(self, connection: RedisConnection, script: bytes, tp: TopicPartition, run: list[FetchedRecord]) -> _Run:
        """One script call for a run of one partition's records."""
        settings = self.settings
        topic, partition = tp
        last_offset = run[-1][0]
        records: list[Argument] | list[EncodedArguments]
        if settings.mode == "stream":
            records = [stream_arguments(run, settings.stream_headers)]
            parameter = settings.stream_length_max
        elif settings.mode == "keys":
            records, _ = keys_arguments(run)
            parameter = settings.key_ttl_ms
        else:
            records = pubsub_arguments(run)
            parameter = 0
        target = fill(settings.target, topic=topic, connector=self.context.name)
        call = Deferred.fromCoroutine(connection.execute(
            b"EVALSHA", script, 2, settings.positions_key, target, position_field(topic, partition), last_offset,
            parameter, *records))
        return _Run(call, tp, last_offset + 1, len(run), max(record[4] for record in run))

    async def _confirm(self, run: _Run) -> None:
        """Wait for a call's reply: its records are in Redis."""
        await run.call
        self._confirmed[run.partition] = run.next_offset
        self._written_timestamp_ms[run.partition] = run.timestamp_ms
        self.counters.records_total += run.count
        self.healthy()

    # -- positions -----------------------------------------------------------------------------

    async def _partitions(self) -> list[TopicPartition]:
        """The task's share of its topics' partitions (fails with the broker's error if a topic is missing)."""
        context = self.context
        assigned = []
        for topic in self.settings.topics:
            for found in await context.broker.partitions(topic):
                if task_for_partition(topic, found.partition, context.tasks_count) == context.task:
                    assigned.append((topic, found.partition))
        return assigned

    async def _stored_positions(self, connection: RedisConnection) -> dict[TopicPartition, int]:
        """The positions hash: the offset after the last record written per partition."""
        reply = await connection.execute(b"HGETALL", self.settings.positions_key)
        stored = {}
        for field, value in zip(reply[::2], reply[1::2]):
            topic, _, partition = _as_bytes(field).decode("utf-8", "replace").rpartition("/")
            try:
                stored[topic, int(partition)] = int(value) + 1
            except ValueError:
                continue  # not a field this sink writes
        return stored

    async def _start_position(self, tp: TopicPartition, stored: Mapping[TopicPartition, int]) -> int:
        """The later of the checkpoint and the positions hash; else the start the settings name."""
        known = [offset for offset in (self._confirmed.get(tp), stored.get(tp)) if offset is not None]
        if known:
            position = max(known)
        elif self.settings.start == "latest":
            position = await self.context.broker.latest_offset(*tp)
        else:
            position = await self.context.broker.earliest_offset(*tp)
        self._confirmed[tp] = position
        return position

    async def _fetch_failed(self, tp: TopicPartition, position: int, error: Exception) -> int:
        """Records deleted by retention before they were copied: count the gap, go on from the log start."""
        if isinstance(error, errors.OffsetOutOfRangeError):
            earliest = await self.context.broker.earliest_offset(*tp)
            if earliest > position:
                self.counters.error(f"{tp[0]}-{tp[1]}: offsets {position}..{earliest - 1} were deleted before they "
                                    "were copied", self.clock.seconds())
                self._confirmed[tp] = max(self._confirmed.get(tp, 0), earliest)
                return earliest
        else:
            self.counters.error(f"{tp[0]}-{tp[1]}: {error}", self.clock.seconds())
            await self.sleep(FETCH_WAIT_MS / 1000.0)
        return position

    def _update_lag(self) -> None:
        """Records up to the high watermarks not confirmed yet, and the age of the newest written while behind."""
        self.counters.lag_records, self.counters.lag_seconds = partitions_lag(
            self._high_watermarks, self._confirmed, self._written_timestamp_ms, int(self.clock.seconds() * 1000))

    async def _checkpoint(self) -> None:
        if self._confirmed == self._checkpointed:
            return
        confirmed = dict(self._confirmed)
        try:
            await self.context.checkpoint({"positions": encode_positions(confirmed)})
        except errors.BrokerError as error:
            self.log.info("connector {task}: checkpoint not stored ({error}); the next one retries", task=self.label,
                          error=error)
            return
        self._checkpointed = confirmed

    async def finish(self) -> None:
        """The last checkpoint before stopping (Redis's positions hash holds the truth anyway)."""
        await self._checkpoint()


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


async def _quietly_closed(connection: RedisConnection) -> None:
    try:
        await connection.close()
    except Exception:  # closing a broken connection: nothing left to do
        pass


def build_task(settings: RedisSinkSettings, context: TaskContext) -> RedisSinkTask:
    """The ``redis-sink`` task factory."""
    return RedisSinkTask(settings, context)
