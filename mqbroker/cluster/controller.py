"""Controller decisions: where partitions go and which brokers' sessions expired.

Pure: it reads a ``MetadataImage`` and the time it is given, and returns records to propose.
Heartbeats reach the controller as committed ``BrokerHeartbeat`` records; the Raft leader
remembers when it saw each one (in memory, as KRaft's controller does) and fences a broker
whose session passes without one. Every voter applies the heartbeat records too, so a new
leader knows when each broker last heartbeated (a little late, which only lengthens the session);
it gives every broker at least a grace period, for heartbeats held up by the election itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from mqbroker import errors
from mqbroker.cluster.metadata import MetadataImage
from mqbroker.cluster.metadata_records import CreatePartitions, CreateTopic, ElectLeader, FenceBroker
from mqbroker.replication.decisions import assign_replicas


def assign_partitions(
    image: MetadataImage, count: int, topic: str | None = None, replication_factor: int = 1
) -> tuple[tuple[int, ...], ...]:
    """Replicas for ``count`` new partitions of ``topic`` on distinct live brokers, spread evenly.

    Preferred leaders go to the live brokers with the fewest replicas of this topic, then the
    fewest leaderships, then the fewest replicas in all.
    """
    live = image.live_brokers()
    if not live:
        raise errors.InvalidReplicationFactorError("no live broker is registered to host the partitions")
    if not 1 <= replication_factor <= len(live):
        raise errors.InvalidReplicationFactorError(
            f"replication factor {replication_factor} needs as many live brokers; {len(live)} are live ({live})"
        )
    load: Counter[int] = Counter()
    own: Counter[int] = Counter()
    for state in image.topics.values():
        for partition in state.partitions:
            for replica in partition.replicas:
                load[replica] += 1
                if state.name == topic:
                    own[replica] += 1
    return tuple(assign_replicas(live, count, replication_factor, dict(load), dict(own)))


def create_topic_record(
    image: MetadataImage, name: str, partitions: int, configs: Mapping[str, str], replication_factor: int = 1
) -> CreateTopic:
    """The record creating topic ``name`` with its partitions' replicas spread over the live brokers."""
    if name in image.topics:
        raise errors.TopicAlreadyExistsError(f"topic {name!r} already exists")
    replicas = assign_partitions(image, partitions, name, replication_factor)
    return CreateTopic(name=name, assignment=tuple(r[0] for r in replicas), configs=dict(configs), replicas=replicas)


def create_partitions_record(image: MetadataImage, name: str, total_count: int) -> CreatePartitions:
    """The record growing topic ``name`` to ``total_count`` partitions, with its replication factor."""
    topic = image.topics.get(name)
    if topic is None:
        raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
    replication_factor = len(topic.partitions[0].target_replicas or topic.partitions[0].replicas)
    replicas = assign_partitions(image, total_count - len(topic.partitions), name, replication_factor)
    return CreatePartitions(name=name, assignment=tuple(r[0] for r in replicas), replicas=replicas)


def preferred_leader_elections(image: MetadataImage) -> list[ElectLeader]:
    """Leadership back to each partition's preferred (first) replica where it is live, in sync and not leading."""
    live = set(image.live_brokers())
    return [
        ElectLeader(topic=topic.name, partition=number, leader_id=partition.replicas[0], leader_epoch=partition.leader_epoch)
        for topic in image.topics.values()
        for number, partition in enumerate(topic.partitions)
        if partition.leader_id != partition.replicas[0] and partition.replicas[0] in live
        and partition.replicas[0] in partition.isr and not partition.target_replicas
    ]


class BrokerSessions:
    """When the controller last heard from each broker, and whose session has expired."""

    def __init__(self, session_timeout_ms: int) -> None:
        self.session_timeout_ms = session_timeout_ms
        self._last_seen_ms: dict[int, int] = {}

    def heard_from(self, node_id: int, now_ms: int) -> None:
        """A heartbeat or registration from ``node_id`` was committed."""
        self._last_seen_ms[node_id] = now_ms

    def leadership_gained(self, image: MetadataImage, now_ms: int, grace_ms: int) -> None:
        """Give every registered broker at least ``grace_ms`` more: its heartbeats wait for the new leader.

        A broker this node last saw applied longer ago is fenced once its session has lapsed
        since then and the grace has passed; ``grace_ms`` equal to the session timeout gives
        everyone a full fresh session.
        """
        floor_ms = now_ms - self.session_timeout_ms + min(grace_ms, self.session_timeout_ms)
        self._last_seen_ms = {
            node_id: max(self._last_seen_ms.get(node_id, floor_ms), floor_ms) for node_id in image.brokers
        }

    def expired(self, image: MetadataImage, now_ms: int) -> list[FenceBroker]:
        """Fence records for unfenced brokers whose session passed without a heartbeat."""
        return [
            FenceBroker(node_id=node_id)
            for node_id in image.live_brokers()
            if now_ms - self._last_seen_ms.setdefault(node_id, now_ms) > self.session_timeout_ms
        ]
