"""One push subscription's deliveries: the broker is the share group's consumer and POSTs each record.

Runs on the broker hosting the group, as its member ``push``: it acquires records (leased for the
ack deadline plus a margin) while fewer than ``push.max.outstanding`` POSTs are in flight and the
rate limit allows, POSTs each record (or a batch), and settles it by the answer: a 2xx accepts it;
anything else, a timeout or a connection error releases it to come back after an exponential
backoff with full jitter, counting a delivery. Past ``max.delivery.attempts`` the share group
dead-letters it. Records the filter does not want are accepted unseen. Since delivery is the
share-group state, it is at least once across a broker's crash or a failover: a record's lease
dies with the broker, and the new host delivers it again.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from twisted.internet.defer import CancelledError, TimeoutError
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker.model import AcknowledgeType
from mqbroker.records.decoder import decode_records
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import iter_batches
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


class PushHost(Protocol):
    """What the dispatcher needs from the share service hosting its group (``ShareService``)."""

    def push_acquire(self, group: HostedGroup, member_id: str, records_max: int,
                     lease_ms: int) -> list[m.SharePartitionRecords]: ...

    def push_settle(self, group: HostedGroup, member_id: str, acknowledgements: Sequence[m.Acknowledgement], *,
                    lease_ms: int, available_at_ms: int = 0) -> Any: ...


def leased_deliveries(records: m.SharePartitionRecords) -> list[Delivery]:
    """The acquired records of one partition's answer, decoded, with their delivery counts as attempts."""
    counts = {offset: acquired.delivery_count for acquired in records.acquired
              for offset in range(acquired.first, acquired.last + 1)}
    deliveries = []
    data = records.records
    try:
        for position, header in iter_batches(data, check=False):
            if header.is_control:
                continue
            for record in decode_records(data[position : position + header.size_bytes]):
                attempt = counts.get(record.offset)
                if attempt is not None:
                    deliveries.append(Delivery(records.topic, records.partition, record, attempt))
    except CorruptRecordError:
        pass  # what does not decode cannot be pushed; its lease ends and it comes back to the limit
    return deliveries


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
        self._outstanding = 0
        self._pumping = False
        self._timer: IDelayedCall | None = None
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
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
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
                self._deliver([delivery for answer in answers for delivery in leased_deliveries(answer)], per_post)
        finally:
            self._pumping = False

    def _deliver(self, deliveries: list[Delivery], per_post: int) -> None:
        wanted, unwanted = [], []
        for delivery in deliveries:
            record = delivery.record
            (wanted if self._filter.matches(record.key, record.headers) else unwanted).append(delivery)
        if unwanted:
            self._settle(unwanted, AcknowledgeType.ACCEPT)
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
            self._settle(deliveries, AcknowledgeType.ACCEPT)
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
        self._pump()

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
        acknowledgements = [m.Acknowledgement(topic=d.topic, partition=d.partition, first_offset=d.record.offset,
                                              last_offset=d.record.offset, kind=kind, error=error)
                            for d in deliveries]
        settled = self._host.push_settle(self._group, PUSH_MEMBER, acknowledgements, lease_ms=self._lease_ms,
                                         available_at_ms=available_at_ms)
        settled.addErrback(lambda failure: self.log.warn(
            "push subscription {group}: storing {count} verdict(s) failed ({error}); the records come back when "
            "their leases end", group=self._group.group_id, count=len(acknowledgements),
            error=failure.getErrorMessage()))


def dispatcher_factory(reactor: Any) -> Callable[[HostedGroup, PushHost], PushDispatcher]:
    """Builds each push subscription's dispatcher with its own HTTP connection pool."""

    def build(group: HostedGroup, host: PushHost) -> PushDispatcher:
        settings = group.settings.push
        assert settings is not None
        sender = PushSender(reactor, endpoint=settings.endpoint, connections_max=settings.max_outstanding,
                            ca_file=settings.ca_file)
        return PushDispatcher(group, host, sender=sender, clock=reactor, rng=random.Random())

    return build
