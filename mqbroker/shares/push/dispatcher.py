"""One push subscription's deliveries: the broker is the share group's consumer and POSTs each record.

Runs on the broker hosting the group, as its member ``push``: it acquires records (leased for the
ack deadline plus a margin) while fewer than ``push.max.outstanding`` POSTs are in flight and the
rate limit allows, POSTs each record (or a batch), and settles it by the answer: a 2xx accepts it;
anything else, a timeout or a connection error releases it to come back after an exponential
backoff with full jitter, counting a delivery. Past ``max.delivery.attempts`` the share group
dead-letters it. Records the filter does not want are accepted unseen. Since delivery is the
share-group state, it is at least once across a broker's crash or a failover: the new host
releases the push member's stored leases at once and delivers those records again.
"""

from __future__ import annotations

import bisect
import random
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from twisted.internet.defer import CancelledError, TimeoutError
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker import limits
from mqbroker.model import AcknowledgeType
from mqbroker.records.decoder import decode_records
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import BatchHeader, iter_batches
from mqbroker.records.record import Record
from mqbroker.shares import messages as m
from mqbroker.shares.group import HostedGroup
from mqbroker.shares.push.filters import parse_filter
from mqbroker.shares.push.http import PushSender
from mqbroker.shares.push.pacing import TokenBucket, retry_delay_ms
from mqbroker.shares.push.signing import Delivery, batch_request, single_request
from mqbroker.shares.settings import PushSettings

#: The member name the broker uses in a push subscription's share group.
PUSH_MEMBER = "push"
#: How much longer than the ack deadline a pushed record stays leased (the answer must be settled).
LEASE_MARGIN_MS = 5_000
#: Records the endpoint accepted are settled together this often: settling (a state change and a replicated
#: state write) per reactor turn cost a fifth of the broker's push work at a few answers per turn.
ACCEPT_INTERVAL_S = 0.005


class PushHost(Protocol):
    """What the dispatcher needs from the share service hosting its group (``ShareService``)."""

    def push_acquire(self, group: HostedGroup, member_id: str, records_max: int,
                     lease_ms: int) -> list[m.SharePartitionRecords]: ...

    def push_settle(self, group: HostedGroup, member_id: str, acknowledgements: Sequence[m.Acknowledgement], *,
                    lease_ms: int, available_at_ms: int = 0) -> Any: ...


class DecodedBatches:
    """The acquired records of share-fetch answers, decoding each batch once while it stays in use.

    The dispatcher acquires as POSTs finish, often one record at a time out of a batch of thousands:
    decoding the whole batch for each (what the records are read from) made pushing cost a batch's
    decoding per record. The last ``limits.push_decoded_batches_max`` decoded batches are kept,
    keyed by where they lie and their CRC (a due record comes back as its own one-record batch).
    """

    def __init__(self, batches_max: int = limits.push_decoded_batches_max) -> None:
        self._batches_max = batches_max
        self._decoded: OrderedDict[tuple[str, int, int, int], tuple[list[int], list[Record]]] = OrderedDict()

    def deliveries(self, records: m.SharePartitionRecords) -> list[Delivery]:
        """The acquired records of one partition's answer, in offset order, with their delivery counts as attempts."""
        ranges = sorted(records.acquired, key=lambda acquired: acquired.first)
        deliveries: list[Delivery] = []
        data = memoryview(records.records)
        try:
            batches = list(iter_batches(data, check=False))
        except CorruptRecordError:
            return []  # what does not frame cannot be pushed; its leases end and the delivery limit settles it
        for position, header in batches:
            if header.is_control or header.last_offset < ranges[0].first or header.base_offset > ranges[-1].last:
                continue
            decoded = self._decode(records.topic, records.partition, header, data[position : position + header.size_bytes])
            if decoded is None:
                continue
            offsets, decoded_records = decoded
            for acquired in ranges:
                low = bisect.bisect_left(offsets, acquired.first)
                high = bisect.bisect_right(offsets, acquired.last)
                deliveries += [Delivery(records.topic, records.partition, record, acquired.delivery_count)
                               for record in decoded_records[low:high]]
        return deliveries

    def _decode(self, topic: str, partition: int, header: BatchHeader,
                batch: memoryview) -> tuple[list[int], list[Record]] | None:
        key = (topic, partition, header.base_offset, header.crc)
        decoded = self._decoded.get(key)
        if decoded is not None:
            self._decoded.move_to_end(key)
            return decoded
        try:
            decoded_records = decode_records(batch)
        except CorruptRecordError:
            return None
        decoded = ([record.offset for record in decoded_records], decoded_records)
        self._decoded[key] = decoded
        if len(self._decoded) > self._batches_max:
            self._decoded.popitem(last=False)
        return decoded


class PushDispatcher:
    """Pushes one subscription's records to its endpoint."""

    log = Logger()

    def __init__(self, group: HostedGroup, host: PushHost, *, sender: PushSender, clock: IReactorTime,
                 rng: random.Random) -> None:
        settings = group.settings.push
        assert settings is not None, "only a group with push.endpoint has a dispatcher"
        self._group = group
        self._host = host
        self._settings: PushSettings = settings
        self._sender = sender
        self._clock = clock
        self._rng = rng
        self._filter = parse_filter(settings.filter)
        self._bucket = TokenBucket(settings.rate_per_second, self._now_ms()) if settings.rate_per_second else None
        self._lease_ms = settings.ack_deadline_ms + LEASE_MARGIN_MS
        self._decoded = DecodedBatches()
        self._outstanding = 0
        self._pumping = False
        self._timer: IDelayedCall | None = None
        self._turn: IDelayedCall | None = None
        self._settling: IDelayedCall | None = None
        self._accepted: list[Delivery] = []
        self._stopped = False
        #: Records an endpoint accepted, and failed attempts (for tests and operators).
        self.delivered = 0
        self.failed_attempts = 0

    def _now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    def start(self) -> None:
        """Deliver from now on: whenever records may be available, and when the rate limit allows again."""
        self._group.watchers.append(self._pump)
        self._pump()

    def stop(self) -> None:
        """Stop acquiring (POSTs in flight finish; their records' leases end with this hosting)."""
        self._stopped = True
        if self._pump in self._group.watchers:
            self._group.watchers.remove(self._pump)
        for call in (self._timer, self._turn, self._settling):
            if call is not None and call.active():
                call.cancel()
        self._sender.close()

    # -- acquiring -------------------------------------------------------------------------------

    def _pump(self) -> None:
        """Acquire and POST while there is room, tokens and records."""
        if self._stopped or self._pumping:
            return
        self._pumping = True
        try:
            while not self._stopped:
                posts = self._settings.max_outstanding - self._outstanding
                if self._bucket is not None:
                    posts = min(posts, self._bucket.available(self._now_ms()))
                    if posts <= 0 and self._outstanding < self._settings.max_outstanding:
                        self._wake_at(self._bucket.next_token_ms(self._now_ms()))
                if posts <= 0:
                    break
                per_post = self._settings.batch_max_messages
                answers = self._host.push_acquire(self._group, PUSH_MEMBER, posts * per_post, self._lease_ms)
                if not answers:
                    break
                self._deliver([delivery for answer in answers for delivery in self._decoded.deliveries(answer)], per_post)
        finally:
            self._pumping = False

    def _deliver(self, deliveries: list[Delivery], per_post: int) -> None:
        wanted, unwanted = [], []
        for delivery in deliveries:
            record = delivery.record
            (wanted if self._filter.matches(record.key, record.headers) else unwanted).append(delivery)
        if unwanted:
            self._accept_soon(unwanted)
        for start in range(0, len(wanted), per_post):
            self._post(wanted[start : start + per_post])

    def _wake_at(self, at_ms: int) -> None:
        if self._timer is None or not self._timer.active():
            self._timer = self._clock.callLater(max(0, at_ms - self._now_ms()) / 1000.0, self._pump)

    # -- posting ---------------------------------------------------------------------------------

    def _post(self, deliveries: list[Delivery]) -> None:
        settings = self._settings
        now_ms = self._now_ms()
        if self._bucket is not None:
            self._bucket.take(1, now_ms)
        subscription = self._group.group_id
        if settings.batch_max_messages == 1:
            request = single_request(deliveries[0], subscription=subscription, secret=settings.secret, now_ms=now_ms)
        else:
            request = batch_request(deliveries, subscription=subscription, secret=settings.secret, now_ms=now_ms)
        self._outstanding += 1
        sent = self._sender.post(request, settings.ack_deadline_ms / 1000)
        sent.addCallbacks(self._answered, self._unanswered, callbackArgs=(deliveries,), errbackArgs=(deliveries,))
        sent.addBoth(self._posted)

    def _answered(self, status: int, deliveries: list[Delivery]) -> None:
        if 200 <= status < 300:
            self.delivered += len(deliveries)
            self._accept_soon(deliveries)
        else:
            self._retry(deliveries, f"the endpoint answered HTTP {status}")

    def _unanswered(self, failure: Failure, deliveries: list[Delivery]) -> None:
        if failure.check(TimeoutError, CancelledError):
            error = f"no answer within {self._settings.ack_deadline_ms} ms"
        else:
            error = f"{type(failure.value).__name__}: {failure.getErrorMessage()}"
        self._retry(deliveries, error)

    def _posted(self, _: Any) -> None:
        self._outstanding -= 1
        self._next_turn_soon()

    # -- one turn of the reactor -----------------------------------------------------------------

    def _accept_soon(self, deliveries: list[Delivery]) -> None:
        self._accepted += deliveries
        self._next_turn_soon()

    def _next_turn_soon(self) -> None:
        """Settle and refill once for all the answers of one reactor turn, not once per answer.

        Answers to many POSTs arrive together; accepting each alone and acquiring one record per
        freed slot cost a state change, an acquisition and a batch lookup per record.
        """
        if self._turn is None and not self._stopped:
            self._turn = self._clock.callLater(0, self._next_turn)

    def _next_turn(self) -> None:
        self._turn = None
        if self._accepted and self._settling is None:
            self._settling = self._clock.callLater(ACCEPT_INTERVAL_S, self._settle_accepted)
        self._pump()

    def _settle_accepted(self) -> None:
        """Settle the records accepted in the last ``ACCEPT_INTERVAL_S``: one state change and write for all."""
        self._settling = None
        accepted, self._accepted = self._accepted, []
        if accepted:
            self._settle(accepted, AcknowledgeType.ACCEPT)

    def _retry(self, deliveries: list[Delivery], error: str) -> None:
        """Release each record to come back after its backoff (the share group counts the attempt)."""
        self.failed_attempts += len(deliveries)
        settings = self._settings
        for delivery in deliveries:
            delay_ms = retry_delay_ms(delivery.attempt, initial_ms=settings.backoff_initial_ms,
                                      max_ms=settings.backoff_max_ms, rng=self._rng)
            self._settle([delivery], AcknowledgeType.RELEASE, error, available_at_ms=self._now_ms() + delay_ms)

    def _settle(self, deliveries: list[Delivery], kind: AcknowledgeType, error: str = "",
                available_at_ms: int = 0) -> None:
        if self._stopped:
            return  # the group moved: these leases ended with the hosting
        acknowledgements = [m.Acknowledgement(topic=topic, partition=partition, first_offset=first, last_offset=last,
                                              kind=kind, error=error)
                            for topic, partition, first, last in _ranges(deliveries)]
        settled = self._host.push_settle(self._group, PUSH_MEMBER, acknowledgements, lease_ms=self._lease_ms,
                                         available_at_ms=available_at_ms)
        settled.addErrback(lambda failure: self.log.warn(
            "push subscription {group}: storing {count} verdict(s) failed ({error}); the records come back when "
            "their leases end", group=self._group.group_id, count=len(acknowledgements),
            error=failure.getErrorMessage()))


def _ranges(deliveries: list[Delivery]) -> list[tuple[str, int, int, int]]:
    """Consecutive offsets of one partition as ``(topic, partition, first, last)`` ranges."""
    ranges: list[list[Any]] = []
    for topic, partition, offset in sorted((d.topic, d.partition, d.record.offset) for d in deliveries):
        if ranges and ranges[-1][:2] == [topic, partition] and ranges[-1][3] + 1 >= offset:
            ranges[-1][3] = max(ranges[-1][3], offset)
        else:
            ranges.append([topic, partition, offset, offset])
    return [(topic, partition, first, last) for topic, partition, first, last in ranges]


def dispatcher_factory(reactor: Any) -> Callable[[HostedGroup, PushHost], PushDispatcher]:
    """Builds each push subscription's dispatcher with its own HTTP connection pool."""

    def build(group: HostedGroup, host: PushHost) -> PushDispatcher:
        settings = group.settings.push
        assert settings is not None
        sender = PushSender(reactor, endpoint=settings.endpoint, connections_max=settings.max_outstanding,
                            ca_file=settings.ca_file)
        return PushDispatcher(group, host, sender=sender, clock=reactor, rng=random.Random())

    return build
