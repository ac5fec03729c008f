"""Runs the pure ``GroupCoordinator`` inside the broker: timers, parked joins, durable offsets.

"tx-light", like the broker core: it returns Deferreds and schedules through the injected
clock, and does no I/O of its own. Offsets and group metadata live in the compacted internal
topic ``__consumer_offsets``; a group's records all go to one partition (``offsets_partition``,
a stable hash of the group id), and the broker leading that partition coordinates the group.
Each led partition gets its own ``GroupService``, rebuilt by replaying that partition up to its
high watermark when the broker becomes its leader (``CoordinatedPartitions`` routes requests).
A commit is acknowledged only once its records are replicated (acks = all); records the
coordinator makes by itself (group metadata, expiry tombstones) are appended in the background.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar

from twisted.internet.defer import Deferred, FirstError, fail, gatherResults, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker import errors
from mqbroker.groups.coordinator import GroupCoordinator
from mqbroker.groups.messages import (
    GroupDescription,
    GroupListing,
    JoinRequest,
    JoinResponse,
    MemberRequest,
    OffsetCommitRequest,
    SyncResponse,
)
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.offsets import CommittedOffset, OffsetsRecord, decode_key
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import iter_batches
from mqbroker.records.markers import read_control
from mqbroker.records.readable import UnreadableBatch, decode_whole, next_offset_after
from mqbroker.storage.log import PartitionLog

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact"}
#: Bytes read per step while replaying the offsets topic at start.
_REPLAY_READ_BYTES = 4 * 1024 * 1024

#: Appends one record batch to a partition of ``__consumer_offsets``; fires once it is durable.
Appender = Callable[[int, bytes], "Deferred[Any]"]


def offsets_partition(group_id: str, partition_count: int) -> int:
    """The ``__consumer_offsets`` partition holding a group's records (stable across restarts)."""
    return zlib.crc32(group_id.encode("utf-8")) % partition_count


def read_offsets_records(
    partition_log: PartitionLog, end_offset: int | None = None, *, partition: int = -1,
    skipped: Callable[[UnreadableBatch], None] | None = None,
) -> Iterator[OffsetsRecord]:
    """Every record of one offsets partition below ``end_offset`` (default: the log end) in log order.

    A batch that does not decode, or a record without a key (the broker writes none), goes to
    ``skipped`` and the replay goes on after it; without ``skipped`` it raises ``CorruptRecordError``.
    """
    end = partition_log.log_end_offset if end_offset is None else min(end_offset, partition_log.log_end_offset)
    offset = partition_log.log_start_offset

    def skip(batch: UnreadableBatch) -> None:
        if skipped is None:
            raise batch.error
        skipped(batch)

    while offset < end:
        read = partition_log.read(offset, _REPLAY_READ_BYTES)
        if not read.records:
            return
        view = memoryview(read.records)
        for position, header in iter_batches(view, check=False):
            if header.last_offset < offset:
                continue
            if header.base_offset >= end:
                return
            try:
                if header.is_control:
                    control = read_control(view, position, header)
                    if control.is_marker:  # a transaction's offsets apply or go here
                        yield OffsetsRecord(key=b"", value=None, producer_id=header.producer_id,
                                            committed=control.committed, offset=header.base_offset)
                    continue
                records = decode_whole(view[position : position + header.size_bytes], header)
            except CorruptRecordError as error:
                skip(UnreadableBatch(topic=OFFSETS_TOPIC, partition=partition, first_offset=header.base_offset,
                                     last_offset=header.last_offset, error=error))
                continue
            producer_id = header.producer_id if header.is_transactional else -1
            for record in records:
                if record.offset >= end:
                    return
                if record.key is None:
                    skip(UnreadableBatch(topic=OFFSETS_TOPIC, partition=partition, first_offset=record.offset,
                                         last_offset=record.offset, error=CorruptRecordError("a record without a key")))
                    continue
                yield OffsetsRecord(key=record.key, value=record.value, offset=record.offset, producer_id=producer_id)
        offset = next_offset_after(read.records, offset)


class GroupService:
    """The broker's consumer-group coordinator: Deferred answers over the pure state machine."""

    log = Logger()

    def __init__(
        self, *, coordinator: GroupCoordinator, clock: IReactorTime, append: Appender, offsets_partitions: int
    ) -> None:
        self._coordinator = coordinator
        self._clock = clock
        self._append = append
        self._offsets_partitions = offsets_partitions
        self._parked: dict[int, Deferred[JoinResponse]] = {}
        self._request_keys = itertools.count()
        self._timer: IDelayedCall | None = None
        self._timer_deadline_ms: int | None = None
        self._stopped = False
        self._drain()

    def now_ms(self) -> int:
        """The clock in milliseconds."""
        return int(self._clock.seconds() * 1000)

    # -- membership --------------------------------------------------------------------------

    def join(self, request: JoinRequest) -> Deferred[JoinResponse]:
        """Join (or rejoin); fires when the rebalance completes."""
        key = next(self._request_keys)
        answer: Deferred[JoinResponse] = Deferred()
        self._parked[key] = answer
        try:
            self._coordinator.join(request, key, self.now_ms())
        except errors.BrokerError as error:
            del self._parked[key]
            return fail(error)
        finally:
            self._drain()
        return answer

    def sync(self, request: MemberRequest) -> Deferred[SyncResponse]:
        """A member's assignment for its generation."""
        return self._call(lambda now_ms: self._coordinator.sync(request, now_ms))

    def heartbeat(self, request: MemberRequest, polled: bool) -> Deferred[None]:
        """Keep a member alive; fails with ``RebalanceInProgressError`` when it must rejoin."""

        def beat(now_ms: int) -> None:
            if self._coordinator.heartbeat(request, polled=polled, now_ms=now_ms) is errors.ErrorCode.REBALANCE_IN_PROGRESS:
                raise errors.RebalanceInProgressError(f"group {request.group_id!r} is rebalancing; rejoin")

        return self._call(beat)

    def leave(self, request: MemberRequest) -> Deferred[None]:
        """A member leaves; its partitions move at once."""
        return self._call(lambda now_ms: self._coordinator.leave(request, now_ms))

    def topics_changed(self, topics: Iterable[str]) -> None:
        """Partitions were added to ``topics`` (or they were created or deleted): rebalance their groups."""
        self._call(lambda now_ms: self._coordinator.topics_changed(topics, now_ms))

    # -- offsets -----------------------------------------------------------------------------

    def commit(self, request: OffsetCommitRequest) -> Deferred[None]:
        """Commit offsets; fires once they are durable (and visible to ``fetch_offsets``)."""
        try:
            records = self._coordinator.commit_offsets(request, self.now_ms())
        except errors.BrokerError as error:
            return fail(error)
        finally:
            self._drain()
        if not records:
            return succeed(None)
        written = self._write(records)
        written.addCallback(lambda _: self._coordinator.offsets_written(records))
        return written

    def txn_offset_records(self, request: OffsetCommitRequest) -> list[OffsetsRecord]:
        """Check a transactional commit (the member's generation) and return its records to append."""
        try:
            return self._coordinator.commit_offsets(request, self.now_ms())
        finally:
            self._drain()

    def txn_offsets_written(self, producer_id: int, records: list[OffsetsRecord]) -> None:
        """The transaction's offset records are durable: pending until its marker."""
        self._coordinator.txn_offsets_written(producer_id, records)

    def transaction_ended(self, producer_id: int, committed: bool) -> None:
        """A producer's transaction ended in this partition: its offsets apply or go."""
        self._coordinator.transaction_ended(producer_id, committed)

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None, require_stable: bool = False
    ) -> Deferred[dict[TopicPartition, CommittedOffset | None]]:
        """Committed offsets of a group (of ``partitions``, or all)."""
        return self._call(lambda now_ms: self._coordinator.fetch_offsets(group_id, partitions, require_stable))

    def committed_offsets(self) -> dict[str, dict[TopicPartition, CommittedOffset | None]]:
        """Every group's committed offsets (for lag metrics)."""
        return {listing.group_id: self._coordinator.fetch_offsets(listing.group_id)
                for listing in self._coordinator.list_groups()}

    # -- admin -------------------------------------------------------------------------------

    def list_groups(self) -> Deferred[list[GroupListing]]:
        """Every group this broker coordinates."""
        return self._call(lambda now_ms: self._coordinator.list_groups())

    def describe_group(self, group_id: str) -> Deferred[GroupDescription]:
        """A group's state and members."""
        return self._call(lambda now_ms: self._coordinator.describe_group(group_id))

    def delete_group(self, group_id: str) -> Deferred[None]:
        """Delete an empty group and its offsets; fires once the tombstones are durable."""
        try:
            self._coordinator.delete_group(group_id, self.now_ms())
        except errors.BrokerError as error:
            return fail(error)
        return self._write_queued().addCallback(lambda _: None)

    def delete_offsets(self, group_id: str, partitions: Sequence[TopicPartition]
                       ) -> Deferred[dict[TopicPartition, errors.BrokerError | None]]:
        """Delete committed offsets of topics the group does not subscribe to; fires with each partition's
        outcome once the tombstones are durable."""
        try:
            outcomes = self._coordinator.delete_offsets(group_id, partitions)
        except errors.BrokerError as error:
            return fail(error)
        return self._write_queued().addCallback(lambda _: outcomes)

    def _write_queued(self) -> Deferred[Any]:
        """Append the records the coordinator queued in ``ready()`` (tombstones) and fire once they are durable."""
        ready = self._coordinator.ready()
        answer_parked(self._parked, ready.replies)
        written = self._write(list(ready.records)) if ready.records else succeed(None)
        self._schedule()
        return written

    def stop(self) -> None:
        """Cancel the timer (broker shutdown); parked joins are answered by the closing connections."""
        self._stopped = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()

    def resign(self, error: errors.BrokerError) -> None:
        """Another broker coordinates these groups now: stop, and fail the parked joins with ``error``."""
        self.stop()
        parked, self._parked = self._parked, {}
        for answer in parked.values():
            answer.errback(error)

    # -- plumbing ----------------------------------------------------------------------------

    def _call(self, action: Callable[[int], Any]) -> Deferred[Any]:
        """Run one coordinator call now, then do what it asked for; a typed error fails the Deferred."""
        try:
            result = action(self.now_ms())
        except errors.BrokerError as error:
            return fail(error)
        finally:
            self._drain()
        return succeed(result)

    def _drain(self) -> None:
        """Answer completed joins, append the coordinator's records, log evictions, re-arm the timer."""
        ready = self._coordinator.ready()
        answer_parked(self._parked, ready.replies)
        if ready.records:
            self._write(list(ready.records)).addErrback(self._log_write_failure)
        for eviction in ready.evictions:
            self.log.info("group {group}: evicted member {member} ({instance}): {reason}", group=eviction.group_id,
                          member=eviction.member_id, instance=eviction.group_instance_id, reason=eviction.reason)
        self._schedule()


    def _write(self, records: list[OffsetsRecord]) -> Deferred[Any]:
        """Append records to their groups' partitions, one batch per partition; fires when all are durable."""
        by_partition: dict[int, BatchBuilder] = {}
        now_ms = self.now_ms()
        for record in records:
            partition = offsets_partition(decode_key(record.key).group_id, self._offsets_partitions)
            builder = by_partition.setdefault(partition, BatchBuilder())
            builder.append(now_ms, record.key, record.value)
        appends = [self._append(partition, builder.build()) for partition, builder in by_partition.items()]
        written = gatherResults(appends, consumeErrors=True)
        written.addErrback(_first_error)
        return written

    def _log_write_failure(self, failure: Failure) -> None:
        # A lost metadata or tombstone append is repaired by the next rebalance or expiry check.
        self.log.failure("appending group records to {topic} failed", failure, topic=OFFSETS_TOPIC)

    def _schedule(self) -> None:
        """Arm the timer for the coordinator's next deadline."""
        if self._stopped:
            return
        deadline_ms = self._coordinator.next_deadline_ms()
        if self._timer is not None and self._timer.active():
            if self._timer_deadline_ms == deadline_ms:
                return
            self._timer.cancel()
        self._timer_deadline_ms = deadline_ms
        self._timer = self._clock.callLater(max(0, deadline_ms - self.now_ms()) / 1000.0, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._coordinator.tick(self.now_ms())
        self._drain()


class Resignable(Protocol):
    """A service that serves the records of one internal-topic partition while this broker leads it."""

    def resign(self, error: errors.BrokerError) -> None: ...

    def stop(self) -> None: ...


ServiceT = TypeVar("ServiceT", bound=Resignable)


def answer_parked(parked: dict[Any, Deferred[Any]], replies: Iterable[Any]) -> None:
    """Fire the parked request of each reply (its ``request_key``) with its ``response`` or ``error``; a reply whose
    request is gone (answered already, or its connection closed) is dropped."""
    for reply in replies:
        answer = parked.pop(reply.request_key, None)
        if answer is None:
            continue
        if reply.error is not None:
            answer.errback(reply.error)
        else:
            answer.callback(reply.response)


class CoordinatedPartitions(Generic[ServiceT]):
    """The partitions of an internal topic this broker leads, each loading or serving its groups.

    ``__consumer_offsets`` by default (``GroupService``s); share groups use it for
    ``__share_group_state``. A partition is coordinated for one leader epoch: a new epoch (even
    of this broker) means a new service replayed from the log, since another leader may have
    written meanwhile.
    """

    def __init__(self, partition_count: int, *, topic: str = OFFSETS_TOPIC,
                 partition_of: Callable[[str, int], int] = offsets_partition) -> None:
        self.partition_count = partition_count
        self.topic = topic
        self._partition_of = partition_of
        self._epochs: dict[int, int] = {}
        self._services: dict[int, ServiceT] = {}

    def partition_of(self, group_id: str) -> int:
        """The partition of ``group_id`` (the one mapping used for routing and storage)."""
        return self._partition_of(group_id, self.partition_count)

    def service_for(self, group_id: str) -> ServiceT:
        """The service of the group's partition; NOT_COORDINATOR / LOAD_IN_PROGRESS when it has none here."""
        partition = self.partition_of(group_id)
        service = self._services.get(partition)
        if service is not None:
            return service
        if partition in self._epochs:
            raise errors.CoordinatorLoadInProgressError(
                f"{self.topic}-{partition} (group {group_id!r}) is still being loaded here; retry"
            )
        raise errors.NotCoordinatorError(
            f"this broker does not lead {self.topic}-{partition}, which holds group {group_id!r}; "
            "find the coordinator again and retry there"
        )

    def epoch_of(self, partition: int) -> int | None:
        """The leader epoch ``partition`` is loaded or served for (None: not coordinated here)."""
        return self._epochs.get(partition)

    def loading(self, partition: int, leader_epoch: int) -> None:
        """Start coordinating ``partition`` for ``leader_epoch``: its groups answer LOAD_IN_PROGRESS until ``serve``."""
        assert partition not in self._epochs, partition
        self._epochs[partition] = leader_epoch

    def serve(self, partition: int, leader_epoch: int, service: ServiceT) -> None:
        """The partition is replayed: its groups are served by ``service``."""
        assert self._epochs.get(partition) == leader_epoch and partition not in self._services, partition
        self._services[partition] = service

    def resign(self, partition: int) -> None:
        """The partition is led elsewhere (or by a new epoch): stop serving its groups."""
        self._epochs.pop(partition, None)
        service = self._services.pop(partition, None)
        if service is not None:
            service.resign(errors.NotCoordinatorError(
                f"{self.topic}-{partition}: its leadership moved; find the coordinator again and retry"
            ))

    def services(self) -> list[ServiceT]:
        """Every serving service."""
        return list(self._services.values())

    def serving(self, partition: int) -> list[ServiceT]:
        """The service of ``partition`` if it is serving here (an empty list otherwise)."""
        service = self._services.get(partition)
        return [] if service is None else [service]

    def stop(self) -> None:
        """Broker shutdown: cancel every service's timer."""
        for service in self._services.values():
            service.stop()


def _first_error(failure: Failure) -> Failure:
    """Unwrap ``gatherResults``' FirstError so callers see the broker error itself."""
    if failure.check(FirstError):
        return failure.value.subFailure  # type: ignore[no-any-return]
    return failure
