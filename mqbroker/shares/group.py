"""One share group hosted by this broker: its definition, members, partitions and waiting fetches.

Members and the push dispatcher acquire through ``acquire`` and settle through ``settle``; a fetch
that finds nothing parks until a record becomes available or its wait ends (``FetchWaiter``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall

from mqbroker.groups.model import TopicPartition
from mqbroker.model import AcknowledgeType
from mqbroker.shares.members import ShareMembers
from mqbroker.shares.messages import SharePartitionRecords
from mqbroker.shares.runtime import HostedPartition
from mqbroker.shares.settings import ShareGroupSettings, parse_settings
from mqbroker.shares.state_records import GroupDefinition


@dataclasses.dataclass(slots=True, kw_only=True)
class FetchWaiter:
    """A fetch that found nothing, waiting for records or for its time to run out."""

    member_id: str
    partitions: tuple[TopicPartition, ...]
    records_max: int
    bytes_max: int
    lease_ms: int
    answer: Deferred[list[SharePartitionRecords]]
    timer: IDelayedCall | None = None


class HostedGroup:
    """A share group served by this broker."""

    def __init__(self, group_id: str, definition: GroupDefinition, new_member_id: Callable[[str], str], *,
                 now_ms: int) -> None:
        self.group_id = group_id
        self.definition = definition
        self.settings: ShareGroupSettings = parse_settings(definition.configs)
        self.members = ShareMembers(new_member_id=new_member_id)
        self.partitions: dict[TopicPartition, HostedPartition] = {}
        self.waiters: list[FetchWaiter] = []
        #: Called when records may have become available (the push dispatcher listens).
        self.watchers: list[Callable[[], None]] = []
        #: Records sent to the dead-letter topic (or dropped without one) by this host.
        self.dead_lettered = 0
        self.definition_changed = False
        self.deleted = False
        #: When a member last joined, heartbeat or left (or the hosting began): ``unused_ms`` counts from it.
        self.last_used_ms = now_ms
        self._serving = False
        self._serve_again = False

    def redefine(self, definition: GroupDefinition) -> None:
        """New topics or configs (already validated); the partitions follow the new settings."""
        self.definition = definition
        self.settings = parse_settings(definition.configs)
        self.definition_changed = True
        for hosted in self.partitions.values():
            hosted.state.max_delivery_attempts = self.settings.max_delivery_attempts
            hosted.delay_ms = self.settings.delivery_delay_ms

    def unused_ms(self, now_ms: int) -> int:
        """How long the group has been without members (0 while it has some)."""
        return 0 if len(self.members) else max(0, now_ms - self.last_used_ms)

    def topics(self) -> frozenset[str]:
        """The group's own topics and those its members subscribe to."""
        return frozenset(self.definition.topics) | self.members.topics()

    @property
    def wants_records(self) -> bool:
        """Whether the partitions are read: someone may fetch (members, or the broker itself for a push
        subscription), or a maximum of ready records must be kept whether anyone consumes or not."""
        return len(self.members) > 0 or self.settings.push is not None or self.settings.ready_records_max is not None

    def activate(self) -> None:
        """Read ahead in every partition while someone may fetch."""
        active = self.wants_records
        for hosted in self.partitions.values():
            hosted.active = active
            hosted.read_ahead()

    # -- acquiring and settling -------------------------------------------------------------------

    def acquire(self, member_id: str, partitions: Iterable[TopicPartition], records_max: int, bytes_max: int,
                lease_ms: int, now_ms: int) -> list[SharePartitionRecords]:
        """Lease records of ``partitions`` to a member; the batches holding them, per partition."""
        answers = []
        remaining, size = records_max, 0
        for topic_partition in partitions:
            hosted = self.partitions.get(topic_partition)
            if hosted is None or remaining <= 0 or size >= bytes_max:
                continue
            ranges = hosted.state.acquire(member_id, remaining, now_ms, lease_ms, hosted.cache_end)
            if not ranges:
                continue
            remaining -= sum(r.last - r.first + 1 for r in ranges)
            records = hosted.cache.covering(ranges)
            size += len(records)
            answers.append(SharePartitionRecords(topic=hosted.topic, partition=hosted.partition, records=records,
                                                 acquired=tuple(ranges)))
        return answers

    def settle(self, member_id: str, topic_partition: TopicPartition, first: int, last: int, kind: AcknowledgeType,
               now_ms: int, *, lease_ms: int, error: str = "", available_at_ms: int = 0) -> HostedPartition | None:
        """Apply one acknowledgement; the partition it changed, or None if the member does not hold it all."""
        hosted = self.partitions.get(topic_partition)
        if hosted is None:
            return None
        settled = hosted.state.acknowledge(member_id, first, last, kind, now_ms, lease_ms=lease_ms, error=error,
                                           available_at_ms=available_at_ms)
        return hosted if settled else None

    def release_member(self, member_id: str, reason: str) -> list[HostedPartition]:
        """Everything a departed member held is released and its parked fetches answered empty (else records
        arriving later would be leased to nobody until the lease ends); the partitions that changed."""
        for waiter in [waiter for waiter in self.waiters if waiter.member_id == member_id]:
            self.finish_waiter(waiter, [])
        return [hosted for hosted in self.partitions.values() if hosted.state.release_member(member_id, reason)]

    def assignment(self, member_topics: Iterable[str], partition_counts: Mapping[str, int]) -> list[TopicPartition]:
        """Every partition a member may fetch from: all partitions of the group's and its own topics."""
        topics = sorted(set(self.definition.topics) | set(member_topics))
        return [TopicPartition(topic, partition) for topic in topics for partition in range(partition_counts.get(topic, 0))]

    def acquired_by(self, member_id: str) -> int:
        """Records leased to one member (describe)."""
        return sum(hosted.state.acquired_count(member_id) for hosted in self.partitions.values())

    # -- waiting fetches -----------------------------------------------------------------------

    def serve_waiters(self, now_ms: int) -> None:
        """Answer parked fetches that can now acquire something, oldest first; tell the watchers.

        Answering a fetch changes the state, which serves the waiters again: such a nested call
        only asks this loop to go round once more.
        """
        if self._serving:
            self._serve_again = True
            return
        self._serving = True
        try:
            self._serve_again = True
            while self._serve_again:
                self._serve_again = False
                for waiter in list(self.waiters):
                    answers = self.acquire(waiter.member_id, waiter.partitions, waiter.records_max, waiter.bytes_max,
                                           waiter.lease_ms, now_ms)
                    if answers:
                        self.finish_waiter(waiter, answers)
                for watcher in list(self.watchers):
                    watcher()
        finally:
            self._serving = False

    def finish_waiter(self, waiter: FetchWaiter, answers: list[SharePartitionRecords]) -> None:
        """Answer one parked fetch."""
        if waiter in self.waiters:
            self.waiters.remove(waiter)
        if waiter.timer is not None and waiter.timer.active():
            waiter.timer.cancel()
        if not waiter.answer.called:
            waiter.answer.callback(answers)

    def fail_waiters(self, error: Exception) -> None:
        """The group is no longer served here: fail every parked fetch."""
        for waiter in list(self.waiters):
            self.waiters.remove(waiter)
            if waiter.timer is not None and waiter.timer.active():
                waiter.timer.cancel()
            if not waiter.answer.called:
                waiter.answer.errback(error)
