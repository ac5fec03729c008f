"""``__connectors`` on one broker: created once, read continuously into a view, written through the broker.

``StateStore`` tails every partition of the compacted topic with one long-poll fetch loop and
folds each record into a ``ConnectorsView``; ``read_past`` fires once the view holds a given
offset (read your writes). A record or batch that does not decode is counted, logged and
skipped: a reader inside the broker survives what it cannot read.
"""

from __future__ import annotations

from collections.abc import Callable
from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger

from mqbroker import errors
from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.connectors.broker_calls import ConnectorBroker
from mqbroker.connectors.state import (
    CONNECTORS_TOPIC,
    CONNECTORS_TOPIC_CONFIGS,
    CorruptConnectorStateError,
    StateKey,
    StateValue,
    decode_key,
    decode_value,
    encode_value,
)
from mqbroker.connectors.view import ConnectorsView
from mqbroker.model import FetchPosition, TopicSpec
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.decoder import decode_records
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import iter_batches

#: Bytes one tailing fetch reads per partition.
_PARTITION_FETCH_BYTES = 1024 * 1024
#: How long one tailing fetch waits for new records.
_TAIL_WAIT_MS = 500
#: Pause after a tailing fetch or the topic's creation failed.
_RETRY_S = 0.5


class StateStore:
    """Keeps this broker's ``ConnectorsView`` of ``__connectors`` current and writes records to it."""

    log = Logger()

    def __init__(self, *, broker: ConnectorBroker, clock: IReactorTime, partition_count: int,
                 on_change: Callable[[], None]) -> None:
        self._broker = broker
        self._clock = clock
        self.partition_count = partition_count
        self._on_change = on_change
        self.view = ConnectorsView()
        #: The next offset to read per partition (set once the topic exists).
        self._positions: dict[int, int] = {}
        self._waiters: list[tuple[int, int, Deferred[None]]] = []
        self._tailing: Deferred[None] | None = None
        self.corrupt_records_total = 0
        self.ready: Deferred[None] = Deferred()

    def start(self) -> None:
        """Create the topic if needed, then tail it (``ready`` fires once the topic is known)."""
        self._tailing = Deferred.fromCoroutine(self._run())
        self._tailing.addErrback(lambda failure: failure.trap(CancelledError))

    def stop(self) -> None:
        """Stop tailing; waiting writers fail with ``BrokerShuttingDownError``."""
        if self._tailing is not None:
            self._tailing.cancel()
        waiters, self._waiters = self._waiters, []
        for _, _, waiter in waiters:
            waiter.errback(errors.BrokerShuttingDownError("the broker is shutting down"))

    # -- writing ---------------------------------------------------------------------------

    async def write(self, partition: int, entries: list[tuple[StateKey, StateValue | None]], *, local: bool) -> int:
        """Append records (None values: tombstones) to one partition; return the last one's offset.

        ``local`` appends on this broker only, failing once it does not lead ``partition``.
        """
        now_ms = int(self._clock.seconds() * 1000)
        builder = BatchBuilder()
        for key, value in entries:
            builder.append(now_ms, key.encode(), None if value is None else encode_value(value))
        batch = builder.build()
        produce = self._broker.produce_local if local else self._broker.produce
        result = await produce(CONNECTORS_TOPIC, partition, batch)
        return result.base_offset + len(entries) - 1

    def read_past(self, partition: int, offset: int) -> Deferred[None]:
        """Fire once the view holds every record of ``partition`` up to ``offset``."""
        if self._positions.get(partition, 0) > offset:
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        self._waiters.append((partition, offset, waiter))
        return waiter

    # -- reading ---------------------------------------------------------------------------

    async def _run(self) -> None:
        await self._ensure_topic()
        self.ready.callback(None)
        while True:
            try:
                await self._tail_once()
            except (errors.BrokerError, BrokerUnavailableError) as error:
                self.log.debug("reading {topic} failed ({error}); retrying", topic=CONNECTORS_TOPIC, error=error)
                await deferLater(self._clock, _RETRY_S, lambda: None)

    async def _ensure_topic(self) -> None:
        """Create ``__connectors`` unless it exists; learn its partition count (another broker may have chosen it)."""
        while True:
            try:
                await self._broker.create_topic(TopicSpec(name=CONNECTORS_TOPIC, partitions=self.partition_count,
                                                          configs=dict(CONNECTORS_TOPIC_CONFIGS)))
                partitions = await self._broker.partitions(CONNECTORS_TOPIC)
            except (errors.BrokerError, BrokerUnavailableError) as error:
                self.log.info("{topic} is not there yet ({error}); retrying", topic=CONNECTORS_TOPIC, error=error)
                await deferLater(self._clock, _RETRY_S, lambda: None)
                continue
            if partitions:
                self.partition_count = len(partitions)
                self._positions = {partition.partition: 0 for partition in partitions}
                return
            await deferLater(self._clock, _RETRY_S, lambda: None)

    async def _tail_once(self) -> None:
        positions = [FetchPosition(topic=CONNECTORS_TOPIC, partition=partition, offset=offset,
                                   max_bytes=_PARTITION_FETCH_BYTES) for partition, offset in self._positions.items()]
        results = await self._broker.fetch(positions, _TAIL_WAIT_MS, _PARTITION_FETCH_BYTES * len(positions))
        changed = failed = False
        for result in results:
            if isinstance(result.error, errors.OffsetOutOfRangeError):
                self._positions[result.partition] = await self._broker.earliest_offset(CONNECTORS_TOPIC,
                                                                                       result.partition)
                continue
            if result.error is not None:
                failed = True
                continue
            changed = self._apply_batches(result.partition, result.records) or changed
        self._wake_waiters()
        if changed:
            self._on_change()
        if failed:
            await deferLater(self._clock, _RETRY_S, lambda: None)

    def _apply_batches(self, partition: int, records: bytes) -> bool:
        """Fold the records of one fetch result into the view; True if any record was applied."""
        position = self._positions[partition]
        applied = False
        try:
            batches = list(iter_batches(records))
        except CorruptRecordError as error:
            self._corrupt(partition, position, f"unreadable batch: {error}")
            batches = []
        for start, header in batches:
            if header.next_offset <= position:
                continue
            if not header.is_control:
                try:
                    decoded = decode_records(records[start:start + header.size_bytes])
                except CorruptRecordError as error:
                    self._corrupt(partition, header.base_offset, str(error))
                    decoded = []
                for record in decoded:
                    if record.offset >= position:
                        applied = self._apply_record(partition, record.offset, record.key, record.value) or applied
            position = header.next_offset
        self._positions[partition] = position
        return applied

    def _apply_record(self, partition: int, offset: int, key: bytes | None, value: bytes | None) -> bool:
        try:
            state_key = decode_key(key)
            self.view.apply(state_key, None if value is None else decode_value(state_key, value))
        except CorruptConnectorStateError as error:
            self._corrupt(partition, offset, str(error))
            return False
        return True

    def _corrupt(self, partition: int, offset: int, problem: str) -> None:
        self.corrupt_records_total += 1
        self.log.warn("skipping an unreadable record of {topic}-{partition} at offset {offset}: {problem}",
                      topic=CONNECTORS_TOPIC, partition=partition, offset=offset, problem=problem)

    def _wake_waiters(self) -> None:
        waiting, self._waiters = self._waiters, []
        for partition, offset, waiter in waiting:
            if self._positions.get(partition, 0) > offset:
                waiter.callback(None)
            else:
                self._waiters.append((partition, offset, waiter))

    def position(self, partition: int) -> int:
        """The next offset of ``partition`` the view will read."""
        return self._positions.get(partition, 0)

