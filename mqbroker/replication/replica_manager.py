"""The replicas this broker holds (tx-light): it leads some and follows the others, as the metadata image says.

For a partition it leads, a ``LeaderPartition`` tracks the followers' progress, the high watermark
and the acks=all produces waiting for it; the replica manager feeds it (durable ends from the
``Flusher``, follower positions from replica fetches), proposes ISR changes to the controller
and wakes the fetches waiting for the high watermark. For a partition it follows, it tells the
follower (``replication.fetcher``) which leader to fetch from, and applies the answers: appends,
truncation where the logs diverged (by leader epoch), resets below the leader's log start.
No per-record work: batches are appended as they came.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from mqbroker import errors
from mqbroker.cluster.metadata import MetadataImage, PartitionState
from mqbroker.cluster.metadata_records import AlterPartition
from mqbroker.config import BrokerConfig
from mqbroker.durability.flusher import Flusher
from mqbroker.interfaces import IClusterView
from mqbroker.model import FetchPosition, FetchResult, PartitionReassignment
from mqbroker.records.header import read_header
from mqbroker.replication.decisions import diverging_epoch, truncation_offset
from mqbroker.replication.leadership import LeaderPartition
from mqbroker.storage.log import PartitionLog
from mqbroker.storage.manager import LogManager

PartitionKey = tuple[str, int]
#: Leaderships taken up at once that are logged one line each; more are summed up in one line
#: (a broker starting with 10,000 partitions spent seconds formatting a line per partition).
LEADERSHIPS_LOGGED_MAX = 20


class WaitingReaders(Protocol):
    """The fetches long-polling a log (``core.fetch.WaitingFetches``): woken when it has more to give."""

    def wake(self, partition_log: PartitionLog, followers_only: bool = False) -> None: ...


class Follower(Protocol):
    """Fetches from the leaders of the partitions this broker follows (``replication.fetcher.ReplicaFetcher``)."""

    def follow(self, following: dict[PartitionKey, tuple[int, int]]) -> None: ...


def check_enough_replicas(leader: LeaderPartition, min_insync: int) -> None:
    """An acks=all write is refused, before anything is appended, while the ISR is too small."""
    if len(leader.replicas.isr) < min_insync:
        raise errors.NotEnoughReplicasError(
            f"{leader.name} has {len(leader.replicas.isr)} in-sync replica(s) "
            f"{sorted(leader.replicas.isr)}, fewer than min.insync.replicas={min_insync}; nothing was written"
        )


def divergence(partition_log: PartitionLog, position: FetchPosition) -> tuple[int, int] | None:
    """(epoch, end offset) where a follower's log left ours, or None while it agrees (KIP-279)."""
    end_offset = partition_log.log_end_offset
    diverged = diverging_epoch(lambda epoch: partition_log.epochs.end_offset_for(epoch, end_offset),
                               position.last_fetched_epoch, position.offset)
    if diverged is None and position.offset > end_offset:
        diverged = (partition_log.epochs.latest_epoch, end_offset)  # a follower ahead of us: cut to our end
    return diverged


class ReplicaManager:
    """Leads and follows this broker's partitions: high watermarks, ISR changes, follower appends."""

    log = Logger()

    def __init__(
        self,
        *,
        config: BrokerConfig,
        clock: IReactorTime,
        logs: LogManager,
        cluster: IClusterView,
        readers: WaitingReaders,
        flusher_factory: Callable[[Callable[[Iterable[PartitionLog]], None]], Flusher],
        follower_factory: Callable[[ReplicaManager], Follower],
    ) -> None:
        """``flusher_factory(on_durable)`` builds the group-commit flusher; ``follower_factory(self)`` the follower."""
        self._config = config
        self._clock = clock
        self._logs = logs
        self._cluster = cluster
        self._readers = readers
        #: Fsyncs the logs (group commit); what it made durable advances the high watermarks.
        self.flusher = flusher_factory(self._on_durable)
        #: Partitions this broker leads, by (topic, partition) and by log.
        self._leaders: dict[PartitionKey, LeaderPartition] = {}
        self._leader_of_log: dict[PartitionLog, LeaderPartition] = {}
        #: The log each led partition had when its leadership began (resigning finds it without a scan).
        self._log_led: dict[PartitionKey, PartitionLog] = {}
        #: The leader's high watermark as last reported to this broker while following.
        self._follower_high_watermarks: dict[PartitionKey, int] = {}
        #: ``leader``'s answers, valid for the image ``_found_in`` at its applied index ``_found_at`` and until a
        #: leadership begins or ends here (every produce and fetch asks, several times each).
        self._found: dict[PartitionKey, tuple[PartitionLog, LeaderPartition]] = {}
        self._found_in: object = None
        self._found_at = -1
        self._follower = follower_factory(self)

    def _now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    # -- leading ---------------------------------------------------------------------------

    def partition_log(self, topic: str, partition: int) -> PartitionLog:
        """The local log of a partition this broker leads; others answer NOT_LEADER_OR_FOLLOWER."""
        return self.leader(topic, partition)[0]

    def leader(self, topic: str, partition: int) -> tuple[PartitionLog, LeaderPartition]:
        """The log and leader state of a partition this broker leads (NOT_LEADER_OR_FOLLOWER otherwise)."""
        image = self._cluster.image
        if image is self._found_in and image.applied_index == self._found_at:
            found = self._found.get((topic, partition))
            if found is not None:
                return found
        else:
            self._found.clear()
            self._found_in, self._found_at = image, image.applied_index
        record = image.topics.get(topic)
        if record is None:
            raise errors.UnknownTopicOrPartitionError(
                f"topic {topic!r} does not exist; create it with `mqbroker topics create {topic}` "
                "or enable auto_create_topics"
            )
        if not 0 <= partition < len(record.partitions):
            raise errors.UnknownTopicOrPartitionError(
                f"topic {topic!r} has partitions 0..{len(record.partitions) - 1}; partition {partition} does not exist"
            )
        state = record.partitions[partition]
        leader = self._leaders.get((topic, partition))
        if state.leader_id != self._config.node_id or leader is None:
            raise errors.NotLeaderError(
                f"{topic}-{partition} is led by broker {state.leader_id}, not broker {self._config.node_id};"
                " refresh metadata and retry there"
            )
        found = self._found[(topic, partition)] = (self._logs.get(topic, partition), leader)
        return found

    def leading(self, key: PartitionKey) -> LeaderPartition | None:
        """The leader state of ``key`` if this broker leads it now."""
        return self._leaders.get(key)

    def min_insync_replicas(self, topic: str) -> int:
        """The topic's ``min.insync.replicas``, else this broker's dynamic default (its own, the cluster's), else its
        static one."""
        record = self._cluster.topic(topic)
        configured = (record.configs if record is not None else {}).get("min.insync.replicas")
        if configured is None:
            configured = self._cluster.image.dynamic_topic_default(self._config.node_id, "min.insync.replicas")
        if configured is None:
            configured = self._config.topic_defaults.get("min.insync.replicas", "1")
        return int(configured)

    def high_watermark(self, partition_log: PartitionLog) -> int:
        """The end of what consumers may see: what every in-sync replica holds (durably, under the sync policy)."""
        leader = self._leader_of_log.get(partition_log)
        if leader is not None:
            return leader.high_watermark
        return _leader_end(partition_log)

    def leader_appended(self, partition_log: PartitionLog) -> bool:
        """After a leader's append: schedule the fsync (``sync`` policy, returns True) or advance the
        high watermark now; wake the followers long-polling for new batches."""
        sync = partition_log.config.flush_policy == "sync"
        if sync:
            self.flusher.request_flush(partition_log)
        else:
            self._progress(partition_log)
        self._readers.wake(partition_log, followers_only=True)  # consumers wait for the high watermark
        return sync

    def follower_fetched(self, replica_id: int, position: FetchPosition, now_ms: int) -> None:
        """A follower holds everything below its fetch offset (if its log agrees with ours up to there)."""
        key = (position.topic, position.partition)
        leader = self._leaders.get(key)
        if leader is None or position.current_leader_epoch != leader.leader_epoch:
            return
        partition_log = self._logs.get(*key)
        if position.offset > partition_log.log_end_offset or divergence(partition_log, position) is not None:
            return
        leader.replicas.follower_fetched(replica_id, position.offset, partition_log.log_end_offset, now_ms)
        self._progress(partition_log)

    def _on_durable(self, logs: Iterable[PartitionLog]) -> None:
        for partition_log in logs:
            self._progress(partition_log)

    def _progress(self, partition_log: PartitionLog) -> None:
        """Something moved (an fsync, a follower, the ISR): advance the high watermark, wake readers."""
        leader = self._leader_of_log.get(partition_log)
        if leader is None:
            self._readers.wake(partition_log)  # a log nobody leads here is read up to its own durable end
        else:
            leader.advance(_leader_end(partition_log), lambda: self._readers.wake(partition_log))

    # -- the ISR ---------------------------------------------------------------------------

    def check_isr(self) -> None:
        """Propose ISR changes for led partitions: lagging followers out, caught-up ones in."""
        now_ms = self._now_ms()
        for (topic, partition), leader in list(self._leaders.items()):
            isr = leader.replicas.isr_change(now_ms, self._config.replica_lag_time_max_ms, leader.epoch_start_offset)
            if isr is None:
                continue
            leader.replicas.propose(isr)
            self.log.info("{partition}: proposing ISR {isr} (was {old})", partition=leader.name, isr=sorted(isr),
                          old=sorted(leader.replicas.isr))
            record = AlterPartition(topic=topic, partition=partition, leader_id=self._config.node_id,
                                    leader_epoch=leader.leader_epoch, partition_epoch=leader.partition_epoch,
                                    isr=tuple(sorted(isr)))
            proposed = self._cluster.alter_partition(record)
            proposed.addErrback(self._isr_proposal_failed, leader)

    def _isr_proposal_failed(self, failure: Any, leader: LeaderPartition) -> None:
        failure.trap(errors.BrokerError)
        self.log.info("{partition}: ISR change not committed: {error}", partition=leader.name,
                      error=failure.getErrorMessage())
        leader.replicas.proposal_failed()

    # -- leadership changes ----------------------------------------------------------------

    def partitions_changed(self, image: MetadataImage) -> None:
        """The image changed: take up or give up leaderships, and tell the follower what to follow."""
        node_id, now_ms = self._config.node_id, self._now_ms()
        following: dict[PartitionKey, tuple[int, int]] = {}
        current: set[PartitionKey] = set()
        holds = self._logs.holds
        taken_up: list[tuple[PartitionKey, PartitionState]] = []
        for topic in image.topics.values():
            for number, state in enumerate(topic.partitions):
                key = (topic.name, number)
                if node_id not in state.replicas or not holds(*key):
                    continue
                if state.leader_id == node_id:
                    current.add(key)
                    leader = self._leaders.get(key)
                    if leader is None or leader.leader_epoch != state.leader_epoch:
                        taken_up.append((key, state))
                    else:
                        leader.update(state, now_ms)
                        self._progress(self._logs.get(*key))
                elif state.leader_id >= 0:
                    following[key] = (state.leader_id, state.leader_epoch)
        for key, state in taken_up:
            self._become_leader(key, state, now_ms, announce=len(taken_up) <= LEADERSHIPS_LOGGED_MAX)
        if len(taken_up) > LEADERSHIPS_LOGGED_MAX:
            self.log.info("leading {count} more partitions at new epochs (first: {first})", count=len(taken_up),
                          first=", ".join(f"{topic}-{number}" for (topic, number), _ in taken_up[:LEADERSHIPS_LOGGED_MAX]))
        for key in set(self._leaders) - current:
            self._resign(key)
        self._follower.follow(following)

    def _become_leader(self, key: PartitionKey, state: PartitionState, now_ms: int, announce: bool = True) -> None:
        self._found.clear()
        old = self._leaders.get(key)
        if old is not None:
            self._resign(key)
        partition_log = self._logs.get(*key)
        # Remember where the new epoch starts (a follower asking about a later epoch we never saw learns
        # where we differ); written with the epoch's first batch, so taking up leaderships costs no fsync.
        partition_log.start_leader_epoch(state.leader_epoch)
        start_high_watermark = min(self._follower_high_watermarks.pop(key, 0), partition_log.log_end_offset)
        leader = LeaderPartition(
            name=f"{key[0]}-{key[1]}", node_id=self._config.node_id, state=state, high_watermark=start_high_watermark,
            epoch_start_offset=partition_log.log_end_offset, clock=self._clock, now_ms=now_ms,
        )
        self._leaders[key] = leader
        self._leader_of_log[partition_log] = leader
        self._log_led[key] = partition_log
        if announce:
            self.log.info("leading {partition} at epoch {epoch} (ISR {isr})", partition=leader.name,
                          epoch=state.leader_epoch, isr=state.isr)
        self._progress(partition_log)

    def _resign(self, key: PartitionKey) -> None:
        self._found.clear()
        leader = self._leaders.pop(key)
        leader.resign(errors.NotLeaderError(f"{leader.name}: leadership moved to another broker; retry there"))
        partition_log = self._log_led.pop(key)
        if self._leader_of_log.get(partition_log) is leader:
            del self._leader_of_log[partition_log]
            self._follower_high_watermarks[key] = leader.high_watermark
            self._readers.wake(partition_log)

    def stop(self) -> None:
        """Stop following and give up every leadership (waiting acks=all produces fail: retry elsewhere)."""
        self._follower.follow({})
        for key in list(self._leaders):
            self._resign(key)

    # -- following (``replication.fetcher.ReplicaSink``) -------------------------------------

    def follower_position(self, key: PartitionKey) -> tuple[int, int] | None:
        """(fetch offset, last fetched leader epoch) of a partition we follow; None if we lead it or hold no log."""
        if key in self._leaders or not self._logs.holds(*key):
            return None
        partition_log = self._logs.get(*key)
        return partition_log.log_end_offset, partition_log.epochs.latest_epoch

    def follower_append(self, key: PartitionKey, result: FetchResult) -> PartitionLog | None:
        """Apply a leader's answer to our fetch: truncate where told, append the batches; return the log appended to."""
        if key in self._leaders or not self._logs.holds(*key):
            return None
        partition_log = self._logs.get(*key)
        if result.diverging_end_offset >= 0:
            end_offset = partition_log.log_end_offset
            cut = truncation_offset(lambda epoch: partition_log.epochs.end_offset_for(epoch, end_offset), end_offset,
                                    result.diverging_epoch, result.diverging_end_offset)
            self.log.info("{topic}-{partition}: truncating to {offset} (diverged from the leader after epoch {epoch})",
                          topic=key[0], partition=key[1], offset=cut, epoch=result.diverging_epoch)
            partition_log.truncate_to(cut)
            return None
        appended = None
        if result.records:
            first_offset = read_header(result.records).base_offset
            if partition_log.log_start_offset == partition_log.log_end_offset > first_offset:
                # Restarted at the leader's log start, which lies inside this batch: keep the whole batch.
                partition_log.truncate_fully_and_start_at(first_offset)
            partition_log.append(result.records, self._now_ms(), assign_offsets=False)
            if result.log_start_offset > partition_log.log_start_offset:
                partition_log.delete_records_before(min(result.log_start_offset, partition_log.log_end_offset))
            appended = partition_log
        self._follower_high_watermarks[key] = min(result.high_watermark, partition_log.log_end_offset)
        return appended

    def follower_reset(self, key: PartitionKey, leader_log_start_offset: int) -> bool:
        """The leader's log now starts above our end (retention, delete-records): empty ours and go on from its start.

        True when the log was reset (the next fetch asks from the leader's log start).
        """
        if key in self._leaders or not self._logs.holds(*key):
            return False
        partition_log = self._logs.get(*key)
        if partition_log.log_end_offset >= leader_log_start_offset:
            return False
        self.log.info("{topic}-{partition}: our log ends at {end}, below the leader's log start {start}; starting "
                      "again from there", topic=key[0], partition=key[1], end=partition_log.log_end_offset,
                      start=leader_log_start_offset)
        partition_log.truncate_fully_and_start_at(leader_log_start_offset)
        return True

    def wait_durable(self, partition_log: PartitionLog) -> Deferred[None]:
        """Fire once everything appended to ``partition_log`` so far is on disk (a follower's next fetch waits)."""
        if partition_log.config.flush_policy != "sync" or partition_log.log_end_offset == 0:
            return succeed(None)
        return self.flusher.wait_durable(partition_log, partition_log.log_end_offset - 1)

    # -- reassignment ----------------------------------------------------------------------

    def reassign(self, topic: str, partition: int, target_replicas: Sequence[int]) -> Deferred[None]:
        """Start moving a partition's replicas to ``target_replicas`` through the controller.

        The targets join as followers; once all are in the ISR the controller drops the others
        (and moves the leadership into the targets), and each broker's image change does the rest.
        """
        return self._cluster.reassign_partition(topic, partition, tuple(target_replicas))

    def reassignments(self, topics: Sequence[str] | None) -> list[PartitionReassignment]:
        """The reassignments in progress (of ``topics``; None: every topic)."""
        ongoing = []
        for topic in self._cluster.image.topics.values():
            if topics is not None and topic.name not in topics:
                continue
            for number, state in enumerate(topic.partitions):
                if not state.target_replicas:
                    continue
                ongoing.append(PartitionReassignment(
                    topic=topic.name, partition=number, replicas=tuple(state.replicas),
                    target_replicas=tuple(state.target_replicas),
                    adding_replicas=tuple(r for r in state.target_replicas if r not in state.isr),
                    removing_replicas=tuple(r for r in state.replicas if r not in state.target_replicas),
                ))
        return ongoing


def _leader_end(partition_log: PartitionLog) -> int:
    """The leader's own contribution to the high watermark: its durable end under the sync policy."""
    if partition_log.config.flush_policy == "sync":
        return partition_log.durable_end_offset
    return partition_log.log_end_offset
