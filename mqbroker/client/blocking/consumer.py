"""The blocking ``Consumer``: fetches from partition leaders on the caller's thread, in ``poll``.

The logic (positions, fetch plans, offset resets) is the pure ``ConsumerCore``; with a group,
``GroupMembership`` (``group.py``) heartbeats on its own thread and hands assignment changes
to ``poll``, which applies them between fetches. Before ``poll`` returns records it sends the next
fetch (Kafka's fetch pipelining): the broker holds it while the application handles the records
and answers it as soon as new records are durable, instead of waiting for the next ``poll``.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any, NamedTuple

from mqbroker.client.blocking.cluster import BlockingCluster, ClusterRequests, wall_clock_ms
from mqbroker.client.blocking.group import GroupMembership, remaining_s, resolve_callback
from mqbroker.client.connection import BlockingConnection, BrokerUnavailableError
from mqbroker.client.consumer import (
    ConsumerConfig,
    ConsumerCore,
    FetchedValues,
    FetchPlan,
    Message,
    OffsetReset,
    TopicPartition,
    parse_isolation_level,
)
from mqbroker.client.group_member import (
    ConsumerGroupMetadata,
    AssignmentChange,
    AutoCommit,
    GroupMember,
    GroupSettings,
    apply_change,
    known_positions,
    revoked_positions,
)
from mqbroker.client.security import ClientSecurity
from mqbroker.errors import BrokerError
from mqbroker.protocols.native.messages import FetchResponse
from mqbroker.records.readable import UnreadableBatch


class _Fetch(NamedTuple):
    """A fetch request in flight."""

    plan: FetchPlan
    connection: BlockingConnection
    correlation_id: int
    #: ``time.monotonic()`` when it was sent (its answer is due within the cluster's request timeout).
    sent_at: float


class Consumer:
    """Reads partitions from their leaders; ``poll`` returns ``Message``s in offset order (``poll_values`` only
    their values, per partition).

    Without ``group_id`` it reads every partition of ``topics`` (or what ``assign`` names).
    With ``group_id`` it joins the group and reads the partitions the group assigns it
    (``topics`` or a ``pattern``); a background thread heartbeats. Committing is at-least-once
    by default: auto-commit commits the positions of the previous ``poll`` (records the
    application has processed) every ``auto_commit_interval_ms``, on revocation and on close.
    """

    def __init__(
        self,
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
        on_assigned: Callable[[set[TopicPartition]], None] | None = None,
        on_revoked: Callable[[set[TopicPartition]], None] | None = None,
        on_lost: Callable[[set[TopicPartition]], None] | None = None,
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 50 * 1024 * 1024,
        partition_max_bytes: int = 8 * 1024 * 1024,
        request_timeout_ms: int = 30_000,
        client_id: str = "mqbroker-consumer",
        security: ClientSecurity | None = None,
        on_unreadable: Callable[[UnreadableBatch], None] | None = None,
        isolation_level: str = "read_uncommitted",
    ) -> None:
        """``on_unreadable``: pass over a fetched batch that does not decode, reporting it there (default: ``poll``
        raises ``CorruptMessageError`` and the position stays before it). ``isolation_level="read_committed"``:
        see only committed transactions' records (and non-transactional ones), up to the last stable offset."""
        if group_id is None and (enable_auto_commit or pattern is not None or group_instance_id is not None):
            raise ValueError("enable_auto_commit, pattern and group_instance_id need a group_id")
        self._core = ConsumerCore(
            ConsumerConfig(
                auto_offset_reset=OffsetReset(auto_offset_reset),
                fetch_max_wait_ms=fetch_max_wait_ms,
                fetch_min_bytes=fetch_min_bytes,
                fetch_max_bytes=fetch_max_bytes,
                partition_max_bytes=partition_max_bytes,
                isolation_level=parse_isolation_level(isolation_level),
            ),
            on_unreadable,
        )
        self._cluster = BlockingCluster(bootstrap, client_id, request_timeout_ms / 1000 + fetch_max_wait_ms / 1000, security)
        self._admin = ClusterRequests(self._cluster)
        #: The fetch sent before the last ``poll`` returned, parked at the broker until records arrive.
        self._in_flight: list[_Fetch] = []
        #: Assignment changes taken from the group whose application raised: the next poll applies them again.
        self._unapplied: list[AssignmentChange] = []
        topics = list(topics)
        self._group: GroupMembership | None = None
        if group_id is not None:
            settings = GroupSettings(
                group_id=group_id, group_instance_id=group_instance_id, session_timeout_ms=session_timeout_ms,
                max_poll_interval_ms=max_poll_interval_ms, heartbeat_interval_ms=heartbeat_interval_ms,
            )
            self._group = GroupMembership(
                GroupMember(settings, topics), bootstrap=self._cluster.bootstrap, client_id=client_id,
                request_timeout_s=request_timeout_ms / 1000, pattern=re.compile(pattern) if pattern else None,
                security=security,
            )
            self._auto_commit = AutoCommit(auto_commit_interval_ms if enable_auto_commit is not False else None, wall_clock_ms())
            self._on_assigned = resolve_callback(on_assigned)
            self._on_revoked = resolve_callback(on_revoked)
            self._on_lost = resolve_callback(on_lost)
        elif topics:
            self._cluster.refresh(topics)
            self.assign(
                (topic, partition)
                for topic in topics
                for partition in range(self._cluster.view.partition_count(topic) or 0)
            )

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these ``(topic, partition)`` pairs."""
        self._core.assign(partitions)

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads."""
        return self._core.assignment()

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next."""
        self._core.seek(partition, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Read the partitions (default: all assigned) from their first record."""
        for partition in partitions or self._core.assignment():
            self._core.seek_to_beginning(partition)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Read only records produced from now on."""
        for partition in partitions or self._core.assignment():
            self._core.seek_to_end(partition)

    def seek_to_timestamp(self, partition: TopicPartition, timestamp_ms: int) -> None:
        """Read ``partition`` from its first record at or after ``timestamp_ms``."""
        self._core.seek_to_timestamp(partition, timestamp_ms)

    def position(self, partition: TopicPartition) -> int:
        """The offset of the next record ``poll`` returns for ``partition`` (``NoOffsetForPartitionError`` while it
        has none under ``auto_offset_reset="none"``)."""
        self._resolve_resets()
        self._core.require_positions((partition,))
        position = self._core.position(partition)
        assert position is not None
        return position

    # -- groups ------------------------------------------------------------------------------

    def _membership(self) -> GroupMembership:
        if self._group is None:
            raise ValueError("committing needs a group: create the Consumer with group_id=...")
        return self._group

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (default: the positions of every assigned partition) and wait."""
        wanted = known_positions(self._core, self._core.assignment()) if offsets is None else offsets
        if wanted:
            self._membership().commit(wanted)

    def commit_async(self, offsets: dict[TopicPartition, int] | None = None) -> Future[None]:
        """Commit without waiting; the future holds the outcome (commits stay in order)."""
        wanted = known_positions(self._core, self._core.assignment()) if offsets is None else offsets
        return self._membership().commit_async(wanted)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The consumer's group, member id and generation, for ``Producer.send_offsets_to_transaction``."""
        return self._membership().member.group_metadata()

    def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset of ``partition`` (None when nothing is committed)."""
        return self._membership().committed([partition])[partition]

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching ``partitions`` (still assigned; heartbeats go on)."""
        self._core.pause(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch paused ``partitions`` again."""
        self._core.paused.difference_update(partitions)

    def paused(self) -> set[TopicPartition]:
        """The partitions paused now."""
        return set(self._core.paused)

    def _group_step(self) -> None:
        """Apply the membership's assignment changes and auto-commit when due (on the poll thread)."""
        group = self._group
        if group is None:
            return
        changes = self._unapplied + group.take_changes()
        self._unapplied = []
        for index, change in enumerate(changes):
            try:
                self._apply(group, change)
            except BaseException:  # a callback raised, a lookup failed: kept; the member rejoins after
                self._unapplied = changes[index:]
                group.changes_applied(index)
                raise
        if changes:
            group.changes_applied(len(changes))
        if self._auto_commit.due(wall_clock_ms()):
            positions = known_positions(self._core, self._core.assignment())
            if positions:
                group.commit_async(positions)  # a refused auto-commit is repeated by the next one

    def _apply(self, group: GroupMembership, change: AssignmentChange) -> None:
        """Revoke (commit first), drop lost partitions, start reading new ones from their commits."""
        if change.revoked:
            self._on_revoked(set(change.revoked))
            positions = revoked_positions(self._core, change) if self._auto_commit.enabled else {}
            if positions:
                try:
                    group.commit(positions)
                except BrokerError:
                    pass  # the generation ended meanwhile: the new owner starts from the last commit
        if change.lost:
            self._on_lost(set(change.lost))
        apply_change(self._core, change, group.committed(change.assigned) if change.assigned else {})
        if change.assigned:
            self._on_assigned(set(change.assigned))

    def poll(self, timeout: float = 1.0) -> list[Message]:
        """Return the next messages, waiting up to ``timeout`` seconds for some to arrive.

        Under ``auto_offset_reset="none"`` it raises ``NoOffsetForPartitionError`` while an assigned partition has
        no position (no committed offset, no seek), and ``PositionOutOfRangeError`` for a position outside its
        partition's log (kept as it is): seek those partitions, and poll again."""
        return self._poll(timeout, self._core.fetch_completed, self._core.unread)

    def poll_values(self, timeout: float = 1.0, *, with_keys: bool = False) -> list[FetchedValues]:
        """``poll`` without a ``Message`` per record: per partition, the values (``with_keys``: (key, value) pairs)
        in offset order, with the first value's offset and the position after them (``next_offset``).

        Positions, commits and read_committed work as with ``poll`` (the two may be mixed): no offset, headers or
        timestamp per record, and offsets between ``first_offset`` and ``next_offset`` may have gaps."""
        return self._poll(timeout, functools.partial(self._core.fetch_completed_values, with_keys=with_keys),
                          self._core.unread_values)

    def _poll(self, timeout: float, take: Callable[[FetchPlan, FetchResponse], list[Any]],
              unread: Callable[[list[Any]], None]) -> list[Any]:
        deadline = time.monotonic() + timeout
        while True:
            self._group_step()
            self._refresh_stale()
            self._resolve_resets()
            self._core.require_positions()
            remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
            taken = self._fetch_once(remaining_ms, take, unread)
            if taken or time.monotonic() >= deadline:
                return taken

    def _refresh_stale(self) -> None:
        if self._core.stale_topics:
            topics = set(self._core.stale_topics)
            self._core.stale_topics.clear()
            try:
                self._cluster.refresh(topics, auto_create=False)
            except BrokerUnavailableError:
                self._core.stale_topics.update(topics)  # that broker is gone (and dropped): the next poll asks another

    def _resolve_resets(self) -> None:
        requests = self._core.reset_requests()
        if not requests:
            return
        for (topic, partition), timestamp_ms in requests.items():
            offset = self._admin.list_offset(topic, partition, timestamp_ms, self._core.config.isolation_level)
            self._core.reset_resolved((topic, partition), timestamp_ms, offset)

    def _fetch_once(self, max_wait_ms: int, take: Callable[[FetchPlan, FetchResponse], list[Any]],
                    unread: Callable[[list[Any]], None]) -> list[Any]:
        """Fetch for up to ``max_wait_ms``: the fetch the last poll left in flight, and new ones for partitions
        without one. Before returning records, send the next fetch, so one waits at the broker meanwhile.

        Interrupted (KeyboardInterrupt, an ``on_unreadable`` callback raising, a failure that is not the broker's),
        it abandons every fetch in flight and reads the records it took again: the next poll returns them. ``take``
        turns an answer into what the poll returns (messages, or values), ``unread`` gives that back."""
        self._core.raise_failure()  # held back from the last poll, which had records to return
        self._drop_overtaken_fetches()
        deadline = time.monotonic() + max_wait_ms / 1000
        parked = len(self._in_flight)  # sent with the whole fetch_max_wait_ms: wait only as long as this poll may
        messages: list[Any] = []
        try:
            self._send_fetches(max_wait_ms)
            if not self._in_flight:
                time.sleep(min(max_wait_ms, 100) / 1000)  # nothing fetchable yet: do not spin
                return []
            for index, fetch in enumerate(list(self._in_flight)):
                # a fresh fetch was sent with this poll's wait: the broker answers within it
                timeout_s = max(0.0, deadline - time.monotonic()) if index < parked else self._cluster.timeout_s
                self._complete(fetch, timeout_s, take, messages)
            if messages:
                self._send_fetches(self._core.config.fetch_max_wait_ms)
        except BaseException:
            self._abandon(self._in_flight)
            self._in_flight = []
            unread(messages)
            raise
        if not messages:
            self._core.raise_failure()
        return messages

    def _drop_overtaken_fetches(self) -> None:
        """Abandon the fetch in flight if a seek, reset, pause or assignment change since made it stale."""
        kept, stale = [], []
        for fetch in self._in_flight:
            (kept if self._core.fetch_current(fetch.plan) else stale).append(fetch)
        self._in_flight = kept
        self._abandon(stale)

    def _abandon(self, fetches: list[_Fetch]) -> None:
        """Forget ``fetches``: their answers are dropped when they come and their partitions fetched again."""
        for fetch in fetches:
            fetch.connection.abandon(fetch.correlation_id)
            self._core.fetch_abandoned(fetch.plan)

    def _send_fetches(self, max_wait_ms: int) -> None:
        """Send a fetch to each leader of partitions that have a position and no fetch in flight (``_in_flight``)."""
        plans = self._core.fetch_plans(self._cluster.view.leader)
        for index, plan in enumerate(plans):
            try:
                connection = self._cluster.connection(plan.node_id)
                self._in_flight.append(
                    _Fetch(plan, connection, connection.send(plan.request(max_wait_ms)), time.monotonic()))
            except BrokerUnavailableError:
                self._cluster.drop(plan.node_id)
                self._core.fetch_failed(plan)
            except BaseException:  # e.g. a broker that refuses this client's login: these are fetched again later
                for unsent in plans[index:]:
                    self._core.fetch_abandoned(unsent)
                raise

    def _complete(self, fetch: _Fetch, timeout_s: float, take: Callable[[FetchPlan, FetchResponse], list[Any]],
                  into: list[Any]) -> None:
        """Wait up to ``timeout_s`` for ``fetch``'s answer and add its records to ``into``; unanswered, it stays in
        flight until the request timeout, then counts as lost."""
        try:
            response = fetch.connection.wait_response(fetch.correlation_id, timeout_s)
            if response is None and time.monotonic() - fetch.sent_at >= self._cluster.timeout_s:
                fetch.connection.abandon(fetch.correlation_id)
                raise BrokerUnavailableError(f"no fetch answer from {fetch.connection.address}")
        except BrokerError:
            self._in_flight.remove(fetch)
            if self._cluster.connections.get(fetch.plan.node_id) is fetch.connection:  # not reconnected meanwhile
                self._cluster.drop(fetch.plan.node_id)
            self._core.fetch_failed(fetch.plan)
            return
        if response is None:
            return  # it stays in flight
        self._in_flight.remove(fetch)
        assert isinstance(response, FetchResponse)
        into += take(fetch.plan, response)

    def close(self, timeout: float | None = None) -> None:
        """Commit (with auto-commit), leave the group (static members stay) and close the connections,
        waiting on the broker for at most ``timeout`` seconds in all (None: a request timeout per step)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            if self._group is not None:
                if self._auto_commit.enabled:
                    positions = known_positions(self._core, self._core.assignment())
                    try:
                        if positions:
                            self._group.commit(positions, remaining_s(deadline))
                    except (BrokerError, TimeoutError):
                        pass  # not a member any more, or out of time: the last auto-commit stands
                self._group.close(timeout_s=remaining_s(deadline))
        finally:
            self._in_flight = []  # closing its connection ends it
            self._cluster.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
