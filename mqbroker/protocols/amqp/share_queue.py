"""Share queues: an AMQP queue whose consumers are members of the share group over its log (issue 20, phase 2).

A queue declared with ``x-queue-type: share`` keeps no state of its own: its log topic
``queue_topic(name)`` is read by the share group of the same name (created with the queue:
``auto.offset.reset`` earliest, ``x-delivery-limit`` as ``max.delivery.attempts``), so leases,
delivery counts, lease expiry, delays and dead letters are the share group's (``mqbroker.shares``),
durable in ``__share_group_state`` and the same for every protocol. Each AMQP consumer is one
member of the group: it fetches no more than its prefetch window allows, a record comes out with
``redelivered`` set when its delivery count is above one, and ``basic.ack`` / ``basic.nack`` or
``basic.reject`` with requeue / without settle it as accept / release / reject. A native
``ShareConsumer`` of the group competes for the same messages. ``basic.get`` joins the group as a
member of its own for the channel, acquires one message (waiting up to
``amqp_share_get_wait_ms_max`` for the group to read what was just published, ``get-empty`` after
that), and leaves once the channel settled what it took.

RabbitMQ's queue vocabulary maps onto the group (docs/queues.md "AMQP share queues"): message
counts are the group's ready records (``share_view.py``); ``queue.purge`` acquires and accepts
every available record; ``x-message-ttl`` / ``expiration`` are checked when a record is acquired,
and a head reaper expires a queue nobody consumes; a rejected or expired message goes through
``x-dead-letter-exchange`` with ``x-death`` and is accepted once its copy is durable (rejected in the
group without one).

``x-delay`` in a message's headers (milliseconds, as RabbitMQ's delayed-message plugin reads it)
is stored as the record header the share group schedules by: the message is delivered once its
time comes. ``x-max-length`` (drop-head) is the group's ``max.ready.records``: the group's host drops
the oldest ready messages beyond it, counting what it has not read yet, whichever broker they were
published through. With ``x-overflow`` reject-publish or reject-publish-dlx the queue keeps its oldest
messages instead: each broker judges the publishes it receives before appending them
(``share_admission.py``) and rejects those beyond ``x-max-length`` (nacked with confirms).
``x-expires``: the host counts how long the group has had no member, a redeclaration joins and
leaves, and each broker's housekeeping deletes the queue once that reached it. The dead letters the host decides on (``maxlen``, ``delivery_limit``) reach the dead-letter
exchange through the queue's dead-letter topic (``share_dead_letters.py``); without one they are
dropped, and counted.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred

from mqbroker import errors, limits
from mqbroker.model import AcknowledgeType
from mqbroker.protocols.amqp.appender import BatchStored
from mqbroker.protocols.amqp.queue_arguments import DeathReason, QueuePolicy
from mqbroker.protocols.amqp.queue_state import is_expired
from mqbroker.protocols.amqp.queues import ConsumerKey, QueueHost
from mqbroker.protocols.amqp.share_admission import PublishGate
from mqbroker.protocols.amqp.share_arguments import delay_header
from mqbroker.protocols.amqp.share_consumers import ShareGroupMembers, broker_member_key
from mqbroker.protocols.amqp.share_dead_letters import DeadLetterForwarding
from mqbroker.protocols.amqp.share_view import ready_messages, records_past_ttl
from mqbroker.protocols.amqp.stored import MessageRow, QueueDeclaration
from mqbroker.shares import messages as share


class ShareQueue(ShareGroupMembers):
    """An AMQP queue served by the share group of its log topic."""

    def __init__(self, host: QueueHost, declaration: QueueDeclaration, owner: int | None) -> None:
        policy = QueuePolicy.from_arguments(declaration.arguments)
        #: Routes the dead letters the group's host decides on (maxlen, delivery_limit) through the dead-letter
        #: exchange (set before the group is created: its topic and group come first).
        self._dead_letters = None if policy.dead_letter_exchange is None else DeadLetterForwarding(
            host, declaration.name, policy, host.republish_dead)
        super().__init__(host, declaration, owner)
        #: x-overflow reject-publish(-dlx): publishes are judged against x-max-length before they are appended.
        self._gate = PublishGate(host, self.name, policy, self._appender, self._ready_messages) if (
            policy.max_length is not None and policy.overflow.rejects_publish) else None

    async def ensure_group(self) -> None:
        """Create the share group unless it exists (with a dead-letter exchange, its dead-letter topic and group
        first: the group names the topic)."""
        if self._dead_letters is not None and not self._group_created:
            await self._dead_letters.ensure_group()
        await super().ensure_group()

    async def delete_group(self) -> None:
        """Delete the share group (and the dead-letter topic and group) once the members left."""
        await super().delete_group()
        if self._dead_letters is not None:
            await self._dead_letters.delete()

    @property
    def message_count(self) -> int:
        """Not known here at once: ``ready_count`` asks the share group."""
        return 0

    async def ready_count(self) -> int:
        """Ready messages: available in the share group's region plus the log it has not read yet, at most
        ``x-max-length`` with drop-head (0, logged, when the group's host cannot be asked)."""
        await self._drained()  # a publish before this on the connection is counted
        try:
            ready = await self._ready_messages()
        except errors.BrokerError as error:
            self.log.warn("AMQP share queue {queue}: its message count is not known now ({error}); 0 reported",
                          queue=self.name, error=error)
            return 0
        if self.policy.max_length is None or self._gate is not None:
            return ready  # a queue that rejects publishes may be over by what brokers admitted at once (queues.md)
        # The group's host drops the heads beyond x-max-length as it counts what it has not read yet: never more.
        return min(ready, self.policy.max_length)

    async def _ready_messages(self) -> int:
        return await ready_messages(self.host.broker, self.host.principal, self.group_id, self.topic)

    async def _drained(self) -> None:
        """Every publish so far through this broker is in the log (or refused, or rejected at x-max-length)."""
        await (self._gate.drained() if self._gate is not None else self._appender.drained())

    def abandon_appends(self) -> None:
        """The queue was deleted: publishes waiting for their verdict are rejected, appends not yet durable refused."""
        if self._gate is not None:
            self._gate.abandon()
        super().abandon_appends()

    def append(self, timestamp_ms: int, exchange: str, routing_key: str, properties_raw: bytes, body: bytes,
               expiration: str | None) -> BatchStored:
        """Store a message, with ``x-delay`` as the record header the share group schedules by (judged first against
        x-max-length if the queue rejects publishes when full)."""
        if self._gate is not None:
            return self._gate.append(timestamp_ms, exchange, routing_key, properties_raw, body, expiration)
        return self._appender.append(timestamp_ms, exchange, routing_key, properties_raw, body, expiration,
                                     extra_headers=delay_header(properties_raw))

    @property
    def takes_runs(self) -> bool:  # type: ignore[override]
        """Not while publishes wait for x-max-length's verdict one by one (``share_admission.py``)."""
        return self._gate is None

    def append_run(self, timestamp_ms: int, exchange: str, routing_key: str, properties_raw: bytes,
                   bodies: list[bytes], expiration: str | None) -> BatchStored:
        """``append`` of messages alike but for their bodies, in order, into one batch (never through the gate)."""
        assert self._gate is None, "publishes the gate judges are appended one by one"
        return self._appender.append_run(timestamp_ms, exchange, routing_key, properties_raw, bodies, expiration,
                                         extra_headers=delay_header(properties_raw))

    async def purge(self) -> int:
        """queue.purge: acquire and accept every available message as a member of the group (unacknowledged
        deliveries stay); how many."""
        await self._drained()  # a publish before the purge on the connection is purged
        key = broker_member_key("purge")
        purged = 0
        try:
            while not self.deleted:
                member = await self._member_for(key)
                answer = await self.host.broker.share_fetch(self.host.principal, share.ShareFetchRequest(
                    group_id=self.group_id, member_id=member.member_id, records_max=limits.share_fetch_records_max,
                    wait_ms_max=limits.amqp_share_get_wait_ms_max))
                ranges = []
                for partition in answer.partitions:
                    if partition.error is not None:
                        raise partition.error
                    ranges += [(acquired.first, acquired.last) for acquired in partition.acquired]
                if not ranges:
                    break
                await self._acknowledge_ranges(member, ranges, AcknowledgeType.ACCEPT)
                purged += sum(last - first + 1 for first, last in ranges)
        finally:
            self._leave_when_settled([key])
        return purged

    def housekeep(self, now_ms: int) -> None:
        """Route the host's dead letters through the dead-letter exchange; expire what ``x-message-ttl`` ended at the
        head (leases and delays expire in the share group itself)."""
        if self.deleted:
            return
        if self._dead_letters is not None and not self._dead_letters.running:
            self._dead_letters.running = True
            forwarding = Deferred.fromCoroutine(self._dead_letters.forward())
            forwarding.addErrback(lambda failure: self.log.warn(
                "AMQP share queue {queue}: routing dead letters through {exchange} failed ({error}); tried again in a "
                "moment", queue=self.name, exchange=self.policy.dead_letter_exchange, error=failure.getErrorMessage()))
            forwarding.addBoth(lambda _: setattr(self._dead_letters, "running", False))
        if self.policy.message_ttl_ms is None or self._expiring:
            return
        self._expiring = True
        expiring = Deferred.fromCoroutine(self._expire_head(now_ms - self.policy.message_ttl_ms))
        expiring.addErrback(lambda failure: self.log.warn(
            "AMQP share queue {queue}: expiring messages failed ({error}); tried again in a moment",
            queue=self.name, error=failure.getErrorMessage()))
        expiring.addBoth(lambda _: setattr(self, "_expiring", False))

    async def _expire_head(self, cutoff_ms: int) -> None:
        """Acquire the records stored before ``cutoff_ms`` that the group has not settled and expire them (one
        that turns out alive is released)."""
        records_max = await records_past_ttl(self.host.broker, self.host.principal, self.group_id, self.topic,
                                             cutoff_ms)
        if not records_max:
            return
        key = broker_member_key("expiry")
        try:
            member, leased, _ = await self._take(key, min(records_max, limits.share_fetch_records_max))
            now_ms = self.host.now_ms()
            expired = [message for message in leased if is_expired(self.policy, message, now_ms)]
            alive = [message.offset for message in leased if not is_expired(self.policy, message, now_ms)]
            if alive:
                self._acknowledge(member, alive, AcknowledgeType.RELEASE, error="not expired")
            if expired:
                self._dead_letter(member, expired, DeathReason.EXPIRED)
        finally:
            self._leave_when_settled([key])

    async def get(self, key: ConsumerKey) -> tuple[MessageRow, bool] | None:
        """basic.get: acquire one message for the channel ``key`` as a member of the group (None: none came in time;
        expired ones met on the way are dead-lettered).

        The member leaves once the channel settled everything it took (at once when nothing came).
        """
        await self._drained()  # a publish before this get on the connection must be visible to it
        try:
            while not self.deleted:
                member, leased, redelivered = await self._take(key, 1)
                assert len(leased) <= 1, "a fetch of one record acquired more"
                if not leased:
                    return None
                [message] = leased
                if is_expired(self.policy, message, self.host.now_ms()):
                    self._dead_letter(member, [message], DeathReason.EXPIRED)
                    continue
                self._hold(key, [message], [message.offset])
                return message, message.offset in redelivered
            return None
        finally:
            self._leave_when_settled([key])

    async def touch(self) -> None:
        """A redeclaration uses an ``x-expires`` queue: a member of the broker's own joins and leaves its share
        group, so the group's host counts the queue's unused time from now (a failure is logged)."""
        if self.policy.expires_ms is None or self.deleted:
            return
        key = broker_member_key("declare")
        try:
            await self._member_for(key)
        except errors.BrokerError as error:
            self.log.warn("AMQP share queue {queue}: its redeclaration did not reach its share group ({error}); "
                          "its x-expires counts from its last use before", queue=self.name, error=error)
        finally:
            self._leave_when_settled([key])

    async def unused_past_expiry(self) -> bool:
        """Whether ``x-expires`` ended this queue: its share group's host has counted it without members (no
        consumer, no basic.get, no redeclaration, through any broker) that long."""
        if self.policy.expires_ms is None or self.deleted or self.consumers:
            return False
        try:
            described = await self.host.broker.describe_share_group(self.host.principal, self.group_id)
        except errors.BrokerError:
            return False  # not known now: asked again at the next housekeeping
        return described.unused_ms >= self.policy.expires_ms
