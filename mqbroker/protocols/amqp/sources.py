"""Native log topics as exchange sources: records produced natively reach AMQP queues through an exchange.

An exchange declared with the argument ``x-source-topic: <topic>`` routes every record produced
onto ``<topic>`` after its declare-ok, as if it had been published to that exchange: routing
key = the record key (UTF-8), the record headers become the message's ``headers`` table (so
headers exchanges match on them), body = the record value. One ``SourceReader`` per source
topic long-polls all its partitions through ``IBroker.fetch`` and routes each fetched chunk
through every exchange naming that topic. Its positions advance, and are written to the
compacted topic ``__amqp_source_positions``, only once every queue append of the chunk is
durable: a crash replays at most the chunks after the last written position (at least once).
A batch whose records do not decode is counted, logged and skipped: the reader goes on after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from mqbroker import errors, limits
from mqbroker.interfaces import IBroker
from mqbroker.model import (
    EARLIEST_TIMESTAMP,
    AbortedTransaction,
    FetchPosition,
    FetchRequest,
    IsolationLevel,
    Principal,
)
from mqbroker.protocols.amqp import fields, spec
from mqbroker.protocols.amqp.appender import BatchStored, all_settled
from mqbroker.protocols.amqp.codec import encode_properties
from mqbroker.protocols.amqp.spec import AmqpError, ReplyCode
from mqbroker.protocols.amqp.stored import (
    EMPTY_PROPERTIES,
    METADATA_TOPIC,
    QUEUE_STATE_TOPIC,
    QUEUE_TOPIC_PREFIX,
    DecompressionBudget,
    FetchBudgetSpent,
)
from mqbroker.records.readable import UnreadableBatch, readable_batches
from mqbroker.records.record import RecordHeader

#: The exchange argument naming the native topic an exchange reads from.
SOURCE_TOPIC_ARGUMENT = "x-source-topic"
#: Compacted topic of the source readers' positions: key = topic, value = table {partition: next offset}.
SOURCE_POSITIONS_TOPIC = "__amqp_source_positions"
#: Pause after a failed read or a refused append before reading again.
SOURCE_RETRY_S = 1.0

Positions = dict[int, int]  # partition → next offset to route


def source_topic(arguments: Mapping[str, Any], method: spec.Method | None = None) -> str | None:
    """The ``x-source-topic`` of exchange arguments (None if absent); 406 if it names no usable topic."""
    topic = arguments.get(SOURCE_TOPIC_ARGUMENT)
    if topic is None:
        return None
    if isinstance(topic, bytes):
        topic = topic.decode("utf-8", "surrogateescape")
    if not isinstance(topic, str) or not topic:
        problem = f"{SOURCE_TOPIC_ARGUMENT} must be a non-empty string, not {topic!r}"
    elif topic.startswith(QUEUE_TOPIC_PREFIX) or topic in (METADATA_TOPIC, QUEUE_STATE_TOPIC, SOURCE_POSITIONS_TOPIC):
        problem = f"{SOURCE_TOPIC_ARGUMENT} '{topic}' is an AMQP topic; bind its queue or exchange instead"
    else:
        return topic
    raise AmqpError(ReplyCode.PRECONDITION_FAILED, problem, class_id=method.CLASS_ID if method else 0,
                    method_id=method.METHOD_ID if method else 0)


def encode_positions(positions: Positions) -> bytes:
    """The stored value of a reader's positions."""
    return fields.table({str(partition): offset for partition, offset in sorted(positions.items())})


def decode_positions(value: bytes) -> Positions:
    """A stored positions value → {partition: offset}; AmqpError (and nothing else) if it is not one."""
    positions = {}
    for partition, offset in fields.Reader(value).table().items():
        if not (partition.isascii() and partition.isdigit()) or type(offset) is not int or offset < 0:
            raise AmqpError(ReplyCode.INTERNAL_ERROR,
                            f"stored AMQP source position {partition[:40]!r}: {str(offset)[:40]} is not partition: offset")
        positions[int(partition)] = offset
    return positions


def _header_value(value: bytes | None) -> str | bytes:
    if value is None:
        return b""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value  # a byte array ('x') in the table


class SourceRecord:
    """A native record as a message to route: routing key, headers (or None), property bytes, body."""

    __slots__ = ("body", "headers", "properties_raw", "routing_key")

    def __init__(self, offset: int, key: bytes | None, value: bytes | None, headers: tuple[RecordHeader, ...],
                 timestamp_ms: int) -> None:
        self.routing_key = key.decode("utf-8", "surrogateescape") if key else ""
        self.body = value or b""
        self.headers: dict[str, Any] | None = None
        self.properties_raw = EMPTY_PROPERTIES
        if headers:
            self.headers = {name: _header_value(value) for name, value in headers}
            self.properties_raw = encode_properties(spec.BasicProperties(headers=self.headers))


def decode_source_records(
    records: bytes, first_offset: int, *, topic: str, partition: int, skipped: Callable[[UnreadableBatch], None],
    aborted: Iterable[AbortedTransaction] | None = None,
) -> tuple[list[SourceRecord], int]:
    """Fetched batches → the records at or after ``first_offset`` and the offset after the last batch decoded or
    skipped (a batch that does not decode goes to ``skipped``; those after a batch that no longer fits the
    fetch's decompression budget wait for the next fetch; ``aborted``: the read_committed fetch's aborted
    transactions, whose batches are passed over)."""
    decoded: list[SourceRecord] = []
    budget = DecompressionBudget()
    batches = readable_batches(records, first_offset, topic=topic, partition=partition, skipped=skipped,
                               decode=lambda batch, header: budget.decode(batch, header, _offset_and_record,
                                                                          _record_bytes), aborted=aborted)
    try:
        for _, offsets_and_records in batches:
            decoded += [record for offset, record in offsets_and_records if offset >= first_offset]
    except FetchBudgetSpent:
        pass
    return decoded, batches.next_offset


def _record_bytes(item: tuple[int, SourceRecord]) -> int:
    record = item[1]
    return len(record.body) + len(record.properties_raw) + len(record.routing_key)


def _offset_and_record(offset: int, key: bytes | None, value: bytes | None, headers: tuple[RecordHeader, ...],
                       timestamp_ms: int) -> tuple[int, SourceRecord]:
    return offset, SourceRecord(offset, key, value, headers, timestamp_ms)


async def resolve_positions(broker: IBroker, principal: Principal, topic: str, known: Positions,
                            missing_from: int) -> Positions:
    """``known`` plus every other partition of ``topic`` at ``missing_from`` (LATEST or EARLIEST_TIMESTAMP);
    UnknownTopicOrPartitionError if the topic does not exist."""
    metadata = await broker.metadata(principal, [topic], False)
    [described] = metadata.topics
    if described.error is not None:
        raise described.error
    positions = {}
    for partition in described.partitions:
        offset = known.get(partition.partition)
        if offset is None:
            offset = (await broker.list_offset(principal, topic, partition.partition, missing_from)).offset
        positions[partition.partition] = offset
    return positions


class SourceHost(Protocol):
    """What a source reader needs from its virtual host."""

    broker: IBroker
    principal: Principal
    reactor: IReactorTime

    def route_source(self, topic: str, records: list[SourceRecord]) -> list[BatchStored]: ...

    def save_positions(self, topic: str, positions: Positions) -> Deferred[None]: ...

    def skip_unreadable(self, reader: str, batch: UnreadableBatch) -> None: ...


class SourceReader:
    """Routes the new records of one native topic through the exchanges that name it."""

    log = Logger()

    def __init__(self, host: SourceHost, topic: str, positions: Positions) -> None:
        self.host = host
        self.topic = topic
        self.positions = dict(positions)
        self._stopped = False
        self._sleeper: Any = None  # the pending retry timer, if any
        self._woken: Deferred[None] | None = None
        self.running: Deferred[None] = Deferred.fromCoroutine(self._run())
        self.running.addErrback(self._crashed)

    def stop(self) -> None:
        """Stop after the fetch in flight (its chunk is not routed)."""
        self._stopped = True
        if self._sleeper is not None and self._sleeper.active():
            self._sleeper.cancel()
            self._wake()

    def _crashed(self, failure: Any) -> None:
        self.log.failure("AMQP source reader of {topic} stopped", failure, topic=self.topic)

    async def _run(self) -> None:
        while not self._stopped:
            try:
                routed = await self._route_once()
            except errors.BrokerError as error:
                self.log.warn("AMQP source {topic}: {error}; retrying in {delay} s", topic=self.topic,
                              error=error.message, delay=SOURCE_RETRY_S)
                routed = False
            if not routed and not self._stopped:
                await self._sleep(SOURCE_RETRY_S)

    def _sleep(self, delay_s: float) -> Deferred[None]:
        self._woken = Deferred()
        self._sleeper = self.host.reactor.callLater(delay_s, self._wake)
        return self._woken

    def _wake(self) -> None:
        woken, self._woken, self._sleeper = self._woken, None, None
        if woken is not None:
            woken.callback(None)

    async def _route_once(self) -> bool:
        """One fetch over every partition, routed and made durable; False to back off."""
        if not self.positions:
            # Known partitions come from the declaration or the stored positions; without any (the
            # topic was missing at start-up) the partitions found now are read from their start.
            self.positions = await resolve_positions(self.host.broker, self.host.principal, self.topic, {},
                                                     EARLIEST_TIMESTAMP)
        positions = tuple(FetchPosition(topic=self.topic, partition=partition, offset=offset,
                                        max_bytes=limits.amqp_log_fetch_bytes_max)
                          for partition, offset in sorted(self.positions.items()))
        request = FetchRequest(positions=positions, wait_ms_max=limits.amqp_log_fetch_wait_ms_max,
                               response_bytes_max=limits.amqp_log_fetch_bytes_max,
                               isolation_level=IsolationLevel.READ_COMMITTED)  # no open or aborted transaction
        results = await self.host.broker.fetch(self.host.principal, request)
        if self._stopped:
            return True
        advanced: Positions = {}
        records: list[SourceRecord] = []
        for result in results:
            offset = self.positions[result.partition]
            if isinstance(result.error, errors.OffsetOutOfRangeError):
                # Retention trimmed records this reader had not routed: continue from the log start.
                start = await self.host.broker.list_offset(self.host.principal, self.topic, result.partition,
                                                           EARLIEST_TIMESTAMP)
                self.log.warn("AMQP source {topic}-{partition}: offsets {offset}..{start} were deleted before "
                              "they were routed", topic=self.topic, partition=result.partition, offset=offset,
                              start=start.offset)
                advanced[result.partition] = max(offset, start.offset)
                continue
            if result.error is not None:
                raise result.error
            decoded, next_offset = decode_source_records(
                result.records, offset, topic=self.topic, partition=result.partition,
                skipped=lambda batch: self.host.skip_unreadable("AMQP source reader", batch),
                aborted=result.aborted_transactions)
            records += decoded
            if next_offset > offset:
                advanced[result.partition] = next_offset
        if not advanced:
            return True
        stored = await all_settled(self.host.route_source(self.topic, records) if records else [])
        if not stored:
            self.log.warn("AMQP source {topic}: an append was refused; routing the chunk again", topic=self.topic)
            return False
        if self._stopped:
            return True
        self.positions.update(advanced)
        await self.host.save_positions(self.topic, dict(self.positions))
        return True

