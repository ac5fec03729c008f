"""The Redis source task: a Stream through a consumer group, or a list through a processing list,
into a topic (Twisted, txredisapi).

Stream mode: the task is consumer ``mqbroker-<connector>-<task>`` of the group. On every start
it first takes over the group's pending entries (``XAUTOCLAIM`` from idle 0: whatever a crashed
owner read and did not acknowledge), produces them, then reads new entries with ``XREADGROUP
... BLOCK``. Each read batch is produced (acks=all, idempotent producer) and only then
acknowledged with one ``XACK``: an entry is never acknowledged before it is durable in the log.
While running it also reclaims entries pending longer than ``redis.claim.idle.ms`` (a task of a
larger ``tasks.max`` that died). No entry is produced twice: a batch whose produce failed is
sent again unchanged (same sequence numbers: the log recognises a retry of what it has), and
after a crash the next owner reads the log past the task's checkpoint for records carrying a
pending entry's id (the ``mqbroker.redis.entry`` header) and acknowledges those instead of
producing them again.

List mode: ``BLMOVE`` the list's oldest item to the task's processing list, then up to
``batch.records`` more with ``LMOVE``; produce them; then trim them off the processing list.
On start, items left on the processing list by a crash are produced first: list items carry
no id, so after a crash of the broker an item may reach the log twice (at-least-once).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twisted.internet.defer import Deferred, FirstError, gatherResults

from mqbroker import errors
from mqbroker.connectors.producer import IdempotentProducer, ProducerStateLostError
from mqbroker.connectors.reading import records_from
from mqbroker.connectors.redis.client import RedisCommandError, RedisConnection, connect
from mqbroker.connectors.redis.entries import (
    ENTRY_HEADER,
    MalformedReplyError,
    SourceRecord,
    entry_record,
    fits,
    list_record,
    read_group_entries,
    record_partition,
    size_chunks,
    stream_entries,
    too_large,
)
from mqbroker.connectors.redis.settings import RedisSourceSettings
from mqbroker.connectors.settings import fill
from mqbroker.connectors.state import (
    CorruptConnectorStateError,
    decode_positions,
    encode_positions,
)
from mqbroker.connectors.task import OutageError, SupervisedTask, TaskContext
from mqbroker.model import FetchPosition
from mqbroker.records.builder import BatchBuilder

#: Entries one XAUTOCLAIM call takes over.
CLAIM_COUNT = 500
#: How often a running task looks for entries pending too long at other consumers.
RECLAIM_INTERVAL_S = 10.0
#: Bytes one fetch reads while recovery looks for entries already in the log.
SCAN_FETCH_BYTES = 1024 * 1024
#: The topic's batch limit when its configuration does not say (the log's default max.message.bytes).
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024 + 12


class RedisSourceTask(SupervisedTask):
    """Copies a Redis Stream or list into a topic; Redis forgets an entry only once the log has it."""

    type_name = "redis-source"

    def __init__(self, settings: RedisSourceSettings, context: TaskContext) -> None:
        super().__init__(context)
        self.settings = settings
        self.consumer = f"mqbroker-{context.name}-{context.task}"
        self.processing_list = fill(settings.processing_list, list=settings.source_key, connector=context.name,
                                    task=str(context.task))
        self._producer = IdempotentProducer(context.broker, context.clock)
        #: Entry ids (Stream) or items (list) read, and their batches not yet in the log: sent again as they
        #: were on the next run (a partition's batch leaves the map once it is in the log).
        self._unsent: tuple[list[bytes], dict[int, tuple[bytes, int]]] | None = None
        #: Entry ids (Stream) or items (list) in the log but not yet acknowledged (XACK) or trimmed off.
        self._delivered: list[bytes] = []
        self._partition_count = 0
        #: The topic's ``max.message.bytes``: what was read is produced in batches within it.
        self._max_message_bytes = DEFAULT_MAX_MESSAGE_BYTES
        #: Per partition of the topic: the offset after this task's last record in the log, and that offset as of
        #: the last XACK: every entry this task produced below it is acknowledged (the checkpoint).
        self._produced_ends: dict[int, int] = {}
        self._acknowledged_ends = _checkpointed_ends(context.progress, settings.topic)
        self._checkpointed = dict(self._acknowledged_ends)
        #: While recovering: the entries found in the log past the checkpoint (acknowledge, do not produce again).
        self._in_log: set[bytes] = set()

    async def run(self) -> None:
        settings = self.settings
        connection = await connect(self.clock, settings.address)
        reader = await connect(self.clock, settings.address, blocking_wait_ms=settings.block_ms)
        try:
            self._partition_count = len(await self.context.broker.partitions(settings.topic, auto_create=True))
            self._max_message_bytes = await self._topic_max_message_bytes()
            if settings.mode == "stream":
                await self._ensure_group(connection)
            self.healthy()
            if self._unsent is not None:
                await self._deliver(connection, *self._unsent)
            await self._settle(connection)
            if settings.mode == "stream":
                await self._run_stream(connection, reader)
            else:
                await self._run_list(connection, reader)
        finally:
            for opened in (connection, reader):
                try:
                    await opened.close()
                except Exception:  # closing a broken connection: nothing left to do
                    pass

    async def _topic_max_message_bytes(self) -> int:
        """The topic's max.message.bytes; the log's default if the connector's principal may not read its configs."""
        try:
            configs = await self.context.broker.topic_configs(self.settings.topic)
        except errors.TopicAuthorizationError as error:
            self.log.info("connector {task}: assuming max.message.bytes={limit} ({error})", task=self.label,
                          limit=DEFAULT_MAX_MESSAGE_BYTES, error=error)
            return DEFAULT_MAX_MESSAGE_BYTES
        return int(configs.get("max.message.bytes", DEFAULT_MAX_MESSAGE_BYTES))

    async def _deliver(self, connection: RedisConnection, read: list[bytes],
                       batches: dict[int, tuple[bytes, int]]) -> None:
        """Produce the batches of what was read, then let Redis forget it (acknowledge or trim)."""
        self._unsent = (read, batches)
        await self._send(batches)
        self._unsent = None
        self._delivered = read
        await self._settle(connection)

    async def _settle(self, connection: RedisConnection) -> None:
        """XACK the delivered entries (Stream), or trim the delivered items off the processing list (list)."""
        delivered = self._delivered
        if not delivered:
            return
        if self.settings.mode == "stream":
            await connection.execute(b"XACK", self.settings.source_key, self.settings.group, *delivered)
            self._acknowledged_ends.update(self._produced_ends)
        else:
            await connection.execute(b"LTRIM", self.processing_list, 0, -(len(delivered) + 1))
        self._delivered = []
        self.counters.records_total += len(delivered)
        self.healthy()

    # -- Stream ------------------------------------------------------------------------------

    async def _run_stream(self, connection: RedisConnection, reader: RedisConnection) -> None:
        settings = self.settings
        await self._checkpoint_every_partition()
        self._in_log = await self._entries_in_log()
        await self._recover_own_pending(connection)
        # A single task is the group's only consumer: whatever is pending belongs to a crashed owner.
        await self._reclaim(connection, idle_ms=0 if self.context.tasks_count == 1 else settings.claim_idle_ms)
        self._in_log = set()
        next_reclaim_s = self.clock.seconds() + RECLAIM_INTERVAL_S
        next_checkpoint_s = self.clock.seconds() + settings.checkpoint_interval_ms / 1000.0
        while True:
            reply = await reader.execute(
                b"XREADGROUP", b"GROUP", settings.group, self.consumer, b"COUNT", settings.batch_records,
                b"BLOCK", settings.block_ms, b"STREAMS", settings.source_key, b">")
            entries = read_group_entries(reply)
            if entries:
                await self._produce_entries(connection, entries)
            self.counters.lag_records = -1  # a Stream's backlog beyond the group is not measured
            if self.clock.seconds() >= next_reclaim_s:
                next_reclaim_s = self.clock.seconds() + RECLAIM_INTERVAL_S
                await self._reclaim(connection, idle_ms=settings.claim_idle_ms)
            if self.clock.seconds() >= next_checkpoint_s:
                next_checkpoint_s = self.clock.seconds() + settings.checkpoint_interval_ms / 1000.0
                await self._checkpoint()

    async def _entries_in_log(self) -> set[bytes]:
        """The origins (``<connector>:<entry id>`` headers) of this task's records past its checkpoint.

        A crash between a produce and its XACK leaves entries pending that are in the log already:
        recovery acknowledges those instead of producing them twice.
        """
        topic, prefix = self.settings.topic, self.context.name.encode("ascii") + b":"
        found: set[bytes] = set()
        for partition, position in self._acknowledged_ends.items():
            end = await self.context.broker.latest_offset(topic, partition)
            while position < end:
                (result,) = await self.context.broker.fetch(
                    [FetchPosition(topic=topic, partition=partition, offset=position, max_bytes=SCAN_FETCH_BYTES)],
                    0, SCAN_FETCH_BYTES)
                if result.error is not None:
                    raise result.error
                fetched = records_from(result.records, position, topic=topic, partition=partition)
                self.skipped(fetched.skipped)
                if fetched.next_position == position:
                    break
                position = fetched.next_position
                for _, _, _, headers, _ in fetched.records:
                    found.update(value for name, value in headers
                                 if name == ENTRY_HEADER and value is not None and value.startswith(prefix))
        return found

    async def _checkpoint_every_partition(self) -> None:
        """Before producing to a partition for the first time, store its end as a checkpoint (recovery reads from it)."""
        missing = [partition for partition in range(self._partition_count) if partition not in self._acknowledged_ends]
        if not missing:
            return
        for partition in missing:
            self._acknowledged_ends[partition] = await self.context.broker.latest_offset(self.settings.topic, partition)
        await self.context.checkpoint(self._progress(self._acknowledged_ends))
        self._checkpointed = dict(self._acknowledged_ends)

    def _progress(self, ends: Mapping[int, int]) -> dict[str, Any]:
        return {"positions": encode_positions({(self.settings.topic, partition): offset
                                               for partition, offset in ends.items()})}

    async def _checkpoint(self) -> None:
        """Store the acknowledged ends (where recovery starts looking for entries already in the log)."""
        ends = dict(self._acknowledged_ends)
        if ends == self._checkpointed:
            return
        try:
            await self.context.checkpoint(self._progress(ends))
        except errors.BrokerError as error:
            self.log.info("connector {task}: checkpoint not stored ({error}); the next one retries", task=self.label,
                          error=error)
            return
        self._checkpointed = ends

    async def finish(self) -> None:
        """The last checkpoint before stopping."""
        if self.settings.mode == "stream":
            await self._checkpoint()

    async def _ensure_group(self, connection: RedisConnection) -> None:
        settings = self.settings
        try:
            await connection.execute(b"XGROUP", b"CREATE", settings.source_key, settings.group, settings.group_start,
                                     b"MKSTREAM")
        except RedisCommandError as error:
            if "BUSYGROUP" not in str(error):
                raise

    async def _recover_own_pending(self, connection: RedisConnection) -> None:
        """Produce the entries this task's consumer read and never acknowledged (its owner crashed)."""
        settings = self.settings
        after = b"0"
        while True:
            reply = await connection.execute(b"XREADGROUP", b"GROUP", settings.group, self.consumer, b"COUNT",
                                             settings.batch_records, b"STREAMS", settings.source_key, after)
            entries = read_group_entries(reply)
            if not entries:
                return
            after = entries[-1][0]
            readable = [(entry_id, fields) for entry_id, fields in entries if fields]
            if readable:
                self.log.info("connector {task}: recovering {count} entries read before a crash", task=self.label,
                              count=len(readable))
                await self._produce_entries(connection, readable)
            deleted = [entry_id for entry_id, fields in entries if not fields]
            if deleted:  # trimmed from the Stream while pending: nothing to produce, forget them
                await connection.execute(b"XACK", settings.source_key, settings.group, *deleted)

    async def _reclaim(self, connection: RedisConnection, idle_ms: int) -> None:
        """Take over the group's entries pending for at least ``idle_ms`` (0: all of them) and produce them."""
        settings = self.settings
        cursor = b"0-0"
        while True:
            reply = await connection.execute(b"XAUTOCLAIM", settings.source_key, settings.group, self.consumer,
                                             idle_ms, cursor, b"COUNT", CLAIM_COUNT)
            if not isinstance(reply, list) or len(reply) < 2 or not isinstance(reply[0], bytes):
                raise MalformedReplyError(f"unexpected XAUTOCLAIM reply {str(reply)[:80]}")
            entries = [(entry_id, fields) for entry_id, fields in stream_entries(reply[1]) if fields]
            if entries:
                self.log.info("connector {task}: reclaimed {count} pending entries of {stream}", task=self.label,
                              count=len(entries), stream=settings.source_key)
                await self._produce_entries(connection, entries)
            cursor = reply[0]
            if cursor == b"0-0":
                return

    async def _produce_entries(self, connection: RedisConnection, entries: list[tuple[bytes, list[bytes]]]) -> None:
        settings = self.settings
        origin = self.context.name.encode("ascii") + b":"
        logged = [entry_id for entry_id, _ in entries if origin + entry_id in self._in_log]
        if logged:  # produced before a crash, never acknowledged
            self.log.info("connector {task}: {count} pending entries are in the log already: acknowledging them",
                          task=self.label, count=len(logged))
            self._delivered = logged
            await self._settle(connection)
            entries = [(entry_id, fields) for entry_id, fields in entries if origin + entry_id not in self._in_log]
        if not entries:
            return
        records = [entry_record(self.context.name, entry_id, fields, settings.key_field, settings.value_field)
                   for entry_id, fields in entries]
        await self._produce_records(connection, [entry_id for entry_id, _ in entries], records)

    # -- list --------------------------------------------------------------------------------

    async def _run_list(self, connection: RedisConnection, reader: RedisConnection) -> None:
        settings = self.settings
        left = await connection.execute(b"LRANGE", self.processing_list, 0, -1)
        if left:
            self.log.info("connector {task}: producing {count} items left on {list} by an earlier run",
                          task=self.label, count=len(left), list=self.processing_list)
            await self._produce_items(connection, list(reversed(left)))
        while True:
            first = await reader.execute(b"BLMOVE", settings.source_key, self.processing_list, b"RIGHT", b"LEFT",
                                         settings.block_ms / 1000.0)
            if first is None:
                continue
            moves = [Deferred.fromCoroutine(connection.execute(b"LMOVE", settings.source_key, self.processing_list,
                                                               b"RIGHT", b"LEFT"))
                     for _ in range(settings.batch_records - 1)]
            more = await gatherResults(moves, consumeErrors=True)
            await self._produce_items(connection, [first, *(item for item in more if item is not None)])

    async def _produce_items(self, connection: RedisConnection, items: list[bytes]) -> None:
        """Produce processing-list items, oldest first."""
        await self._produce_records(connection, items, [list_record(item) for item in items])

    # -- producing ---------------------------------------------------------------------------

    async def _produce_records(self, connection: RedisConnection, read: list[bytes], records: list[SourceRecord]) -> None:
        """Deliver what was read (entry ids or items, with their records) in batches within max.message.bytes.

        A record too large for any batch fails the task (``oversized=fail``: it stays in Redis) or is
        dropped from Redis, logged and counted as an error (``oversized=skip``).
        """
        if self.settings.oversized == "skip":
            read, records = await self._drop_oversized(connection, read, records)
        for start, end in size_chunks(records, self._max_message_bytes):
            await self._deliver(connection, read[start:end], await self._build(records[start:end]))

    async def _drop_oversized(self, connection: RedisConnection, read: list[bytes],
                              records: list[SourceRecord]) -> tuple[list[bytes], list[SourceRecord]]:
        limit = self._max_message_bytes
        kept = [index for index, record in enumerate(records) if fits(record, limit)]
        if len(kept) == len(records):
            return read, records
        for index in sorted(set(range(len(records))) - set(kept)):
            message = f"skipped (oversized=skip) {too_large(records[index], limit)}"
            self.log.warn("connector {task}: {message}", task=self.label, message=message)
            self.counters.error(message, self.clock.seconds())
            if self.settings.mode == "stream":
                await connection.execute(b"XACK", self.settings.source_key, self.settings.group, read[index])
            else:
                await connection.execute(b"LREM", self.processing_list, -1, read[index])
        return [read[index] for index in kept], [records[index] for index in kept]

    async def _build(self, records: list[SourceRecord]) -> dict[int, tuple[bytes, int]]:
        """One batch per partition (records in read order), with the span of sequence numbers each takes."""
        by_partition: dict[int, list[SourceRecord]] = {}
        for record in records:
            by_partition.setdefault(record_partition(record, self._partition_count), []).append(record)
        now_ms = int(self.clock.seconds() * 1000)
        topic = self.settings.topic
        batches = {}
        for partition, selected in by_partition.items():
            def factory(producer_id: int, epoch: int, sequence: int, selected: list[SourceRecord] = selected) -> bytes:
                builder = BatchBuilder(producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)
                for record in selected:
                    builder.append(now_ms, record.key, record.value, record.headers)
                return builder.build()

            batches[partition] = (await self._producer.build(topic, partition, factory), len(selected))
        return batches

    async def _send(self, batches: dict[int, tuple[bytes, int]]) -> None:
        """Produce every partition's batch (in parallel); durable on the in-sync replicas when this returns.

        A partition's batch leaves ``batches`` once it is in the log: a retry sends only the others.
        """
        sends = [Deferred.fromCoroutine(self._send_one(batches, partition)) for partition in list(batches)]
        try:
            await gatherResults(sends, consumeErrors=True)
        except FirstError as error:
            cause = error.subFailure.value
            if isinstance(cause, ProducerStateLostError):
                self._unsent = None  # built for the old producer id: read the entries again (at-least-once)
                raise OutageError(f"the log lost this producer's sequence ({cause}); re-reading the pending entries")
            raise cause from None

    async def _send_one(self, batches: dict[int, tuple[bytes, int]], partition: int) -> None:
        batch, span = batches[partition]
        result = await self._producer.send(self.settings.topic, partition, batch, span)
        self._produced_ends[partition] = result.last_offset + 1
        del batches[partition]

    def _count(self, records: int) -> None:
        self.counters.records_total += records
        self.healthy()


def _checkpointed_ends(progress: Mapping[str, Any] | None, topic: str) -> dict[int, int]:
    """The acknowledged ends of a source checkpoint (none if there is none, or it does not decode)."""
    if progress is None:
        return {}
    try:
        positions = decode_positions(progress.get("positions"))
    except CorruptConnectorStateError as error:
        RedisSourceTask.log.warn("ignoring an unreadable redis-source checkpoint: {error}", error=error)
        return {}
    return {partition: offset for (name, partition), offset in positions.items() if name == topic}


def build_task(settings: RedisSourceSettings, context: TaskContext) -> RedisSourceTask:
    """The ``redis-source`` task factory."""
    return RedisSourceTask(settings, context)
