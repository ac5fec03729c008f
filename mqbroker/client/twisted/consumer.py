"""The Twisted ``TwistedConsumer``: ``poll`` returns a Deferred firing with the next messages.

The pure ``ConsumerCore`` plans fetches; with a group, ``TwistedGroupMembership`` (``group.py``)
heartbeats on the reactor's clock and ``poll`` applies its assignment changes. Before ``poll`` fires
with records it sends the next fetch (Kafka's fetch pipelining), which the broker holds until new
records are durable while the application handles these.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.internet.interfaces import IReactorTCP, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker.client import admin
from mqbroker.client.consumer import (
    ConsumerConfig,
    ConsumerCore,
    FetchPlan,
    Message,
    OffsetReset,
    TopicPartition,
    parse_isolation_level,
)
from mqbroker.client.group_member import (
    AssignmentChange,
    ConsumerGroupMetadata,
    AutoCommit,
    GroupMember,
    GroupSettings,
    apply_change,
    known_positions,
    revoked_positions,
)
from mqbroker.client.security import ClientSecurity
from mqbroker.client.twisted.cluster import TwistedCluster
from mqbroker.client.twisted.group import TwistedGroupMembership
from mqbroker.errors import BrokerError
from mqbroker.protocols.native.messages import FetchResponse

#: A rebalance callback; it may return a Deferred (or other awaitable) the consumer waits for.
RebalanceCallback = Callable[[set[TopicPartition]], "Awaitable[None] | None"]


class TwistedConsumer:
    """``poll`` returns a Deferred firing with the next ``Message``s of the assigned partitions.

    Without ``group_id`` it reads what ``assign_topics`` or ``assign`` names. With ``group_id``
    it joins the group and reads the partitions the group assigns it (``topics`` or a
    ``pattern``), heartbeating on the reactor's clock; assignment changes are applied at the
    start of each ``poll``, when the records of the previous one are processed, so auto-commit
    (the default) is at-least-once. Rebalance callbacks may return Deferreds.
    """

    log = Logger()

    def __init__(
        self,
        reactor: IReactorTCP,
        bootstrap: str | Sequence[str] = "localhost:9393",
        *,
        group_id: str | None = None,
        topics: Iterable[str] = (),
        pattern: str | None = None,
        group_instance_id: str | None = None,
        auto_offset_reset: str = "latest",
        enable_auto_commit: bool | None = None,
        auto_commit_interval_ms: int = 5_000,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
        max_poll_interval_ms: int = 300_000,
        on_assigned: RebalanceCallback | None = None,
        on_revoked: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
        fetch_max_wait_ms: int = 500,
        client_id: str = "mqbroker-consumer",
        security: ClientSecurity | None = None,
        isolation_level: str = "read_uncommitted",
    ) -> None:
        """``isolation_level="read_committed"``: only committed transactions' (and non-transactional) records."""
        if group_id is None and (enable_auto_commit or pattern is not None or group_instance_id is not None):
            raise ValueError("enable_auto_commit, pattern and group_instance_id need a group_id")
        topics = tuple(topics)
        if group_id is None and topics:
            raise ValueError("topics are subscribed through a group: give a group_id, or read them without one "
                             "with assign_topics(...)")
        self._core = ConsumerCore(
            ConsumerConfig(auto_offset_reset=OffsetReset(auto_offset_reset), fetch_max_wait_ms=fetch_max_wait_ms,
                           isolation_level=parse_isolation_level(isolation_level))
        )
        self._reactor = reactor
        self._cluster = TwistedCluster(reactor, bootstrap, client_id, security)
        #: Fetches sent and not yet taken by ``poll``: the one sent before the last poll fired waits at the broker.
        self._in_flight: list[tuple[FetchPlan, Deferred[Any]]] = []
        self._group: TwistedGroupMembership | None = None
        #: Assignment changes taken from the group whose application raised: the next poll applies them again.
        self._unapplied: list[AssignmentChange] = []
        self._auto_commit = AutoCommit(None, 0)
        self._callbacks: dict[str, RebalanceCallback | None] = {
            "assigned": on_assigned, "revoked": on_revoked, "lost": on_lost,
        }
        if group_id is not None:
            settings = GroupSettings(
                group_id=group_id, group_instance_id=group_instance_id, session_timeout_ms=session_timeout_ms,
                max_poll_interval_ms=max_poll_interval_ms, heartbeat_interval_ms=heartbeat_interval_ms,
            )
            self._group = TwistedGroupMembership(
                GroupMember(settings, topics), links=self._cluster, clock=self._clock(),
                pattern=re.compile(pattern) if pattern else None,
            )
            self._auto_commit = AutoCommit(
                auto_commit_interval_ms if enable_auto_commit is not False else None, self._now_ms()
            )

    def _clock(self) -> IReactorTime:
        return self._reactor  # type: ignore[return-value]

    def _now_ms(self) -> int:
        return int(self._clock().seconds() * 1000)

    def assign_topics(self, topics: Iterable[str]) -> Deferred[None]:
        """Read every partition of ``topics`` (no group)."""
        return Deferred.fromCoroutine(self._subscribe(topics))

    async def _subscribe(self, topics: Iterable[str]) -> None:
        names = list(topics)
        await self._cluster.refresh(names)
        self._core.assign((topic, partition) for topic in names
                          for partition in range(self._cluster.view.partition_count(topic) or 0))

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions."""
        self._core.assign(partitions)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next."""
        self._core.seek(partition, offset)

    def seek_to_beginning(self, partition: TopicPartition) -> None:
        """Read ``partition`` from its first record next."""
        self._core.seek_to_beginning(partition)

    def seek_to_end(self, partition: TopicPartition) -> None:
        """Read only new records of ``partition``."""
        self._core.seek_to_end(partition)

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads."""
        return self._core.assignment()

    # -- groups ------------------------------------------------------------------------------

    def _membership(self) -> TwistedGroupMembership:
        if self._group is None:
            raise ValueError("committing needs a group: create the TwistedConsumer with group_id=...")
        return self._group

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> Deferred[None]:
        """Commit ``offsets`` (default: the positions of every assigned partition); commits stay in order."""
        wanted = known_positions(self._core, self._core.assignment()) if offsets is None else offsets
        if not wanted:
            return succeed(None)
        return self._membership().commit(wanted)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The consumer's group, member id and generation, for ``send_offsets_to_transaction``."""
        return self._membership().member.group_metadata()

    def committed(self, partition: TopicPartition) -> Deferred[int | None]:
        """Fire with the group's committed offset of ``partition`` (None when nothing is committed)."""
        looked_up = self._membership().committed([partition])
        return looked_up.addCallback(lambda found: found[partition])

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching ``partitions`` (still assigned; heartbeats go on)."""
        self._core.pause(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch paused ``partitions`` again."""
        self._core.paused.difference_update(partitions)

    def paused(self) -> set[TopicPartition]:
        """The partitions paused now."""
        return set(self._core.paused)

    async def _group_step(self, group: TwistedGroupMembership) -> None:
        """Apply the membership's assignment changes and auto-commit when due."""
        changes = self._unapplied + group.take_changes()
        self._unapplied = []
        for index, change in enumerate(changes):
            try:
                await self._apply(group, change)
            except BaseException:  # a callback raised, the poll was cancelled: kept; rejoins after
                self._unapplied = changes[index:]
                group.changes_applied(index)
                raise
        if changes:
            group.changes_applied(len(changes))
        if self._auto_commit.due(self._now_ms()):
            positions = known_positions(self._core, self._core.assignment())
            if positions:
                group.commit(positions).addErrback(self._auto_commit_refused)

    def _auto_commit_refused(self, failure: Failure) -> None:
        failure.trap(BrokerError)
        # The next auto-commit (or the revocation commit) repeats it.
        self.log.info("auto-commit refused: {error}", error=failure.value)

    async def _apply(self, group: TwistedGroupMembership, change: AssignmentChange) -> None:
        """Revoke (commit first), drop lost partitions, start reading new ones from their commits."""
        if change.revoked:
            await self._callback("revoked", change.revoked)
            positions = revoked_positions(self._core, change) if self._auto_commit.enabled else {}
            if positions:
                try:
                    await group.commit(positions)
                except BrokerError as error:
                    # The generation ended meanwhile: the new owner starts from the last commit.
                    self.log.info("commit of revoked partitions refused: {error}", error=error)
        if change.lost:
            await self._callback("lost", change.lost)
        apply_change(self._core, change, await group.committed(change.assigned) if change.assigned else {})
        if change.assigned:
            await self._callback("assigned", change.assigned)

    async def _callback(self, name: str, partitions: frozenset[TopicPartition]) -> None:
        callback = self._callbacks[name]
        if callback is not None:
            await maybeDeferred(callback, set(partitions))

    async def _resolve_resets(self) -> None:
        if self._core.stale_topics:
            topics = set(self._core.stale_topics)
            self._core.stale_topics.clear()
            await self._cluster.refresh(topics, auto_create=False)
        for (topic, partition), timestamp_ms in self._core.reset_requests().items():
            node_id = self._cluster.view.leader(topic, partition)
            if node_id < 0:
                await self._cluster.refresh([topic], auto_create=False)
                node_id = self._cluster.view.leader(topic, partition)
            response = await self._cluster.request(node_id, admin.list_offsets_request(
                topic, partition, timestamp_ms, self._core.config.isolation_level))
            self._core.reset_resolved((topic, partition), timestamp_ms, admin.list_offsets_result(response))

    async def _position(self, partition: TopicPartition) -> int:
        await self._resolve_resets()
        self._core.require_positions((partition,))
        position = self._core.position(partition)
        assert position is not None
        return position

    def position(self, partition: TopicPartition) -> Deferred[int]:
        """Fire with the offset of the next record ``poll`` returns for ``partition`` (``NoOffsetForPartitionError``
        while it has none under ``auto_offset_reset="none"``)."""
        return Deferred.fromCoroutine(self._position(partition))

    async def _poll(self) -> list[Message]:
        if self._group is not None:
            await self._group_step(self._group)
        await self._resolve_resets()
        self._core.require_positions()
        self._core.raise_failure()  # held back from the last poll, which had records to return
        self._drop_overtaken_fetches()
        self._send_fetches()
        if not self._in_flight and self._group is not None:  # nothing to read yet: wait for an assignment
            await self._group.wait_for_change(self._core.config.fetch_max_wait_ms / 1000)
            return []
        messages: list[Message] = []
        in_flight, self._in_flight = self._in_flight, []
        for index, (plan, answered) in enumerate(in_flight):
            try:
                response = await answered
            except BrokerError:
                self._core.fetch_failed(plan)
                continue
            except BaseException:  # the poll was cancelled while it waited: the next poll fetches these again
                self._abandon(in_flight[index:])
                self._core.unread(messages)  # and returns the records earlier fetches of this poll brought
                raise
            assert isinstance(response, FetchResponse)
            messages += self._core.fetch_completed(plan, response)
        if messages:
            self._send_fetches()
        else:
            self._core.raise_failure()
        return messages

    def _send_fetches(self) -> None:
        """Send a fetch to each leader of partitions that have a position and no fetch in flight."""
        for plan in self._core.fetch_plans(self._cluster.view.leader):
            self._in_flight.append((plan, Deferred.fromCoroutine(self._cluster.request(plan.node_id, plan.request()))))

    def _drop_overtaken_fetches(self) -> None:
        """Abandon fetches in flight that a seek, reset, pause or assignment change made stale."""
        kept, stale = [], []
        for fetch in self._in_flight:
            (kept if self._core.fetch_current(fetch[0]) else stale).append(fetch)
        self._in_flight = kept
        self._abandon(stale)

    def _abandon(self, fetches: list[tuple[FetchPlan, Deferred[Any]]]) -> None:
        """Forget ``fetches``: their answers (or lost connections) are dropped and their partitions fetched again."""
        for plan, answered in fetches:
            self._core.fetch_abandoned(plan)
            answered.addErrback(ignore_broker_error)

    def poll(self) -> Deferred[list[Message]]:
        """Fetch once (long-polling up to ``fetch_max_wait_ms``); fire with the messages.

        Under ``auto_offset_reset="none"`` it fails with ``NoOffsetForPartitionError`` while an assigned partition
        has no position, and ``PositionOutOfRangeError`` for a position outside its log: seek, and poll again."""
        return Deferred.fromCoroutine(self._poll())

    async def _close(self) -> None:
        try:
            if self._group is not None:
                if self._auto_commit.enabled and self._group.error is None:
                    try:
                        await self.commit()
                    except BrokerError as error:
                        self.log.info("final commit refused (not a member any more): {error}", error=error)
                await self._group.close()
        finally:
            if self._group is not None:
                self._group.abandon()  # close timed out part-way: stop the membership loop all the same
            self._abandon(self._in_flight)  # closing its connection fails it
            self._in_flight = []
            self._cluster.close()

    def close(self, timeout: float | None = None) -> Deferred[None]:
        """Commit (with auto-commit), leave the group (static members stay) and close the connections;
        after ``timeout`` seconds (None: no limit) what is left is abandoned and the connections closed."""
        closing = Deferred.fromCoroutine(self._close())
        if timeout is not None:
            closing.addTimeout(timeout, self._clock(), onTimeoutCancel=lambda result, timeout: None)
        return closing


def ignore_broker_error(failure: Failure) -> None:
    """The end of an abandoned fetch: a lost connection is nobody's concern any more."""
    failure.trap(BrokerError)
