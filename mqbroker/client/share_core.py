"""The share consumer's logic, without I/O: membership, fetch requests, leased records, acknowledgements.

A share consumer belongs to a share group: it heartbeats to the group's host (``ShareMembership``),
fetches records leased to it, and acknowledges each one: accept (done), release (deliver it again,
to anyone), reject (dead-letter it) or renew (extend its lease). Acknowledgements queue up and go
with the next fetch or an explicit ``acknowledge_request``, consecutive offsets of one kind as
one range. Drivers (``blocking.share``, ``twisted.share``) move the requests and replies.
"""

from __future__ import annotations

import bisect
import dataclasses
import enum
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from mqbroker.client.collector import collector_paused
from mqbroker.client.held_failure import HeldFailure
from mqbroker.errors import (
    BrokerError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    CorruptMessageError,
    NotCoordinatorError,
    UnknownMemberIdError,
    error_for_code,
)
from mqbroker.model import AcknowledgeType
from mqbroker.protocols.native import share_messages as wire
from mqbroker.records.decoder import decode_records_as, decode_rows
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import BatchHeader, iter_batches

#: Errors after which a consumer looks its group's host up again.
COORDINATOR_MOVED = (NotCoordinatorError, CoordinatorNotAvailableError, CoordinatorLoadInProgressError)
#: Pause before a consumer retries finding or reaching its group's host.
COORDINATOR_RETRY_MS = 200


class ShareMessage(NamedTuple):
    """One record leased to this consumer: ``delivery_count`` says how often it was delivered (1: first time)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    delivery_count: int


@dataclasses.dataclass(frozen=True, slots=True)
class AcknowledgeOutcome:
    """What became of one acknowledged range: ``error`` None once the broker stored it."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    kind: AcknowledgeType
    error: BrokerError | None = None


#: Called with the outcome of every acknowledgement a consumer sent (from the thread or reactor that sent it).
AcknowledgedCallback = Callable[[list[AcknowledgeOutcome]], None]


class Rejoin(enum.Enum):
    """What a failed membership call asks of the driver."""

    FIND_COORDINATOR = "find the group's host again, then heartbeat"
    JOIN_AGAIN = "heartbeat with member epoch 0"


class ShareMembership:
    """A member's identity in its share group, from heartbeat to heartbeat."""

    def __init__(self, group_id: str, topics: Sequence[str]) -> None:
        self.group_id = group_id
        self.topics = tuple(topics)
        self.member_id = ""
        self.member_epoch = 0
        self.heartbeat_interval_ms = 1_000
        self.assignment: tuple[tuple[str, int], ...] = ()

    @property
    def joined(self) -> bool:
        """Whether the group's host knows this member."""
        return bool(self.member_id) and self.member_epoch > 0

    def heartbeat_request(self) -> wire.ShareGroupHeartbeatRequest:
        """The next heartbeat (a join while not a member)."""
        return wire.ShareGroupHeartbeatRequest(group_id=self.group_id, member_id=self.member_id,
                                               member_epoch=self.member_epoch, subscribed_topic_names=self.topics)

    def leave_request(self) -> wire.ShareGroupHeartbeatRequest:
        """The heartbeat that leaves the group (what the member holds is released)."""
        return wire.ShareGroupHeartbeatRequest(group_id=self.group_id, member_id=self.member_id, member_epoch=-1)

    def heartbeat_completed(self, response: wire.ShareGroupHeartbeatResponse) -> None:
        """Take the host's answer: identity, heartbeat interval, assignment."""
        self.member_id, self.member_epoch = response.member_id, response.member_epoch
        self.heartbeat_interval_ms = max(100, response.heartbeat_interval_ms)
        self.assignment = tuple((topic.name, partition) for topic in response.assignment for partition in topic.partitions)

    def failed(self, error: BrokerError) -> Rejoin:
        """What to do after a membership, fetch or acknowledgement error (``error`` itself: raise it)."""
        if isinstance(error, UnknownMemberIdError):
            self.member_epoch = 0  # the same id: leases a new host kept for it stay settleable
            return Rejoin.JOIN_AGAIN
        if isinstance(error, COORDINATOR_MOVED) or error.retriable:
            # Join the (maybe new) host under the same member id: a new host keeps this member's stored
            # leases, so it may still settle the records it holds.
            self.member_epoch = 0
            return Rejoin.FIND_COORDINATOR
        raise error


class ShareConsumerCore(HeldFailure):
    """Leased records and queued acknowledgements of one share consumer; a fetch reply's error for the application
    waits in ``raise_failure`` (``HeldFailure``)."""

    def __init__(self, group_id: str, *, records_max: int = 500, bytes_max: int = 16 * 1024 * 1024,
                 lease_ms: int = -1, on_acknowledged: AcknowledgedCallback | None = None) -> None:
        """``on_acknowledged``: told the outcome of every acknowledgement sent (``report``)."""
        self.group_id = group_id
        self.on_acknowledged = on_acknowledged
        self.records_max = records_max
        self.bytes_max = bytes_max
        self.lease_ms = lease_ms
        #: Queued verdicts as spans ``[topic, partition, first, last, kind, error]``, in the order given: records
        #: acknowledged in offset order (the usual case) extend one span, so nothing here costs per record but
        #: a comparison.
        self._pending: list[list[Any]] = []
        #: Records leased by a fetch whose ``hand_over`` raised (``on_acknowledged`` did), for ``take_held``.
        self._held: list[ShareMessage] = []

    @property
    def pending_acknowledgements(self) -> int:
        """Records acknowledged by the application and not sent yet."""
        return sum(span[3] - span[2] + 1 for span in self._pending)

    def acknowledge(self, messages: Iterable[ShareMessage], kind: AcknowledgeType, error: str = "") -> None:
        """Queue a verdict on leased records (sent with the next fetch or acknowledge request)."""
        pending = self._pending
        span = pending[-1] if pending else None
        for message in messages:
            if (span is not None and message.offset == span[3] + 1 and message.partition == span[1]
                    and message.topic == span[0] and span[4] is kind and span[5] == error):
                span[3] = message.offset
            else:
                span = [message.topic, message.partition, message.offset, message.offset, kind, error]
                pending.append(span)

    def fetch_request(self, member_id: str, wait_ms: int) -> tuple[wire.ShareFetchRequest, list[AcknowledgeOutcome]]:
        """The next fetch, carrying the queued acknowledgements; and those ranges, to match the reply's outcomes."""
        topics, sent = self._take_pending()
        request = wire.ShareFetchRequest(group_id=self.group_id, member_id=member_id, max_wait_ms=wait_ms,
                                         max_records=self.records_max, max_bytes=self.bytes_max,
                                         lease_ms=self.lease_ms, acknowledgements=topics)
        return request, sent

    def acknowledge_request(self, member_id: str) -> tuple[wire.ShareAcknowledgeRequest | None, list[AcknowledgeOutcome]]:
        """The queued acknowledgements on their own (None: nothing queued)."""
        topics, sent = self._take_pending()
        if not topics:
            return None, []
        return wire.ShareAcknowledgeRequest(group_id=self.group_id, member_id=member_id, topics=topics), sent

    def renew_request(self, member_id: str, messages: Iterable[ShareMessage],
                      lease_ms: int) -> tuple[wire.ShareAcknowledgeRequest, list[AcknowledgeOutcome]]:
        """Extend the leases of ``messages`` to ``lease_ms`` from now (sent at once, apart from the queue)."""
        ranges = _ranges([(m.topic, m.partition, m.offset, AcknowledgeType.RENEW, "") for m in messages])
        request = wire.ShareAcknowledgeRequest(group_id=self.group_id, member_id=member_id, lease_ms=lease_ms,
                                               topics=_wire_topics(ranges))
        return request, [outcome for outcome, _ in ranges]

    def _take_pending(self) -> tuple[tuple[wire.ShareAcknowledgeTopic, ...], list[AcknowledgeOutcome]]:
        pending, self._pending = self._pending, []
        ranges = _ranges_of_spans(pending)
        return _wire_topics(ranges), [outcome for outcome, _ in ranges]

    def fetch_completed(self, response: wire.ShareFetchResponse, sent: list[AcknowledgeOutcome]
                        ) -> tuple[list[ShareMessage], list[AcknowledgeOutcome]]:
        """The records leased by a fetch reply, and the outcomes of the acknowledgements it carried.

        A partition's error (a refusal, a batch that does not decode) waits in ``raise_failure``: the records of
        the other partitions and batches are returned all the same (leased to this consumer, they would otherwise
        be held by nobody until their leases end), and so are the outcomes."""
        messages: list[ShareMessage] = []
        with collector_paused():
            for topic in response.topics:
                for partition in topic.partitions:
                    try:
                        if partition.error_code:
                            raise error_for_code(partition.error_code, partition.error_message or "")
                        decode_leased(topic.name, partition.partition_index, partition.records,
                                      partition.acquired_records, messages)
                    except BrokerError as error:  # CorruptMessageError among them
                        self._hold_failure(error)
        return messages, outcomes_of(response.acknowledgements, sent)

    def report(self, outcomes: list[AcknowledgeOutcome]) -> None:
        """Tell ``on_acknowledged`` of ``outcomes`` (if any)."""
        if outcomes and self.on_acknowledged is not None:
            self.on_acknowledged(outcomes)

    def hand_over(self, messages: list[ShareMessage], outcomes: list[AcknowledgeOutcome]) -> list[ShareMessage]:
        """Report a fetch's ``outcomes`` and return its leased ``messages`` for the poll; should the application's
        callback raise, the messages wait for ``take_held`` (the next poll returns them: leased to this consumer,
        they would otherwise be held by nobody until their leases end)."""
        self._held = messages
        self.report(outcomes)
        self._held = []
        return messages

    def take_held(self) -> list[ShareMessage]:
        """The records a raising ``hand_over`` kept (the poll returns them before fetching again)."""
        held, self._held = self._held, []
        return held

    def acknowledge_completed(self, response: wire.ShareAcknowledgeResponse,
                              sent: list[AcknowledgeOutcome]) -> list[AcknowledgeOutcome]:
        """The outcomes of an acknowledge request."""
        return outcomes_of(response.topics, sent)


def failed_outcomes(sent: list[AcknowledgeOutcome], error: BrokerError) -> list[AcknowledgeOutcome]:
    """Every range of a request that got no answer: it may or may not have been applied."""
    return [dataclasses.replace(outcome, error=error) for outcome in sent]


def outcomes_of(results: Iterable[wire.ShareAcknowledgeTopicResult], sent: list[AcknowledgeOutcome]
                ) -> list[AcknowledgeOutcome]:
    """The sent ranges with the broker's verdict on each (a range it did not mention failed)."""
    codes = {(topic.name, partition.partition_index, batch.first_offset, batch.last_offset):
             (batch.error_code, batch.error_message)
             for topic in results for partition in topic.partitions for batch in partition.batches}
    outcomes = []
    for outcome in sent:
        code, message = codes.get((outcome.topic, outcome.partition, outcome.first_offset, outcome.last_offset),
                                  (int(NotCoordinatorError.code), "the broker did not answer for this range"))
        outcomes.append(dataclasses.replace(outcome, error=error_for_code(code, message or "") if code else None))
    return outcomes


def _ranges(pending: list[tuple[str, int, int, AcknowledgeType, str]]) -> list[tuple[AcknowledgeOutcome, str]]:
    """Consecutive offsets of one partition with one kind and error, as ranges (the last verdict per offset wins)."""
    latest = {(topic, partition, offset): (kind, error) for topic, partition, offset, kind, error in pending}
    spans: list[list] = []  # [topic, partition, first, last, kind, error]: one object per range, not per offset
    for (topic, partition, offset), (kind, error) in sorted(latest.items()):
        if spans:
            span = spans[-1]
            if span[3] + 1 == offset and span[0] == topic and span[1] == partition and span[4] is kind \
                    and span[5] == error:
                span[3] = offset
                continue
        spans.append([topic, partition, offset, offset, kind, error])
    return [(AcknowledgeOutcome(topic, partition, first, last, kind), error)
            for topic, partition, first, last, kind, error in spans]


def _ranges_of_spans(spans: list[list[Any]]) -> list[tuple[AcknowledgeOutcome, str]]:
    """Queued spans as ranges: as they are when they lie apart in order, else merged offset by offset (the last
    verdict per offset wins)."""
    ends: dict[tuple[str, int], int] = {}
    ordered = True
    for topic, partition, first, last, _, _ in spans:
        if ends.get((topic, partition), -1) >= first:
            ordered = False
            break
        ends[topic, partition] = last
    if ordered:
        return [(AcknowledgeOutcome(topic, partition, first, last, kind), error)
                for topic, partition, first, last, kind, error in spans]
    return _ranges([(topic, partition, offset, kind, error) for topic, partition, first, last, kind, error in spans
                    for offset in range(first, last + 1)])


def _wire_topics(ranges: list[tuple[AcknowledgeOutcome, str]]) -> tuple[wire.ShareAcknowledgeTopic, ...]:
    by_partition: dict[tuple[str, int], list[wire.ShareAcknowledgementBatch]] = {}
    for outcome, error in ranges:
        by_partition.setdefault((outcome.topic, outcome.partition), []).append(wire.ShareAcknowledgementBatch(
            first_offset=outcome.first_offset, last_offset=outcome.last_offset, acknowledge_type=int(outcome.kind),
            error=error or None))
    by_topic: dict[str, list[wire.ShareAcknowledgePartition]] = {}
    for (topic, partition), batches in by_partition.items():
        by_topic.setdefault(topic, []).append(wire.ShareAcknowledgePartition(partition_index=partition,
                                                                            batches=tuple(batches)))
    return tuple(wire.ShareAcknowledgeTopic(name=name, partitions=tuple(parts)) for name, parts in by_topic.items())


def decode_leased(topic: str, partition: int, data: bytes | memoryview, acquired: Sequence[wire.AcquiredRecords],
                  into: list[ShareMessage]) -> None:
    """Append the records of ``data`` that lie in ``acquired`` to ``into``, with their delivery counts.

    A batch that does not decode is passed over (its records stay leased until the lease ends) and the others are
    appended; then ``CorruptMessageError`` is raised for it."""
    if not acquired:
        return
    ranges = sorted(acquired, key=lambda r: r.first_offset)
    firsts = [r.first_offset for r in ranges]
    low, high = firsts[0], max(r.last_offset for r in ranges)
    view = memoryview(data)
    unreadable: CorruptRecordError | None = None
    try:
        for position, header in iter_batches(view, check=False):
            if header.is_control or header.last_offset < low or header.base_offset > high:
                continue
            try:
                _decode_leased_batch(topic, partition, view[position : position + header.size_bytes], header,
                                     ranges, firsts, into)
            except CorruptRecordError as error:
                unreadable = unreadable or error
    except CorruptRecordError as error:  # the framing itself: nothing after it can be read
        unreadable = unreadable or error
    if unreadable is not None:
        raise CorruptMessageError(f"share fetch data for {topic}-{partition} is corrupt: {unreadable}") from unreadable


def _decode_leased_batch(topic: str, partition: int, batch: memoryview, header: BatchHeader,
                         ranges: list[wire.AcquiredRecords], firsts: list[int], into: list[ShareMessage]) -> None:
    """Append ``batch``'s records that lie in ``ranges`` (sorted, their first offsets in ``firsts``) to ``into``;
    nothing when it does not decode."""
    slot = bisect.bisect_right(firsts, header.base_offset) - 1
    if slot >= 0 and ranges[slot].last_offset >= header.last_offset:
        # One range holds the whole batch (the usual case): build the messages directly.
        count = ranges[slot].delivery_count
        into += decode_records_as(
            batch, lambda offset, key, value, headers, timestamp, count=count: ShareMessage(
                topic, partition, offset, key, value, headers, timestamp, count))
        return
    records = decode_rows(batch, _Leased, (topic, partition))
    for record in records:
        slot = bisect.bisect_right(firsts, record.offset) - 1
        if slot >= 0 and record.offset <= ranges[slot].last_offset:
            into.append(ShareMessage(*record, ranges[slot].delivery_count))


class _Leased(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
