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
that), and leaves once the channel settled what it took; its ``message_count`` is 0 (the group's
describe shows the depth).

``x-delay`` in a message's headers (milliseconds, as RabbitMQ's delayed-message plugin reads it)
is stored as the record header the share group schedules by: the message is delivered once its
time comes. Not on share queues: ``queue.purge``, ``x-message-ttl``, ``x-max-length``
and dead-letter exchanges (the group's ``dead.letter.topic`` config takes dead letters).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from typing import Any

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.interfaces import IDelayedCall

from mqbroker import errors, limits
from mqbroker.model import AcknowledgeType
from mqbroker.protocols.amqp.actions import Outcome
from mqbroker.protocols.amqp.appender import BatchStored
from mqbroker.protocols.amqp.codec import decode_properties
from mqbroker.protocols.amqp.queue_arguments import QueuePolicy
from mqbroker.protocols.amqp.queue_state import QueuedMessage
from mqbroker.protocols.amqp.queues import (
    BaseQueue,
    Consumer,
    ConsumerKey,
    QueueHost,
    decode_fetched,
    delivery_of,
)
from mqbroker.protocols.amqp.spec import AmqpError, ReplyCode
from mqbroker.protocols.amqp.stored import QueueDeclaration
from mqbroker.shares import messages as share
from mqbroker.shares.delays import DELAY_HEADER

#: Arguments a share queue refuses: the share group has no such per-queue behaviour.
UNSUPPORTED_ARGUMENTS = ("x-message-ttl", "x-max-length", "x-dead-letter-exchange", "x-dead-letter-routing-key",
                         "x-expires")
_OUTCOMES = {Outcome.ACK: AcknowledgeType.ACCEPT, Outcome.REQUEUE: AcknowledgeType.RELEASE,
             Outcome.DISCARD: AcknowledgeType.REJECT}


def check_share_arguments(arguments: Mapping[str, Any]) -> None:
    """406 for an argument a share queue cannot honour, naming it."""
    refused = sorted(name for name in UNSUPPORTED_ARGUMENTS if arguments.get(name) is not None)
    if refused:
        raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"{', '.join(refused)} not supported on share queues "
                        "(x-queue-type share); configure the share group instead", class_id=50, method_id=10)


def takes_share_default(*, durable: bool, exclusive: bool, auto_delete: bool, arguments: Mapping[str, Any]) -> bool:
    """Whether a declaration may become a share queue under ``amqp_default_queue_type = share``: it names no
    type, and nothing in it needs a classic queue (non-durable, exclusive or auto-deleted queues live with a
    connection on one broker; arguments a share queue refuses)."""
    return (arguments.get("x-queue-type") is None and durable and not exclusive and not auto_delete
            and not any(arguments.get(name) is not None for name in UNSUPPORTED_ARGUMENTS))


def share_group_configs(arguments: Mapping[str, Any]) -> dict[str, str]:
    """The configs of a share queue's share group, from its declaration's arguments."""
    configs = {"auto.offset.reset": "earliest"}
    delivery_limit = QueuePolicy.from_arguments(arguments).delivery_limit
    if delivery_limit:
        configs["max.delivery.attempts"] = str(min(delivery_limit, limits.share_delivery_attempts_max))
    return configs


def delay_header(properties_raw: bytes) -> tuple[tuple[str, bytes], ...]:
    """The record header scheduling a message whose ``x-delay`` header is a positive number of ms (else none)."""
    try:
        headers = decode_properties(properties_raw).headers or {}
    except AmqpError:
        return ()
    delay = headers.get(DELAY_HEADER)
    if isinstance(delay, bytes):
        delay = delay.decode("ascii", "replace")
    if isinstance(delay, str) and delay.isdigit():
        delay = int(delay)
    if isinstance(delay, bool) or not isinstance(delay, int) or delay <= 0:
        return ()
    return ((DELAY_HEADER, str(delay).encode("ascii")),)


@dataclasses.dataclass(slots=True)
class _Member:
    """One AMQP consumer (or one channel's ``basic.get``) as a member of the queue's share group."""

    key: ConsumerKey
    #: None for a ``basic.get`` member: it never fetches by itself.
    consumer: Consumer | None
    member_id: str = ""
    epoch: int = 0
    heartbeat_ms: int = 1_000
    heartbeat: IDelayedCall | None = None
    fetching: bool = False
    #: Consuming (fetching). A cancelled consumer stays a member, without fetching, until its channel
    #: settled what it was given (AMQP lets a channel ack after basic.cancel).
    attached: bool = True


class ShareQueue(BaseQueue):
    """An AMQP queue served by the share group of its log topic."""

    def __init__(self, host: QueueHost, declaration: QueueDeclaration, owner: int | None) -> None:
        check_share_arguments(declaration.arguments)
        super().__init__(host, declaration, owner)
        self.group_id = self.topic
        self._configs = share_group_configs(declaration.arguments)
        self._members: dict[ConsumerKey, _Member] = {}
        #: Who holds each delivered, unsettled offset (settlements come by offset, per queue).
        self._holders: dict[int, ConsumerKey] = {}
        self._group_created = False
        self._leaving: list[Deferred[Any]] = []
        Deferred.fromCoroutine(self.ensure_group()).addErrback(
            lambda failure: self.log.warn("AMQP share queue {queue}: share group {group} not created yet ({error}); "
                                          "its first consumer tries again", queue=self.name, group=self.group_id,
                                          error=failure.getErrorMessage()))

    @property
    def message_count(self) -> int:
        """Not counted here (the share group's describe shows available, acquired and lag)."""
        return 0

    def append(self, timestamp_ms: int, exchange: str, routing_key: str, properties_raw: bytes, body: bytes,
               expiration: str | None) -> BatchStored:
        """Store a message, with ``x-delay`` as the record header the share group schedules by."""
        return self._appender.append(timestamp_ms, exchange, routing_key, properties_raw, body, expiration,
                                     extra_headers=delay_header(properties_raw))

    async def ensure_group(self) -> None:
        """Create the share group unless it exists (a consumer joining without it would create one that
        starts at the log's end)."""
        if self._group_created:
            return
        try:
            await self.host.broker.create_share_group(self.host.principal, self.group_id, [self.topic], self._configs)
        except errors.DuplicateResourceError:
            pass
        self._group_created = True

    # -- consumers -------------------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        """Join the share group as this consumer, then fetch within its window."""
        self.consumers[consumer.key] = consumer
        self.had_consumers = True
        member = _Member(key=consumer.key, consumer=consumer)
        self._members[consumer.key] = member
        Deferred.fromCoroutine(self._join(member)).addErrback(self._member_failed, member)

    async def _join(self, member: _Member) -> None:
        await self.ensure_group()
        await self._heartbeat(member)
        self._fetch(member)

    def _is_member(self, member: _Member) -> bool:
        return self._members.get(member.key) is member and not self.deleted

    async def _heartbeat(self, member: _Member) -> None:
        member.heartbeat = None
        if not self._is_member(member):
            return
        answer = await self.host.broker.share_group_heartbeat(self.host.principal, share.ShareHeartbeatRequest(
            group_id=self.group_id, member_id=member.member_id, member_epoch=member.epoch,
            client_id=f"amqp:{self.name}", topics=(self.topic,)))
        member.member_id, member.epoch = answer.member_id, answer.member_epoch
        member.heartbeat_ms = max(100, answer.heartbeat_interval_ms)
        if self._is_member(member):
            member.heartbeat = self.host.reactor.callLater(member.heartbeat_ms / 1000, self._heartbeat_again, member)
        else:
            self._leave(member)  # dropped while joining

    def _heartbeat_again(self, member: _Member) -> None:
        Deferred.fromCoroutine(self._heartbeat(member)).addErrback(self._member_failed, member)

    def remove_consumer(self, key: ConsumerKey) -> None:
        """basic.cancel (or a closed channel): stop fetching; leave the group once nothing given is unsettled
        (leaving releases what the member still holds to the others)."""
        self.consumers.pop(key, None)
        member = self._members.get(key)
        if member is not None:
            member.attached = False
            self._leave_when_settled([key])

    def _leave_when_settled(self, keys: list[ConsumerKey]) -> None:
        """Drop the cancelled members among ``keys`` that hold nothing unsettled any more."""
        holding = set(self._holders.values())
        for key in keys:
            member = self._members.get(key)
            if member is not None and not member.attached and key not in holding:
                self._drop(member)

    def _drop(self, member: _Member) -> None:
        del self._members[member.key]
        if member.heartbeat is not None and member.heartbeat.active():
            member.heartbeat.cancel()
        if member.member_id:
            self._leave(member)

    def _leave(self, member: _Member) -> None:
        left = self.host.broker.share_group_heartbeat(self.host.principal, share.ShareHeartbeatRequest(
            group_id=self.group_id, member_id=member.member_id, member_epoch=-1))
        left.addErrback(lambda failure: self.log.warn("AMQP share queue {queue}: leaving failed ({error}); its "
                                                      "leases end by themselves", queue=self.name,
                                                      error=failure.getErrorMessage()))
        self._leaving.append(left)
        left.addBoth(lambda result: (self._leaving.remove(left), result)[1])

    def detach_all(self) -> None:
        """The queue was deleted (its consumers cancelled): every member leaves the group."""
        self.consumers.clear()
        self._holders.clear()
        for member in list(self._members.values()):
            member.attached = False
            self._drop(member)

    async def delete_group(self) -> None:
        """Delete the share group once the members left (a failure is logged: the group then outlives the queue)."""
        await DeferredList(list(self._leaving))
        try:
            await self.host.broker.delete_share_group(self.host.principal, self.group_id)
        except errors.BrokerError as error:
            self.log.warn("AMQP share queue {queue}: deleting share group {group} failed: {error}; delete it with "
                          "`mqbroker share-groups delete {group}`", queue=self.name, group=self.group_id, error=error)

    def _member_failed(self, failure: Any, member: _Member) -> None:
        if not member.attached or not self._is_member(member):
            return
        self.log.warn("AMQP share queue {queue}: consumer {key}: {error}; joining again in 1 s", queue=self.name,
                      key=member.key, error=failure.getErrorMessage())
        member.member_id, member.epoch, member.fetching = "", 0, False
        if member.heartbeat is not None and member.heartbeat.active():
            member.heartbeat.cancel()
        member.heartbeat = self.host.reactor.callLater(1.0, self._rejoin, member)

    def _rejoin(self, member: _Member) -> None:
        member.heartbeat = None
        if member.attached and self._is_member(member):
            Deferred.fromCoroutine(self._join(member)).addErrback(self._member_failed, member)

    # -- delivering ------------------------------------------------------------------------------

    def dispatch(self) -> None:
        """Fetch for every member whose window has room (after acks reopened it, for instance)."""
        for member in list(self._members.values()):
            self._fetch(member)

    def _fetch(self, member: _Member) -> None:
        if member.fetching or not member.attached or not member.epoch or self.deleted or member.consumer is None:
            return
        window = min(member.consumer.window(), limits.share_fetch_records_max)
        if window <= 0:
            return  # the next settle or basic.qos dispatches again
        member.fetching = True
        fetched = self.host.broker.share_fetch(self.host.principal, share.ShareFetchRequest(
            group_id=self.group_id, member_id=member.member_id, records_max=window,
            wait_ms_max=limits.amqp_log_fetch_wait_ms_max))
        fetched.addCallback(self._fetched, member)
        fetched.addErrback(self._member_failed, member)
        fetched.addBoth(self._fetch_finished, member)

    def _fetched(self, answer: share.ShareFetchResponse, member: _Member) -> None:
        consumer = member.consumer
        assert consumer is not None
        delivered = False
        unacknowledged: list[int] = []  # delivered to a no-ack consumer: accepted together below
        for partition in answer.partitions:
            leased = self._leased_releasing_undecoded(member, partition)
            if not member.attached:  # cancelled while fetching: give them back
                self._acknowledge(member, [message.offset for message, _ in leased], AcknowledgeType.RELEASE)
                continue
            for message, delivery_count in leased:
                consumer.session.connection.deliver(consumer.channel, consumer.tag,
                                                    delivery_of(self.name, message, delivery_count > 1))
                delivered = True
                if consumer.no_ack:
                    unacknowledged.append(message.offset)
                else:
                    self._holders[message.offset] = consumer.key
        if unacknowledged:
            self._acknowledge(member, unacknowledged, AcknowledgeType.ACCEPT)
        if delivered:
            consumer.session.flush()

    def _leased_releasing_undecoded(self, member: _Member,
                                    partition: share.SharePartitionRecords) -> list[tuple[QueuedMessage, int]]:
        """The messages one partition's answer leased to ``member`` (its error raised); acquired offsets that did not
        decode go back at once, so the next fetch or get reads them again."""
        if partition.error is not None:
            raise partition.error
        leased, undecoded = _leased(partition)
        if undecoded:
            self._acknowledge(member, undecoded, AcknowledgeType.RELEASE)
        return leased

    def _fetch_finished(self, _: Any, member: _Member) -> None:
        member.fetching = False
        self._fetch(member)

    # -- settling --------------------------------------------------------------------------------

    def settle(self, offsets: list[Hashable], outcome: Outcome) -> None:
        """basic.ack / nack / reject: one acknowledgement per member holding some of ``offsets``."""
        by_member: dict[ConsumerKey, list[int]] = {}
        for offset in offsets:
            holder = self._holders.pop(offset, None)  # type: ignore[arg-type]
            if holder is not None:
                by_member.setdefault(holder, []).append(offset)  # type: ignore[arg-type]
        for holder, held in by_member.items():
            member = self._members.get(holder)
            if member is not None and member.member_id:
                self._acknowledge(member, held, _OUTCOMES[outcome])
        self._leave_when_settled(list(by_member))
        self.dispatch()

    def _acknowledge(self, member: _Member, offsets: list[int], kind: AcknowledgeType) -> None:
        acknowledgements = tuple(share.Acknowledgement(topic=self.topic, partition=0, first_offset=first,
                                                       last_offset=last, kind=kind)
                                 for first, last in _ranges(offsets))
        settled = self.host.broker.share_acknowledge(self.host.principal, share.ShareAcknowledgeRequest(
            group_id=self.group_id, member_id=member.member_id, acknowledgements=acknowledgements))
        settled.addCallback(self._acknowledged)
        settled.addErrback(lambda failure: self.log.warn(
            "AMQP share queue {queue}: settling {count} message(s) failed ({error}); they come back when their "
            "leases end", queue=self.name, count=len(offsets), error=failure.getErrorMessage()))

    def _acknowledged(self, results: tuple[share.AcknowledgeResult, ...]) -> None:
        for result in results:
            if result.error is not None:
                self.log.warn("AMQP share queue {queue}: offsets {first}..{last} not settled ({error}); they come "
                              "back when their leases end", queue=self.name, first=result.first_offset,
                              last=result.last_offset, error=result.error)

    def release(self, holders: set[ConsumerKey]) -> None:
        """These consumers' channel or connection is gone: their members leave (the group releases what they held)."""
        for offset in [offset for offset, holder in self._holders.items() if holder in holders]:
            del self._holders[offset]
        for key in holders:
            member = self._members.get(key)
            if member is not None:
                member.attached = False
        self._leave_when_settled(list(holders))

    def purge(self) -> int:
        """Refused: a share queue's records are the share group's to settle."""
        raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"queue.purge is not supported on share queue '{self.name}'",
                        class_id=50, method_id=30)

    def housekeep(self, now_ms: int) -> None:
        """Leases and delays expire in the share group itself."""

    async def get(self, key: ConsumerKey) -> tuple[QueuedMessage, bool] | None:
        """basic.get: acquire one message for the channel ``key`` as a member of the group (None: none came in time).

        The member leaves once the channel settled everything it took (at once when nothing came).
        """
        await self._appender.drained()  # a publish before this get on the connection must be visible to it
        member = self._members.get(key)
        taken = None
        try:
            if member is None or not member.epoch:
                member = self._members[key] = _Member(key=key, consumer=None, attached=False)
                await self.ensure_group()
                await self._heartbeat(member)
            answer = await self.host.broker.share_fetch(self.host.principal, share.ShareFetchRequest(
                group_id=self.group_id, member_id=member.member_id, records_max=1,
                wait_ms_max=limits.amqp_share_get_wait_ms_max))
            for partition in answer.partitions:
                leased = self._leased_releasing_undecoded(member, partition)
                assert len(leased) <= 1 and not (leased and taken), "a fetch of one record acquired more"
                for message, delivery_count in leased:
                    taken = (message, delivery_count > 1)
                    self._holders[message.offset] = key
        finally:
            self._leave_when_settled([key])
        return taken


def _leased(partition: share.SharePartitionRecords) -> tuple[list[tuple[QueuedMessage, int]], list[int]]:
    """The acquired messages of one partition's answer with their delivery counts, in offset order; and the
    acquired offsets not decoded (past the fetch's decompression budget, or in a batch that does not decode)."""
    counts = {offset: acquired.delivery_count for acquired in partition.acquired
              for offset in range(acquired.first, acquired.last + 1)}
    messages, _ = decode_fetched(partition.records, topic=partition.topic)
    leased = [(message, counts.pop(message.offset)) for message in messages if message.offset in counts]
    return leased, sorted(counts)


def _ranges(offsets: list[int]) -> list[tuple[int, int]]:
    """Sorted offsets as consecutive ``(first, last)`` ranges."""
    ranges: list[list[int]] = []
    for offset in sorted(set(offsets)):
        if ranges and ranges[-1][1] + 1 == offset:
            ranges[-1][1] = offset
        else:
            ranges.append([offset, offset])
    return [(first, last) for first, last in ranges]
