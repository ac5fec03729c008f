"""The blocking ``Consumer``: fetches from partition leaders on the caller's thread, in ``poll``.

The logic (positions, fetch plans, offset resets) is the pure ``ConsumerCore``; with a group,
``GroupMembership`` (``group.py``) heartbeats on its own thread and hands assignment changes
to ``poll``, which applies them between fetches.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future

from mqbroker.client.blocking.cluster import BlockingCluster, ClusterRequests, wall_clock_ms
from mqbroker.client.blocking.group import GroupMembership, remaining_s, resolve_callback
from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.client.consumer import (
    ConsumerConfig,
    ConsumerCore,
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


class Consumer:
    """Reads partitions from their leaders; ``poll`` returns ``Message``s in offset order.

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
        """The offset of the next record ``poll`` returns for ``partition``."""
        self._resolve_resets()
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
        changes = group.take_changes()
        for change in changes:
            self._apply(group, change)
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
        """Return the next messages, waiting up to ``timeout`` seconds for some to arrive."""
        deadline = time.monotonic() + timeout
        while True:
            self._group_step()
            self._refresh_stale()
            self._resolve_resets()
            remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
            messages = self._fetch_once(remaining_ms)
            if messages or time.monotonic() >= deadline:
                return messages

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

    def _fetch_once(self, max_wait_ms: int) -> list[Message]:
        plans = self._core.fetch_plans(self._cluster.view.leader)
        sent = []
        for plan in plans:
            try:
                connection = self._cluster.connection(plan.node_id)
                correlation_id = connection.send(plan.request(max_wait_ms))
            except BrokerUnavailableError:
                self._cluster.drop(plan.node_id)
                self._core.fetch_failed(plan)
                continue
            sent.append((plan, connection, correlation_id))
        messages: list[Message] = []
        for plan, connection, correlation_id in sent:
            try:
                response = connection.await_response(correlation_id, self._cluster.timeout_s)
            except BrokerError:
                self._cluster.drop(plan.node_id)
                self._core.fetch_failed(plan)
                continue
            assert isinstance(response, FetchResponse)
            messages += self._core.fetch_completed(plan, response)
        if not sent and not messages:
            time.sleep(min(max_wait_ms, 100) / 1000)  # nothing fetchable yet: do not spin
        return messages

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
            self._cluster.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
