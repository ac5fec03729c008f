"""The members of an AMQP share queue's share group: each consumer (and each channel's ``basic.get``) is one,
heartbeating, fetching within its prefetch window, and settling what it was given by offset ranges.

``ShareQueue`` (``share_queue.py``) builds on this with what concerns the queue as a whole: counts,
purge, expiry, ``basic.get`` and ``x-expires``.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import operator
from collections.abc import Hashable
from itertools import repeat
from typing import Any

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.interfaces import IDelayedCall

from mqbroker import errors, limits
from mqbroker.model import LATEST_TIMESTAMP, AcknowledgeType
from mqbroker.protocols.amqp.actions import Outcome
from mqbroker.protocols.amqp.appender import all_settled
from mqbroker.protocols.amqp.queue_arguments import DeathReason, QueuePolicy
from mqbroker.protocols.amqp.queue_state import is_expired
from mqbroker.protocols.amqp.queues import (
    BaseQueue,
    Consumer,
    ConsumerKey,
    QueueHost,
    RecentBatch,
    decode_fetched_rows,
)
from mqbroker.protocols.amqp.share_arguments import ranges_of, share_group_configs
from mqbroker.protocols.amqp.share_view import LostLeaseSuspects
from mqbroker.protocols.amqp.stored import MessageRow, QueueDeclaration, all_plain
from mqbroker.shares import messages as share
from mqbroker.shares.partition_values import AcquiredRange

_OFFSET = operator.itemgetter(0)
_FIRST = operator.attrgetter("first")
_OUTCOMES = {Outcome.ACK: AcknowledgeType.ACCEPT, Outcome.REQUEUE: AcknowledgeType.RELEASE,
             Outcome.DISCARD: AcknowledgeType.REJECT}
#: Fetches one consumer may have in flight (see ``ShareGroupMembers._fetch``).
FETCHES_IN_FLIGHT_MAX = 8
#: Member keys of the broker's own short-lived members (purge, expiry): never a session's (those count from 1).
_BROKER_MEMBERS = itertools.count(1)


def broker_member_key(purpose: str) -> ConsumerKey:
    """A key for one of the broker's own short-lived members of a queue's group (purge, expiry, a redeclaration)."""
    return (-1, next(_BROKER_MEMBERS), purpose)


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
    #: Fetches in flight, and the records they may still deliver (counted against the consumer's window).
    fetches: int = 0
    requested_records: int = 0
    #: A fetch is due at the end of this reactor turn (``_fetch``).
    fetch_due: bool = False
    #: Consuming (fetching). A cancelled consumer stays a member, without fetching, until its channel
    #: settled what it was given (AMQP lets a channel ack after basic.cancel).
    attached: bool = True


class ShareGroupMembers(BaseQueue):
    """An AMQP queue's consumers as members of the share group of its log topic."""

    def __init__(self, host: QueueHost, declaration: QueueDeclaration, owner: int | None) -> None:
        super().__init__(host, declaration, owner)
        self.group_id = self.topic
        self._configs = share_group_configs(declaration.name, declaration.arguments)
        self.policy = QueuePolicy.from_arguments(declaration.arguments)
        self._members: dict[ConsumerKey, _Member] = {}
        #: Who holds each delivered, unsettled offset (settlements come by offset, per queue).
        self._holders: dict[int, ConsumerKey] = {}
        #: The messages behind ``_holders`` (kept only with a dead-letter exchange: a reject republishes them).
        self._held: dict[int, MessageRow] = {}
        #: Dead letters on their way to the dead-letter exchange, per member: it stays a member until they land.
        self._dead_lettering: dict[ConsumerKey, int] = {}
        self._expiring = False
        #: Consumers' settlements not sent yet, per member and kind (``_acknowledge_soon``).
        self._unsent: dict[ConsumerKey, dict[AcknowledgeType, list[int]]] = {}
        self._turn_call: IDelayedCall | None = None
        #: The last batch a fetch decoded: the next fetch's leases are often in it too.
        self._recent = RecentBatch()
        self._suspects = LostLeaseSuspects(host.reactor, lambda: host.broker.list_offset(
            host.principal, self.topic, 0, LATEST_TIMESTAMP))
        self._group_created = False
        self._leaving: list[Deferred[Any]] = []
        Deferred.fromCoroutine(self.ensure_group()).addErrback(
            lambda failure: self.log.warn("AMQP share queue {queue}: share group {group} not created yet ({error}); "
                                          "its first consumer tries again", queue=self.name, group=self.group_id,
                                          error=failure.getErrorMessage()))

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
        cancelled = [member for key in keys if (member := self._members.get(key)) is not None
                     and not member.attached and key not in self._dead_lettering]
        if not cancelled:  # the common case (a consumer's ack): no walk over everything held
            return
        holding = set(self._holders.values())
        for member in cancelled:
            if member.key not in holding:
                self._drop(member)

    def _drop(self, member: _Member) -> None:
        self._send_unsent([member.key])  # before leaving: leaving releases what it still holds
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
        self._held.clear()
        self._suspects.stopped = True
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
        self._suspects.call_lost()
        if not member.attached or not self._is_member(member):
            return
        self.log.warn("AMQP share queue {queue}: consumer {key}: {error}; joining again in 1 s", queue=self.name,
                      key=member.key, error=failure.getErrorMessage())
        member.member_id, member.epoch = "", 0
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
        """Fetch within the member's window: at once when no fetch is in flight; else, while fewer than
        ``FETCHES_IN_FLIGHT_MAX`` are, at the end of this reactor turn (the acks of one turn reopen the window
        together). Each fetch waits for the state write recording its leases (an fsync): one at a time, a consumer
        acking every 100 of a prefetch of 1,000 had each fetch lease only the first 100 acked, and waited for the
        write between them."""
        if not member.attached or not member.epoch or self.deleted or member.consumer is None:
            return
        if not member.fetches:
            self._fetch_now(member)
        elif member.fetches < FETCHES_IN_FLIGHT_MAX and not member.fetch_due:
            member.fetch_due = True
            self._at_turn_end()

    def _fetch_now(self, member: _Member) -> None:
        member.fetch_due = False
        assert member.consumer is not None
        window = min(member.consumer.window(), limits.share_fetch_records_max) - member.requested_records
        if window <= 0:
            return  # the next settle or basic.qos dispatches again
        member.fetches += 1
        member.requested_records += window
        fetched = self.host.broker.share_fetch(self.host.principal, share.ShareFetchRequest(
            group_id=self.group_id, member_id=member.member_id, records_max=window,
            wait_ms_max=limits.amqp_log_fetch_wait_ms_max, acknowledgements=self._take_unsent(member.key)))
        fetched.addCallback(self._fetched, member)
        fetched.addErrback(self._member_failed, member)
        fetched.addBoth(self._fetch_finished, member, window)

    def _fetched(self, answer: share.ShareFetchResponse, member: _Member) -> None:
        self._acknowledged(answer.acknowledgements)
        consumer = member.consumer
        assert consumer is not None
        delivered = False
        for partition in answer.partitions:
            rows, ranges = self._leased_releasing_undecoded(member, partition)
            if not member.attached:  # cancelled while fetching: give them back
                self._acknowledge(member, list(map(_OFFSET, rows)), AcknowledgeType.RELEASE)
                continue
            rows = self._unexpired(member, rows)
            if not rows:
                continue
            offsets = list(map(_OFFSET, rows))
            consumer.session.connection.deliver_rows(consumer.channel, consumer.tag, self.name, rows,
                                                     self._suspects.redelivered_offsets(ranges))
            delivered = True
            if consumer.no_ack:
                self._acknowledge(member, offsets, AcknowledgeType.ACCEPT)
            else:
                self._hold(consumer.key, rows, offsets)
        if delivered:
            consumer.session.flush()

    def _unexpired(self, member: _Member, rows: list[MessageRow]) -> list[MessageRow]:
        """``rows`` but those past their TTL, which ``member`` dead-letters."""
        if self.policy.message_ttl_ms is None and all_plain(rows):
            return rows  # only a message with an expiration of its own could have expired
        now_ms = self.host.now_ms()
        expired = [row for row in rows if is_expired(self.policy, row, now_ms)]
        if not expired:
            return rows
        self._dead_letter(member, expired, DeathReason.EXPIRED)
        gone = set(map(_OFFSET, expired))
        return [row for row in rows if row.offset not in gone]

    def _hold(self, key: ConsumerKey, messages: list[MessageRow], offsets: list[int]) -> None:
        """``messages`` (at ``offsets``) went to ``key`` unsettled."""
        self._holders.update(zip(offsets, repeat(key)))
        if self.policy.dead_letter_exchange is not None:
            self._held.update(zip(offsets, messages))

    def _dead_letter(self, member: _Member, messages: list[MessageRow], reason: DeathReason) -> None:
        """Messages ``member`` holds died: through the dead-letter exchange, accepted once their copies are durable
        (released if a copy was refused); without one, rejected in the group."""
        offsets = [message.offset for message in messages]
        if self.policy.dead_letter_exchange is None:
            self._acknowledge(member, offsets, AcknowledgeType.REJECT, error=reason.value)
            return
        batches = [batch for message in messages
                   for batch in self.host.republish_dead(self.name, self.policy, message, reason)]
        self._dead_lettering[member.key] = self._dead_lettering.get(member.key, 0) + 1

        def landed(stored: bool) -> None:
            remaining = self._dead_lettering.pop(member.key) - 1
            if remaining:
                self._dead_lettering[member.key] = remaining
            if self._members.get(member.key) is member and member.member_id:
                self._acknowledge(member, offsets, AcknowledgeType.ACCEPT if stored else AcknowledgeType.RELEASE,
                                  error="" if stored else "its dead-letter copy was not stored")
            self._leave_when_settled([member.key])

        all_settled(batches).addCallback(landed)

    def _leased_releasing_undecoded(self, member: _Member, partition: share.SharePartitionRecords
                                    ) -> tuple[list[MessageRow], list[AcquiredRange]]:
        """The messages one partition's answer leased to ``member`` (its error raised), and the ranges acquired;
        acquired offsets that did not decode go back at once, so the next fetch or get reads them again."""
        if partition.error is not None:
            raise partition.error
        leased, ranges, undecoded = _leased(partition, self._recent)
        if undecoded:
            self._acknowledge(member, undecoded, AcknowledgeType.RELEASE)
        return leased, ranges

    def _fetch_finished(self, _: Any, member: _Member, window: int) -> None:
        member.fetches -= 1
        member.requested_records -= window
        self._fetch(member)

    # -- settling --------------------------------------------------------------------------------

    def settle(self, offsets: list[Hashable], outcome: Outcome) -> None:
        """basic.ack / nack / reject: one acknowledgement per member holding some of ``offsets``."""
        by_member: dict[ConsumerKey, list[int]] = {}
        dead: dict[ConsumerKey, list[MessageRow]] = {}
        dead_lettering = outcome is Outcome.DISCARD and self.policy.dead_letter_exchange is not None
        holders = list(map(self._holders.pop, offsets, repeat(None)))
        messages = list(map(self._held.pop, offsets, repeat(None))) if self._held else repeat(None)
        distinct = set(holders)
        if len(distinct) == 1 and not dead_lettering:  # one consumer's (multiple) ack: the common case
            [holder] = distinct
            if holder is not None:
                by_member[holder] = offsets  # type: ignore[assignment]
        else:
            for offset, holder, message in zip(offsets, holders, messages):
                if holder is not None:
                    if dead_lettering and message is not None:
                        dead.setdefault(holder, []).append(message)
                    else:
                        by_member.setdefault(holder, []).append(offset)  # type: ignore[arg-type]
        for holder, held in by_member.items():
            member = self._members.get(holder)
            if member is not None and member.member_id:
                self._acknowledge_soon(member.key, held, _OUTCOMES[outcome])
        for holder, messages in dead.items():
            member = self._members.get(holder)
            if member is not None and member.member_id:
                self._dead_letter(member, messages, DeathReason.REJECTED)
        by_member.update(dict.fromkeys(dead, []))
        self._leave_when_settled(list(by_member))
        self.dispatch()

    def _acknowledge(self, member: _Member, offsets: list[int], kind: AcknowledgeType,
                     error: str = "") -> Deferred[None]:
        """Settle ``offsets`` as ``kind`` for ``member`` (fires once answered; failures are logged)."""
        return self._acknowledge_ranges(member, ranges_of(offsets), kind, error)

    def _acknowledge_ranges(self, member: _Member, ranges: list[tuple[int, int]], kind: AcknowledgeType,
                            error: str = "") -> Deferred[None]:
        return self._send_acknowledgements(member, self._acknowledgements(ranges, kind, error))

    def _acknowledgements(self, ranges: list[tuple[int, int]], kind: AcknowledgeType,
                          error: str = "") -> tuple[share.Acknowledgement, ...]:
        return tuple(share.Acknowledgement(topic=self.topic, partition=0, first_offset=first, last_offset=last,
                                           kind=kind, error=error) for first, last in ranges)

    def _send_acknowledgements(self, member: _Member, acknowledgements: tuple[share.Acknowledgement, ...]
                               ) -> Deferred[None]:
        settled = self.host.broker.share_acknowledge(self.host.principal, share.ShareAcknowledgeRequest(
            group_id=self.group_id, member_id=member.member_id, acknowledgements=acknowledgements))
        settled.addCallback(self._acknowledged)
        settled.addErrback(self._settling_failed, len(acknowledgements))
        return settled

    def _acknowledge_soon(self, key: ConsumerKey, offsets: list[int], kind: AcknowledgeType) -> None:
        """A consumer's settlement: sent with the member's next fetch if it fetches in this reactor turn, else with
        the others of the turn in one acknowledgement (a client acking message by message costs one call a turn)."""
        self._unsent.setdefault(key, {}).setdefault(kind, []).extend(offsets)
        self._at_turn_end()

    def _at_turn_end(self) -> None:
        """Run ``_turn_ended`` once this reactor turn is over."""
        if self._turn_call is None:
            self._turn_call = self.host.reactor.callLater(0, self._turn_ended)

    def _turn_ended(self) -> None:
        """The fetches due start (with their members' settlements), then the other settlements go out."""
        self._turn_call = None
        for member in [member for member in self._members.values() if member.fetch_due]:
            if member.attached and member.epoch and not self.deleted:
                self._fetch_now(member)
            member.fetch_due = False
        self._send_unsent()

    def _take_unsent(self, key: ConsumerKey) -> tuple[share.Acknowledgement, ...]:
        kinds = self._unsent.pop(key, {})
        return tuple(acknowledgement for kind, offsets in kinds.items()
                     for acknowledgement in self._acknowledgements(ranges_of(offsets), kind))

    def _send_unsent(self, keys: list[ConsumerKey] | None = None) -> None:
        """Send the settlements not sent yet (of ``keys``; None: all of them, at the end of the turn)."""
        for key in list(self._unsent) if keys is None else keys:
            acknowledgements = self._take_unsent(key)
            member = self._members.get(key)
            if acknowledgements and member is not None and member.member_id:
                self._send_acknowledgements(member, acknowledgements)

    def _settling_failed(self, failure: Any, ranges: int) -> None:
        self._suspects.call_lost()
        self.log.warn("AMQP share queue {queue}: settling {count} range(s) failed ({error}); they come back when "
                      "their leases end", queue=self.name, count=ranges, error=failure.getErrorMessage())

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
            self._held.pop(offset, None)
        for key in holders:
            member = self._members.get(key)
            if member is not None:
                member.attached = False
        self._leave_when_settled(list(holders))

    async def _member_for(self, key: ConsumerKey) -> _Member:
        """The broker's own member ``key`` of the group (joined now unless it is)."""
        member = self._members.get(key)
        if member is None or not member.epoch:
            member = self._members[key] = _Member(key=key, consumer=None, attached=False)
            await self.ensure_group()
            await self._heartbeat(member)
        return member

    async def _take(self, key: ConsumerKey, records_max: int) -> tuple[_Member, list[MessageRow], set[int]]:
        """Acquire up to ``records_max`` messages as member ``key`` (waiting up to ``amqp_share_get_wait_ms_max``
        for the group to read what was just published); with the offsets of those flagged redelivered."""
        member = await self._member_for(key)
        answer = await self.host.broker.share_fetch(self.host.principal, share.ShareFetchRequest(
            group_id=self.group_id, member_id=member.member_id, records_max=records_max,
            wait_ms_max=limits.amqp_share_get_wait_ms_max))
        leased: list[MessageRow] = []
        redelivered: set[int] = set()
        for partition in answer.partitions:
            rows, ranges = self._leased_releasing_undecoded(member, partition)
            leased += rows
            redelivered |= self._suspects.redelivered_offsets(ranges)
        return member, leased, redelivered


def _leased(partition: share.SharePartitionRecords,
            recent: RecentBatch) -> tuple[list[MessageRow], list[AcquiredRange], list[int]]:
    """The acquired messages of one partition's answer in offset order, its acquired ranges in that order, and the
    acquired offsets not decoded (past the fetch's decompression budget, or in a batch that does not decode)."""
    ranges = sorted(partition.acquired, key=_FIRST)
    if not ranges:
        return [], [], []
    rows, _ = decode_fetched_rows(partition.records, ranges[0].first, partition.topic, stop_after=ranges[-1].last,
                                  recent=recent)
    recent.forget_through(ranges[-1].last)
    leased: list[MessageRow] = []
    for acquired in ranges:  # rows are in offset order: each range is a slice of them
        low = bisect.bisect_left(rows, acquired.first, key=_OFFSET)
        leased += rows[low:bisect.bisect_right(rows, acquired.last, lo=low, key=_OFFSET)]
    if len(leased) == sum(acquired.last - acquired.first + 1 for acquired in ranges):
        return leased, ranges, []
    found = set(map(_OFFSET, leased))
    return leased, ranges, [offset for acquired in ranges for offset in range(acquired.first, acquired.last + 1)
                            if offset not in found]
