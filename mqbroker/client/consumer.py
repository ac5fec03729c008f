"""The consumer's logic, without I/O: positions, resets, fetch planning and record decoding.

``ConsumerCore`` keeps a fetch position per assigned partition. A driver asks it for
``reset_requests`` (partitions whose position must be looked up with ListOffsets: a seek to
the beginning, the end or a timestamp, or a partition without a position), sends them, and
reports each answer with ``reset_resolved``. It then asks for ``fetch_plans`` (one per leader,
only for partitions with a known position and no fetch in flight), sends them, and passes each
reply to ``fetch_completed``, which decodes the record batches into ``Message``s and advances
the positions (or to ``fetch_completed_values``: per partition only the values, ``FetchedValues``, with the
positions advanced just the same). A driver that keeps a fetch in flight across calls (pipelining: the next fetch is
sent before the records of the last one are handed to the application) asks ``fetch_current``
before it takes the answer, and drops a plan that a seek, reset, pause or assignment change
has overtaken with ``fetch_abandoned``: its partitions are then fetched again from their positions.
Messages ``fetch_completed`` returned that never reached the application (the poll was interrupted) go
back with ``unread`` (values with ``unread_values``): their partitions are read again from the first of them.

Under ``auto_offset_reset="none"`` a partition assigned without a position waits for a seek (the group's
committed offset, or the application's): ``require_positions`` raises ``NoOffsetForPartitionError`` naming those
partitions, and a fetch answered OFFSET_OUT_OF_RANGE keeps its position and holds a ``PositionOutOfRangeError``
for ``raise_failure`` (Kafka's consumer does both).

Consumer groups plug in through ``assign``: a group coordinator (its own issue) decides the
assignment and seeds positions from committed offsets with ``seek``; everything below that
stays as it is.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from mqbroker.client.collector import collector_paused
from mqbroker.client.held_failure import HeldFailure
from mqbroker.errors import BrokerError, CorruptMessageError, ErrorCode, OffsetOutOfRangeError, error_for_code
from mqbroker.protocols.native.messages import (
    FetchPartition,
    FetchPartitionResult,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    IsolationLevel,
    OffsetSpec,
)
from mqbroker.records.decoder import decode_rows, decode_values
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import LOG_OVERHEAD_BYTES, BatchHeader, iter_batches
from mqbroker.records.isolation import ReadCommittedFilter
from mqbroker.records.readable import UnreadableBatch

EARLIEST = int(OffsetSpec.EARLIEST)
LATEST = int(OffsetSpec.LATEST)

TopicPartition = tuple[str, int]


class Message(NamedTuple):
    """One record read from a partition.

    A named tuple rather than a dataclass: the consumer builds one per record, and a tuple is
    the cheapest immutable value Python builds.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


class FetchedValues(NamedTuple):
    """The values one fetch read from one partition, in offset order, without a ``Message`` per record.

    ``values`` holds each record's value (bytes or None), or with keys a (key, value) pair. Offsets between
    ``first_offset`` (the first value's) and ``next_offset`` (the partition's position after them: what a commit of
    the work done commits) are not contiguous where compaction, aborted transactions or markers left gaps.
    """

    topic: str
    partition: int
    first_offset: int
    next_offset: int
    values: list[bytes | None] | list[tuple[bytes | None, bytes | None]]


class NoOffsetForPartitionError(OffsetOutOfRangeError):
    """Assigned partitions have no position (no committed offset, no seek) and ``auto_offset_reset`` is "none"
    (Kafka's NoOffsetForPartitionException): seek them, and poll again."""

    def __init__(self, partitions: Iterable[TopicPartition]) -> None:
        self.partitions = frozenset(partitions)
        names = ", ".join(f"{topic}-{partition}" for topic, partition in sorted(self.partitions))
        super().__init__(f"no offset for {names} and auto_offset_reset is 'none': seek first")


class PositionOutOfRangeError(OffsetOutOfRangeError):
    """A fetch position lies outside its partition's log and ``auto_offset_reset`` is "none" (Kafka's
    OffsetOutOfRangeException): the position stays as it was until the application seeks."""

    def __init__(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.offsets = dict(offsets)
        names = ", ".join(f"{topic}-{partition} at {offset}"
                          for (topic, partition), offset in sorted(self.offsets.items()))
        super().__init__(f"fetch position out of range: {names}, and auto_offset_reset is 'none': seek first")


class OffsetReset(enum.Enum):
    """Where a partition without a valid position starts."""

    EARLIEST = "earliest"
    LATEST = "latest"
    NONE = "none"


def parse_isolation_level(value: str) -> IsolationLevel:
    """Accept "read_uncommitted" or "read_committed", as Kafka users write ``isolation.level``."""
    try:
        return IsolationLevel[value.upper()]
    except KeyError:
        raise ValueError(f"isolation_level must be 'read_uncommitted' or 'read_committed', not {value!r}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerConfig:
    """A consumer's fetch settings."""

    auto_offset_reset: OffsetReset = OffsetReset.LATEST
    fetch_max_wait_ms: int = 500
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 50 * 1024 * 1024
    partition_max_bytes: int = 8 * 1024 * 1024
    #: READ_COMMITTED: read up to the last stable offset and drop aborted transactions (Kafka's isolation.level).
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED


@dataclass(slots=True, kw_only=True)
class FetchPlan:
    """One fetch request to send to ``node_id``: the partitions it reads and from where."""

    node_id: int
    offsets: dict[TopicPartition, int]
    config: ConsumerConfig

    def request(self, max_wait_ms: int | None = None) -> FetchRequest:
        """The FetchRequest reading this plan's partitions (waiting at most ``max_wait_ms``)."""
        by_topic: dict[str, list[FetchPartition]] = {}
        partition_max_bytes = self.config.partition_max_bytes
        for (topic, partition), offset in self.offsets.items():
            by_topic.setdefault(topic, []).append(
                FetchPartition(partition_index=partition, fetch_offset=offset, partition_max_bytes=partition_max_bytes)
            )
        return FetchRequest(
            max_wait_ms=self.config.fetch_max_wait_ms if max_wait_ms is None else min(max_wait_ms, self.config.fetch_max_wait_ms),
            min_bytes=self.config.fetch_min_bytes,
            max_bytes=self.config.fetch_max_bytes,
            isolation_level=self.config.isolation_level,
            topics=tuple(FetchTopic(name=name, partitions=tuple(parts)) for name, parts in by_topic.items()),
        )


class ConsumerCore(HeldFailure):
    """Sans-I/O consumer: fetch positions per assigned partition, fetch plans, decoded messages; a fetch reply's
    error for the application waits in ``raise_failure`` (``HeldFailure``)."""

    def __init__(self, config: ConsumerConfig, on_unreadable: Callable[[UnreadableBatch], None] | None = None) -> None:
        """``on_unreadable``: skip a fetched batch that does not decode and report it there, instead of raising
        ``CorruptMessageError`` with the position left before it (Kafka's behaviour, the default)."""
        self.config = config
        self.on_unreadable = on_unreadable
        self._positions: dict[TopicPartition, int] = {}
        #: Partitions waiting for a ListOffsets answer: the timestamp to look up (or -1/-2).
        self._resets: dict[TopicPartition, int] = {}
        #: Partitions assigned without a position under auto_offset_reset "none": they wait for a seek.
        self._unpositioned: set[TopicPartition] = set()
        #: The plan in flight for each partition being fetched.
        self._fetching: dict[TopicPartition, FetchPlan] = {}
        self.high_watermarks: dict[TopicPartition, int] = {}
        #: Topics whose leaders must be looked up again before they can be fetched.
        self.stale_topics: set[str] = set()
        #: Assigned partitions not fetched until resumed (flow control by the application).
        self.paused: set[TopicPartition] = set()

    # -- assignment and positions -------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly ``partitions`` from now on; kept partitions keep their positions."""
        wanted = set(partitions)
        for partition in list(self._positions):
            if partition not in wanted:
                del self._positions[partition]
        for partition in list(self._resets):
            if partition not in wanted:
                del self._resets[partition]
        for partition in list(self._fetching):
            if partition not in wanted:
                del self._fetching[partition]
        self.paused &= wanted
        self._unpositioned &= wanted
        policy = self.config.auto_offset_reset
        for partition in wanted - self._positions.keys() - self._resets.keys() - self._unpositioned:
            if policy is OffsetReset.NONE:
                self._unpositioned.add(partition)
            else:
                self._resets[partition] = EARLIEST if policy is OffsetReset.EARLIEST else LATEST

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads."""
        return set(self._positions) | set(self._resets) | self._unpositioned

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop fetching assigned ``partitions``; a partition not assigned is a ValueError."""
        unassigned = set(partitions) - self.assignment()
        if unassigned:
            raise ValueError(f"cannot pause partitions not assigned to this consumer: {sorted(unassigned)}")
        self.paused.update(partitions)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next."""
        self._require_assigned(partition)
        if offset < 0:
            raise ValueError(f"offset must not be negative, got {offset}")
        self._resets.pop(partition, None)
        self._unpositioned.discard(partition)
        self._positions[partition] = offset
        self._fetching.pop(partition, None)

    def seek_to_beginning(self, partition: TopicPartition) -> None:
        """Read ``partition`` from its log start offset next."""
        self._seek_to_timestamp(partition, EARLIEST)

    def seek_to_end(self, partition: TopicPartition) -> None:
        """Read only records produced to ``partition`` from now on."""
        self._seek_to_timestamp(partition, LATEST)

    def seek_to_timestamp(self, partition: TopicPartition, timestamp_ms: int) -> None:
        """Read ``partition`` from its first record at or after ``timestamp_ms`` next."""
        if timestamp_ms < 0:
            raise ValueError(f"timestamp_ms must not be negative, got {timestamp_ms}")
        self._seek_to_timestamp(partition, timestamp_ms)

    def _seek_to_timestamp(self, partition: TopicPartition, timestamp_ms: int) -> None:
        self._require_assigned(partition)
        self._positions.pop(partition, None)
        self._unpositioned.discard(partition)
        self._fetching.pop(partition, None)
        self._resets[partition] = timestamp_ms

    def position(self, partition: TopicPartition) -> int | None:
        """The offset of the next record to read, or None while a reset is being looked up or a seek awaited."""
        self._require_assigned(partition)
        return self._positions.get(partition)

    def require_positions(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Raise ``NoOffsetForPartitionError`` naming the ``partitions`` (default: every assigned one) that wait for
        a seek (auto_offset_reset "none"); the others are not held up by it once those are sought."""
        waiting = self._unpositioned if partitions is None else self._unpositioned.intersection(partitions)
        if waiting:
            raise NoOffsetForPartitionError(waiting)

    def _require_assigned(self, partition: TopicPartition) -> None:
        if not (partition in self._positions or partition in self._resets or partition in self._unpositioned):
            raise ValueError(f"partition {partition[0]}-{partition[1]} is not assigned to this consumer")

    # -- resets -------------------------------------------------------------------------------

    def reset_requests(self) -> dict[TopicPartition, int]:
        """Partitions whose position must be looked up, with the timestamp (-2 earliest, -1 latest)."""
        return dict(self._resets)

    def reset_resolved(self, partition: TopicPartition, timestamp_ms: int, offset: int) -> None:
        """Take a ListOffsets answer; ignored if the partition was sought elsewhere meanwhile."""
        if self._resets.get(partition) != timestamp_ms:
            return
        del self._resets[partition]
        if offset < 0:  # no record at or after the timestamp: read from the end
            self._resets[partition] = LATEST
            return
        self._positions[partition] = offset

    # -- fetching -----------------------------------------------------------------------------

    def fetch_plans(self, leader_of: Callable[[str, int], int]) -> list[FetchPlan]:
        """One fetch per leader for partitions with a position and no fetch in flight."""
        plans: dict[int, FetchPlan] = {}
        for partition, offset in self._positions.items():
            if partition in self._fetching or partition in self.paused:
                continue
            node_id = leader_of(*partition)
            if node_id < 0:
                self.stale_topics.add(partition[0])
                continue
            plan = plans.get(node_id)
            if plan is None:
                plan = plans[node_id] = FetchPlan(node_id=node_id, offsets={}, config=self.config)
            plan.offsets[partition] = offset
            self._fetching[partition] = plan
        return list(plans.values())

    def fetch_current(self, plan: FetchPlan) -> bool:
        """Whether every partition of ``plan`` (in flight) is still read from where it asks: no seek, reset,
        pause or assignment change overtook it since it was sent."""
        fetching, positions, paused = self._fetching, self._positions, self.paused
        return all(fetching.get(partition) is plan and positions.get(partition) == offset and partition not in paused
                   for partition, offset in plan.offsets.items())

    def fetch_abandoned(self, plan: FetchPlan) -> None:
        """Forget ``plan`` (its answer, if one comes, is not passed on): its partitions are fetched again."""
        self._release(plan)

    def _release(self, plan: FetchPlan) -> None:
        """``plan``'s partitions have no fetch in flight any more (those a newer plan fetches keep theirs)."""
        fetching = self._fetching
        for partition in plan.offsets:
            if fetching.get(partition) is plan:
                del fetching[partition]

    def fetch_failed(self, plan: FetchPlan) -> None:
        """The fetch was lost (connection broken, whole request refused): fetch again later."""
        self._release(plan)
        for partition in plan.offsets:
            self.stale_topics.add(partition[0])

    def fetch_completed(self, plan: FetchPlan, response: FetchResponse) -> list[Message]:
        """Decode a fetch reply into messages in offset order and advance the positions.

        A partition whose reply is an error for the application (a batch that does not decode, a refusal that is
        not retriable) keeps its position and its error waits in ``raise_failure``; the other partitions' messages
        are returned all the same (they would be lost if the error were raised past them)."""
        messages: list[Message] = []

        def take(partition: TopicPartition, fetched_from: int, records: memoryview,
                 aborted: list[tuple[int, int]] | None) -> int:
            decoded: list[Message] = []  # into ``messages`` only once the whole reply decoded: a failure adds nothing
            position = decode_messages(
                partition[0], partition[1], records, fetched_from, decoded, self.on_unreadable, aborted)
            messages.extend(decoded)
            return position

        try:
            self._take_reply(plan, response, take)
        except BaseException:  # ``on_unreadable`` raised, say: the messages decoded so far are read again
            self.unread(messages)
            raise
        return messages

    def fetch_completed_values(self, plan: FetchPlan, response: FetchResponse,
                               with_keys: bool = False) -> list[FetchedValues]:
        """``fetch_completed`` handing out per partition only the values (``with_keys``: (key, value) pairs).

        The same batches are kept and dropped (markers, aborted transactions under read_committed, records before
        the position) and the positions advance exactly as ``fetch_completed`` advances them."""
        fetched: list[FetchedValues] = []

        def take(partition: TopicPartition, fetched_from: int, records: memoryview,
                 aborted: list[tuple[int, int]] | None) -> int:
            taken = decode_values_of(partition[0], partition[1], records, fetched_from, with_keys,
                                     self.on_unreadable, aborted)
            if taken.values:
                fetched.append(taken)
            return taken.next_offset

        try:
            self._take_reply(plan, response, take)
        except BaseException:
            self.unread_values(fetched)
            raise
        return fetched

    def _take_reply(self, plan: FetchPlan, response: FetchResponse,
                    take: Callable[[TopicPartition, int, memoryview, list[tuple[int, int]] | None], int]) -> None:
        """Pass each current partition's records to ``take`` (which returns the next position), and hold errors."""
        self._release(plan)
        for topic in response.topics:
            for reply in topic.partitions:
                partition = (topic.name, reply.partition_index)
                fetched_from = plan.offsets.get(partition)
                if fetched_from is None or self._positions.get(partition) != fetched_from:
                    continue  # sought elsewhere while the fetch was in flight: the data is stale
                try:
                    if reply.error_code != ErrorCode.NONE:
                        self._partition_error(partition, fetched_from, reply)
                        continue
                    self.high_watermarks[partition] = reply.high_watermark
                    if reply.records:
                        aborted = None if reply.aborted_transactions is None else [
                            (item.producer_id, item.first_offset) for item in reply.aborted_transactions]
                        self._positions[partition] = take(partition, fetched_from, memoryview(reply.records), aborted)
                except BrokerError as error:  # CorruptMessageError among them
                    self._hold_failure(error)

    def unread(self, messages: list[Message]) -> None:
        """``messages`` (as ``fetch_completed`` returned them) never reached the application (the poll was
        interrupted): read their partitions again from the first of them. A fetch in flight for one is dropped."""
        first = {(message.topic, message.partition): message.offset for message in reversed(messages)}
        self._read_again(first)

    def unread_values(self, fetched: list[FetchedValues]) -> None:
        """``unread`` for what ``fetch_completed_values`` returned."""
        self._read_again({(item.topic, item.partition): item.first_offset for item in reversed(fetched)})

    def _read_again(self, first: dict[TopicPartition, int]) -> None:
        for partition, offset in first.items():
            if partition in self._positions:
                self.seek(partition, offset)

    def _partition_error(self, partition: TopicPartition, fetched_from: int, reply: FetchPartitionResult) -> None:
        code = reply.error_code
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            policy = self.config.auto_offset_reset
            if policy is OffsetReset.NONE:  # the position stays: the application decides where to go
                raise PositionOutOfRangeError({partition: fetched_from})
            del self._positions[partition]
            self._resets[partition] = EARLIEST if policy is OffsetReset.EARLIEST else LATEST
            return
        error: BrokerError = error_for_code(code, reply.error_message or f"fetching {partition} failed")
        if error.retriable or code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            self.stale_topics.add(partition[0])
            return
        raise error


def decode_messages(
    topic: str, partition: int, data: bytes | memoryview, start_offset: int, into: list[Message],
    skipped: Callable[[UnreadableBatch], None] | None = None, aborted: list[tuple[int, int]] | None = None,
) -> int:
    """Append the records of ``data`` (whole batches) at or after ``start_offset`` to ``into``.

    Every batch's CRC is checked. Control batches are skipped, and with ``aborted`` (a read_committed
    fetch's aborted transactions) the batches of those transactions (``records.isolation``), as are records below
    ``start_offset`` (a fetch returns whole batches, so the first may begin earlier). A partial
    batch at the end (a reply cut at ``max_bytes``) is left for the next fetch. A batch that does
    not decode raises ``CorruptMessageError``, or with ``skipped`` goes there and is passed over.
    Returns the next position.
    """
    leading = (topic, partition)

    def take_batch(batch: memoryview, header: BatchHeader, start_offset: int) -> None:
        nonlocal into
        messages = decode_rows(batch, Message, leading)
        if header.base_offset < start_offset:  # the fetch began inside this batch
            messages = [message for message in messages if message.offset >= start_offset]
        into += messages

    # Each ``Message`` is a tuple subclass, which CPython never untracks: without the pause, full collections
    # walk the tens of thousands a fetch returns (the consumer bench ran at 0.7x with the collector on).
    with collector_paused():
        return _decode_into(topic, partition, memoryview(data), start_offset, take_batch, skipped, aborted)


def decode_values_of(
    topic: str, partition: int, data: bytes | memoryview, start_offset: int, with_keys: bool = False,
    skipped: Callable[[UnreadableBatch], None] | None = None, aborted: list[tuple[int, int]] | None = None,
) -> FetchedValues:
    """``decode_messages`` keeping only the values (``with_keys``: (key, value) pairs): the same batches and records,
    the same errors, the same next position (``next_offset``; ``first_offset`` is -1 when no value was kept)."""
    values: list[Any] = []
    first_offset = -1

    def take_batch(batch: memoryview, header: BatchHeader, start_offset: int) -> None:
        nonlocal first_offset, values
        first, batch_values = decode_values(batch, start_offset, with_keys)
        if first_offset < 0 and first is not None:
            first_offset = first
        values += batch_values

    next_offset = _decode_into(topic, partition, memoryview(data), start_offset, take_batch, skipped, aborted)
    return FetchedValues(topic, partition, first_offset, next_offset, values)


def _decode_into(topic: str, partition: int, view: memoryview, start_offset: int,
                 take_batch: Callable[[memoryview, BatchHeader, int], None],
                 skipped: Callable[[UnreadableBatch], None] | None = None,
                 aborted: list[tuple[int, int]] | None = None) -> int:
    """Pass each whole data batch of ``view`` an application may see to ``take_batch``; returns the next position.

    Control batches and (with ``aborted``) aborted transactions' batches are never passed on."""
    next_offset = start_offset
    keeper = None if not aborted else ReadCommittedFilter(aborted)
    try:
        for position, header in iter_batches(view[: _whole_batches_bytes(view)], check=False):
            next_offset = max(next_offset, header.next_offset)
            if keeper is not None and not keeper.keep(view, position, header):
                continue
            if header.is_control:
                continue
            batch = view[position : position + header.size_bytes]
            if skipped is None:
                take_batch(batch, header, start_offset)
                continue
            try:
                take_batch(batch, header, start_offset)
            except CorruptRecordError as error:
                skipped(UnreadableBatch(topic=topic, partition=partition, first_offset=header.base_offset,
                                        last_offset=header.last_offset, error=error))
    except CorruptRecordError as error:
        raise CorruptMessageError(f"fetched data for {topic}-{partition} is corrupt: {error}") from error
    return next_offset


_BATCH_LENGTH = struct.Struct(">i")


def _whole_batches_bytes(view: memoryview) -> int:
    """Bytes of ``view`` made of complete batches (the broker may cut the last one short)."""
    position = 0
    end = len(view)
    while end - position >= LOG_OVERHEAD_BYTES:
        (batch_length,) = _BATCH_LENGTH.unpack_from(view, position + 8)
        size_bytes = batch_length + LOG_OVERHEAD_BYTES
        if batch_length < 0 or position + size_bytes > end:
            break
        position += size_bytes
    return position
