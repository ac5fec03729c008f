"""The share groups of one ``__share_group_state`` partition, served by its leader (tx-light).

Built from a replay of the partition when this broker becomes its leader; resigned when the
leadership moves. It runs the pure state machines (``SharePartition``, ``ShareMembers``) under
the injected clock: member heartbeats, fetches that acquire (long-polling when nothing is
available), acknowledgements answered once their state is replicated (``StateWriter``), lease
expiry, due delayed records, and dead letters copied (acks=all) before they count as done.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence

from twisted.internet.defer import Deferred, FirstError, fail, gatherResults, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker import errors, limits
from mqbroker.groups.model import TopicPartition
from mqbroker.model import AcknowledgeType
from mqbroker.shares import messages as m
from mqbroker.shares.data import ShareData
from mqbroker.shares.dead_letter_copies import DeadLetterCopies
from mqbroker.shares.delay_index import DelayIndex
from mqbroker.shares.group import FetchWaiter, HostedGroup
from mqbroker.shares.partition import SharePartition
from mqbroker.shares.pending_state import PendingState
from mqbroker.shares.push_hosting import PushFactory, PushHosting
from mqbroker.shares.replay import ReplayedState
from mqbroker.shares.restored_leases import RestoredLeases
from mqbroker.shares.runtime import HostedPartition
from mqbroker.shares.settings import check_keys, parse_settings, shown_configs
from mqbroker.shares.state_records import (
    GroupDefinition,
    PartitionKey,
)
from mqbroker.shares.writer import StateAppend, StateWriter


class ShareService:
    """The share groups of one state partition: Deferred answers over the pure state machines."""

    log = Logger()

    def __init__(self, *, state_partition: int, clock: IReactorTime, data: ShareData, append: StateAppend,
                 index: DelayIndex, replayed: ReplayedState, new_member_id: Callable[[str], str],
                 push_factory: PushFactory | None = None) -> None:
        self.state_partition = state_partition
        self._clock = clock
        self._data = data
        self._index = index
        self._new_member_id = new_member_id
        self._groups: dict[str, HostedGroup] = {}
        self._pending = PendingState(self._groups, index)
        self._writer = StateWriter(clock=clock, append=append, collect=self._pending.collect)
        self._initializing: set[tuple[str, TopicPartition]] = set()
        self._push = PushHosting(self, push_factory)
        self._dead_letters = DeadLetterCopies(clock=clock, data=data, settle=self._settle,
                                              stopped=lambda: self._stopped)
        self._index_ids = iter(range(max(replayed.index_ids.values(), default=0) + 1, 2**62))
        self._timer: IDelayedCall | None = None
        self._arming: IDelayedCall | None = None
        self._stopped = False
        for group_id, definition in replayed.definitions.items():
            self._groups[group_id] = HostedGroup(group_id, definition, new_member_id, now_ms=self.now_ms())
        for key, snapshot in replayed.snapshots.items():
            group = self._groups.get(key.group_id)
            if group is not None:
                state = SharePartition.restore(snapshot, max_delivery_attempts=group.settings.max_delivery_attempts,
                                               inflight_records_max=limits.share_inflight_records_max)
                self._host(group, key, state, replayed.index_ids[key], reads_from=snapshot.start_offset)
        self._restored = RestoredLeases(clock, self._groups, self._settle)
        for group in self._groups.values():
            self._push.start(group)
            group.activate()
        self._schedule()

    def now_ms(self) -> int:
        """The clock in milliseconds."""
        return int(self._clock.seconds() * 1000)

    # -- members ---------------------------------------------------------------------------------

    def heartbeat(self, request: m.ShareHeartbeatRequest) -> Deferred[m.ShareHeartbeatResponse]:
        """Join, stay in or leave a share group (created with default settings on first use)."""
        try:
            group = self._groups.get(request.group_id) or self._create_implicitly(request.group_id)
            member = group.members.heartbeat(request.group_id, request.member_id, request.member_epoch,
                                             client_id=request.client_id, client_host=request.client_host,
                                             topics=request.topics, now_ms=self.now_ms())
        except errors.BrokerError as error:
            return fail(error)
        group.last_used_ms = self.now_ms()
        if member is None:
            self._member_gone(group, request.member_id, "the member left")
            return succeed(m.ShareHeartbeatResponse(member_id=request.member_id, member_epoch=-1,
                                                    heartbeat_interval_ms=group.settings.heartbeat_interval_ms,
                                                    assignment=()))
        assignment = self._assignment(group, member.topics)
        group.activate()
        self._schedule()
        return succeed(m.ShareHeartbeatResponse(member_id=member.member_id, member_epoch=member.member_epoch,
                                                heartbeat_interval_ms=group.settings.heartbeat_interval_ms,
                                                assignment=tuple(assignment)))

    def _assignment(self, group: HostedGroup, member_topics: Iterable[str]) -> list[TopicPartition]:
        """The partitions a member may fetch from; those not hosted yet are started."""
        topics = set(group.definition.topics) | set(member_topics)
        counts = {topic: self._data.partition_count(topic) for topic in topics}
        assignment = group.assignment(member_topics, counts)
        for topic_partition in assignment:
            self._start_partition(group, topic_partition)
        return assignment

    def _member_gone(self, group: HostedGroup, member_id: str, reason: str) -> None:
        group.last_used_ms = self.now_ms()
        for hosted in group.release_member(member_id, reason):
            self._settle(group, hosted)
        group.activate()

    # -- fetching and acknowledging -------------------------------------------------------------

    def fetch(self, request: m.ShareFetchRequest) -> Deferred[m.ShareFetchResponse]:
        """Acknowledge, then acquire (waiting up to ``wait_ms_max`` for records when none are available)."""
        group = self._groups.get(request.group_id)
        if group is None or group.settings.ready_records_max is None:
            return self._fetch(request)
        return self._count_log_ends(group).addCallback(lambda _: self._fetch(request))

    def _count_log_ends(self, group: HostedGroup) -> Deferred[None]:
        """A group with a maximum of ready records counts what its logs hold now before it leases (then drops the
        heads beyond it): a message published, and confirmed, before a fetch is counted, wherever it came through."""
        ends = [self._data.log_offset(hosted.topic, hosted.partition, False).addCallback(hosted.note_log_end)
                for hosted in group.partitions.values()]
        counted = gatherResults(ends, consumeErrors=True)
        counted.addErrback(lambda _: None)  # not known now: the ends of the last reads count

        def trim(_: object) -> None:
            for hosted in list(group.partitions.values()):
                self._settle(group, hosted)

        return counted.addCallback(trim)

    def _fetch(self, request: m.ShareFetchRequest) -> Deferred[m.ShareFetchResponse]:
        try:
            group = self._group(request.group_id)
            member = group.members.require(request.group_id, request.member_id)
            lease_ms = self._lease(group, request.lease_ms)
        except errors.BrokerError as error:
            return fail(error)
        now_ms = self.now_ms()
        member.last_heartbeat_ms = now_ms
        acknowledged = self._acknowledge(group, request.member_id, request.acknowledgements, lease_ms)
        partitions = request.partitions or tuple(self._assignment(group, member.topics))
        records_max = max(1, min(request.records_max, limits.share_fetch_records_max))
        answers = group.acquire(request.member_id, partitions, records_max, request.bytes_max, lease_ms, now_ms)
        self._acquired(group, answers)
        if answers or request.wait_ms_max <= 0:
            fetched: Deferred[list[m.SharePartitionRecords]] = self._leases_stored(answers)
        else:
            fetched = self._park(group, FetchWaiter(
                member_id=request.member_id, partitions=partitions, records_max=records_max,
                bytes_max=request.bytes_max, lease_ms=lease_ms, answer=Deferred()), request.wait_ms_max)
        both = gatherResults([fetched, acknowledged], consumeErrors=True)
        both.addErrback(_first_error)
        return both.addCallback(lambda results: m.ShareFetchResponse(partitions=tuple(results[0]),
                                                                      acknowledgements=results[1]))

    def acknowledge(self, request: m.ShareAcknowledgeRequest) -> Deferred[tuple[m.AcknowledgeResult, ...]]:
        """Settle records; each result is final once the state recording it is replicated."""
        try:
            group = self._group(request.group_id)
            group.members.require(request.group_id, request.member_id).last_heartbeat_ms = self.now_ms()
            lease_ms = self._lease(group, request.lease_ms)
        except errors.BrokerError as error:
            return fail(error)
        return self._acknowledge(group, request.member_id, request.acknowledgements, lease_ms)

    def _lease(self, group: HostedGroup, lease_ms: int) -> int:
        if lease_ms == m.GROUP_LEASE:
            return group.settings.lease_ms
        if not 1 <= lease_ms <= limits.share_lease_ms_max:
            raise errors.InvalidRequestError(f"a lease of {lease_ms} ms is outside 1..{limits.share_lease_ms_max}")
        return lease_ms

    def _acknowledge(self, group: HostedGroup, member_id: str, acknowledgements: Sequence[m.Acknowledgement],
                     lease_ms: int, available_at_ms: int = 0) -> Deferred[tuple[m.AcknowledgeResult, ...]]:
        now_ms = self.now_ms()
        results = []
        changed: dict[HostedPartition, None] = {}
        must_write = False
        for ack in acknowledgements:
            hosted = group.settle(member_id, TopicPartition(ack.topic, ack.partition), ack.first_offset,
                                  ack.last_offset, ack.kind, now_ms, lease_ms=lease_ms, error=ack.error,
                                  available_at_ms=available_at_ms)
            error = None if hosted is not None else errors.InvalidRecordStateError(
                f"{ack.topic}-{ack.partition} offsets {ack.first_offset}..{ack.last_offset} are not all leased to "
                f"member {member_id!r} (the lease expired, or they were acknowledged already); nothing was changed")
            results.append(m.AcknowledgeResult(topic=ack.topic, partition=ack.partition, first_offset=ack.first_offset,
                                               last_offset=ack.last_offset, error=error))
            if hosted is not None:
                changed[hosted] = None
                must_write = must_write or ack.kind is not AcknowledgeType.RENEW
        copies = [copy for hosted in changed for copy in self._settle(group, hosted)]
        if not must_write:
            return succeed(tuple(results))
        written = gatherResults(copies, consumeErrors=True) if copies else succeed(None)
        written.addCallback(lambda _: self._writer.request())

        def failed(failure: Failure) -> tuple[m.AcknowledgeResult, ...]:
            error = _first_error(failure).value
            if not isinstance(error, errors.BrokerError):
                return failure  # type: ignore[return-value]
            return tuple(result if result.error else dataclasses.replace(result, error=error) for result in results)

        return written.addCallbacks(lambda _: tuple(results), failed)

    def _acquired(self, group: HostedGroup, answers: Iterable[m.SharePartitionRecords]) -> None:
        for answer in answers:
            self._settle(group, group.partitions[TopicPartition(answer.topic, answer.partition)])

    def _leases_stored(self, answers: list[m.SharePartitionRecords]) -> Deferred[list[m.SharePartitionRecords]]:
        """``answers`` once the state recording their leases is replicated (a new host then keeps the leases and
        delivery counts); at once when nothing was leased. Writes are coalesced: one per reactor turn at most."""
        if not answers:
            return succeed(answers)
        return self._writer.request().addCallback(lambda _: answers)

    def _park(self, group: HostedGroup, waiter: FetchWaiter, wait_ms: int) -> Deferred[list[m.SharePartitionRecords]]:
        group.waiters.append(waiter)
        delay_s = min(wait_ms, limits.fetch_wait_ms_max) / 1000.0
        waiter.timer = self._clock.callLater(delay_s, group.finish_waiter, waiter, [])
        answer = waiter.answer
        answer.addCallback(lambda answers: self._acquired(group, answers) or self._leases_stored(answers))
        return answer

    # -- the push dispatcher's host ----------------------------------------------------------------

    def push_acquire(self, group: HostedGroup, member_id: str, records_max: int, lease_ms: int) -> list[m.SharePartitionRecords]:
        """Records for a push dispatcher (the broker as a member of the group)."""
        partitions = self._assignment(group, ())
        answers = group.acquire(member_id, partitions, records_max, 64 * 1024 * 1024, lease_ms, self.now_ms())
        self._acquired(group, answers)
        return answers

    def push_settle(self, group: HostedGroup, member_id: str, acknowledgements: Sequence[m.Acknowledgement], *,
                    lease_ms: int, available_at_ms: int = 0) -> Deferred[tuple[m.AcknowledgeResult, ...]]:
        """A push dispatcher's acknowledgements (released records may be held back until ``available_at_ms``)."""
        return self._acknowledge(group, member_id, acknowledgements, lease_ms, available_at_ms)

    # -- groups ----------------------------------------------------------------------------------

    def _group(self, group_id: str) -> HostedGroup:
        group = self._groups.get(group_id)
        if group is None:
            raise errors.GroupIdNotFoundError(
                f"share group {group_id!r} does not exist; create it with `mqbroker share-groups create` "
                "or join it with a heartbeat")
        return group

    def _create_implicitly(self, group_id: str) -> HostedGroup:
        """A heartbeat for a new group creates it with the default settings, as KIP-932 does."""
        _check_group_id(group_id)
        group = HostedGroup(group_id, GroupDefinition(created_ms=self.now_ms(), topics=(), configs={}),
                            self._new_member_id, now_ms=self.now_ms())
        group.definition_changed = True
        self._groups[group_id] = group
        self._writer.nudge()
        return group

    def create_group(self, group_id: str, topics: Sequence[str], configs: dict[str, str]) -> Deferred[None]:
        """Define a new share group; fires once the definition is replicated."""
        try:
            _check_group_id(group_id)
            if group_id in self._groups:
                raise errors.DuplicateResourceError(
                    f"share group {group_id!r} exists; change it with `mqbroker share-groups alter`")
            parse_settings(configs)
            group = HostedGroup(group_id, GroupDefinition(created_ms=self.now_ms(), topics=tuple(topics),
                                                          configs=dict(configs)), self._new_member_id,
                                now_ms=self.now_ms())
        except errors.BrokerError as error:
            return fail(error)
        group.definition_changed = True
        self._groups[group_id] = group
        self._assignment(group, ())
        self._push.start(group)
        group.activate()
        return self._writer.request()

    def alter_group(self, group_id: str, topics: Sequence[str] | None, set_configs: dict[str, str],
                    delete_configs: Sequence[str]) -> Deferred[None]:
        """Change a group's topics (None: keep them) and configs; fires once replicated."""
        try:
            group = self._group(group_id)
            check_keys({key: "" for key in delete_configs})
            configs = {key: value for key, value in group.definition.configs.items() if key not in delete_configs}
            configs.update(set_configs)
            definition = dataclasses.replace(group.definition, configs=configs,
                                             topics=group.definition.topics if topics is None else tuple(topics))
            group.redefine(definition)
        except errors.BrokerError as error:
            return fail(error)
        self._push.stop(group_id)
        self._assignment(group, ())
        self._push.start(group)
        group.activate()
        return self._writer.request()

    def delete_group(self, group_id: str) -> Deferred[None]:
        """Delete a group without members, its state and its scheduled records; fires once replicated."""
        try:
            group = self._group(group_id)
            if len(group.members):
                raise errors.NonEmptyGroupError(
                    f"share group {group_id!r} has {len(group.members)} member(s); stop them first")
        except errors.BrokerError as error:
            return fail(error)
        self._push.stop(group_id)
        del self._groups[group_id]
        self._pending.group_deleted(group)
        group.deleted = True
        group.fail_waiters(errors.GroupIdNotFoundError(f"share group {group_id!r} was deleted"))
        for hosted in group.partitions.values():
            hosted.stop()
        return self._writer.request()

    def describe_group(self, group_id: str) -> Deferred[m.ShareGroupDescription]:
        """A group's definition, members, partitions and dead-letter depth."""
        try:
            group = self._group(group_id)
        except errors.BrokerError as error:
            return fail(error)
        members = tuple(m.ShareMemberDescription(member_id=member.member_id, client_id=member.client_id,
                                                 client_host=member.client_host, topics=tuple(sorted(member.topics)),
                                                 acquired=group.acquired_by(member.member_id))
                        for member in group.members)
        partitions = tuple(m.SharePartitionDescription(
            topic=hosted.topic, partition=hosted.partition, stats=hosted.state.stats(),
            scheduled=self._index.count(hosted.index_id), lag=hosted.lag())
            for _, hosted in sorted(group.partitions.items()))
        depth = self._dead_letters.depth(group.settings.dead_letter_topic)
        return depth.addCallback(lambda records: m.ShareGroupDescription(
            group_id=group_id, topics=group.definition.topics, configs=shown_configs(group.definition.configs),
            members=members, partitions=partitions, dead_lettered=group.dead_lettered, dead_letter_depth=records,
            unused_ms=group.unused_ms(self.now_ms())))

    def list_groups(self) -> list[m.ShareGroupListing]:
        """Every group hosted here."""
        return [m.ShareGroupListing(group_id=group_id, topics=group.definition.topics, members=len(group.members),
                                    push_endpoint=group.settings.push.endpoint if group.settings.push else "")
                for group_id, group in sorted(self._groups.items())]

    def metrics(self, into: m.ShareMetrics) -> None:
        """Add lag and leased records per partition, dead letters per group (as of each partition's last read)."""
        for group_id, group in self._groups.items():
            into.dead_lettered[group_id] = group.dead_lettered
            for hosted in group.partitions.values():
                into.partitions[group_id, hosted.topic, hosted.partition] = (hosted.lag(), hosted.state.stats().acquired)

    def group(self, group_id: str) -> HostedGroup | None:
        """A hosted group (for the push dispatcher and tests)."""
        return self._groups.get(group_id)

    # -- partitions ------------------------------------------------------------------------------

    def _start_partition(self, group: HostedGroup, topic_partition: TopicPartition) -> None:
        """Host a share partition the group has not read yet, from its log's start or end (auto.offset.reset)."""
        marker = (group.group_id, topic_partition)
        if topic_partition in group.partitions or marker in self._initializing:
            return
        self._initializing.add(marker)
        earliest = group.settings.auto_offset_reset == "earliest"
        found = self._data.log_offset(topic_partition.topic, topic_partition.partition, earliest)

        def start(offset: int) -> None:
            self._initializing.discard(marker)
            if self._stopped or group.deleted or topic_partition in group.partitions:
                return
            key = PartitionKey(group.group_id, topic_partition.topic, topic_partition.partition)
            state = SharePartition(start_offset=offset, max_delivery_attempts=group.settings.max_delivery_attempts,
                                   inflight_records_max=limits.share_inflight_records_max)
            state.changed = True  # the starting point is stored at once
            hosted = self._host(group, key, state, next(self._index_ids))
            hosted.active = group.wants_records
            self._settle(group, hosted)

        found.addCallbacks(start, lambda failure: self._initializing.discard(marker))

    def _host(self, group: HostedGroup, key: PartitionKey, state: SharePartition, index_id: int,
              reads_from: int | None = None) -> HostedPartition:
        hosted = HostedPartition(key=key, index_id=index_id, state=state, data=self._data, clock=self._clock,
                                 index=self._index, changed=lambda changed: self._settle(group, changed),
                                 delay_ms=group.settings.delivery_delay_ms, reads_from=reads_from)
        group.partitions[TopicPartition(key.topic, key.partition)] = hosted
        return hosted

    def _settle(self, group: HostedGroup, hosted: HostedPartition) -> list[Deferred[None]]:
        """After a state change: dead letters out, state to write, waiting fetches served, reading on."""
        if group.deleted or self._stopped:
            return []
        if group.settings.ready_records_max is not None:
            hosted.trim(group.settings.ready_records_max)
        copies = [self._dead_letters.copy(group, hosted, dead) for dead in hosted.drain()]
        if hosted.dirty:
            self._pending.partition_changed(hosted)
            self._writer.nudge()
        group.serve_waiters(self.now_ms())
        hosted.read_ahead()
        self._schedule()
        return copies

    # -- time ------------------------------------------------------------------------------------

    def _schedule(self) -> None:
        """Re-arm the timer once this reactor turn's changes are made (many changes, one computation)."""
        if not self._stopped and (self._arming is None or not self._arming.active()):
            self._arming = self._clock.callLater(0, self._arm)

    def _arm(self) -> None:
        """Arm the timer for the earliest member expiry, lease end, held-back record or due delay."""
        self._arming = None
        if self._stopped:
            return
        deadlines = []
        for group in self._groups.values():
            deadlines.append(group.members.next_deadline_ms(group.settings.session_timeout_ms))
            for hosted in group.partitions.values():
                deadlines += (hosted.state.next_deadline_ms(), hosted.next_due_ms)
        present = [deadline for deadline in deadlines if deadline is not None]
        if not present:
            return
        delay_s = max(0, min(present) - self.now_ms()) / 1000.0
        if self._timer is not None and self._timer.active():
            if abs(self._timer.getTime() - (self._clock.seconds() + delay_s)) < 0.001:
                return
            self._timer.cancel()
        self._timer = self._clock.callLater(delay_s, self._tick)

    def _tick(self) -> None:
        self._timer = None
        now_ms = self.now_ms()
        for group in list(self._groups.values()):
            for member_id in group.members.expire(now_ms, group.settings.session_timeout_ms):
                self.log.info("share group {group}: member {member} removed: no heartbeat for {timeout} ms",
                              group=group.group_id, member=member_id, timeout=group.settings.session_timeout_ms)
                self._member_gone(group, member_id, "the member's session timed out")
            for hosted in list(group.partitions.values()):
                hosted.state.tick(now_ms)
                hosted.load_due(now_ms)
                self._settle(group, hosted)
        self._schedule()

    # -- the end ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Broker shutdown: timers, reads and pushes end; waiting fetches fail as the broker shuts down."""
        self.resign(errors.BrokerShuttingDownError("the broker is shutting down; find the share group's host again"))

    def resign(self, error: errors.BrokerError) -> None:
        """Another broker hosts these groups now (or this one stops): fail whoever waits with ``error``."""
        self._stopped = True
        for timer in (self._timer, self._arming):
            if timer is not None and timer.active():
                timer.cancel()
        self._restored.cancel()
        self._push.stop_all()
        for group in self._groups.values():
            group.fail_waiters(error)
            for hosted in group.partitions.values():
                hosted.stop()
        self._writer.stop(error)
        self._index.close()


def _check_group_id(group_id: str) -> None:
    if not group_id or len(group_id) > 255 or not group_id.isprintable():
        raise errors.InvalidGroupIdError(f"share group id {group_id!r} must be 1 to 255 printable characters")


def _first_error(failure: Failure) -> Failure:
    """Unwrap ``gatherResults``' FirstError so callers see the error itself."""
    if failure.check(FirstError):
        return failure.value.subFailure  # type: ignore[no-any-return]
    return failure
