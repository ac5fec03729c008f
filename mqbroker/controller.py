"""Controller decisions: where partitions go and which brokers' sessions expired.

Pure: it reads a ``MetadataImage`` and the time it is given, and returns records to propose.
Heartbeats reach the controller as committed ``BrokerHeartbeat`` records; the Raft leader
remembers when it saw each one (in memory, as KRaft's controller does) and fences a broker
whose session passes without one. A new leader gives every broker a full session first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from mqbroker import errors
from mqbroker.metadata import CreatePartitions, CreateTopic, FenceBroker, MetadataImage


def assign_partitions(image: MetadataImage, count: int, topic: str | None = None) -> tuple[int, ...]:
    """Brokers for ``count`` new partitions of ``topic``, spread evenly over the live brokers.

    Each goes to the live broker with the fewest partitions of this topic, then the fewest in all.
    """
    live = image.live_brokers()
    if not live:
        raise errors.InvalidReplicationFactorError("no live broker is registered to host the partitions")
    load = Counter({node_id: 0 for node_id in live})
    own = Counter({node_id: 0 for node_id in live})
    for state in image.topics.values():
        for partition in state.partitions:
            if partition.broker_id in load:
                load[partition.broker_id] += 1
                if state.name == topic:
                    own[partition.broker_id] += 1
    assignment = []
    for _ in range(count):
        broker = min(live, key=lambda node_id: (own[node_id], load[node_id], node_id))
        own[broker] += 1
        load[broker] += 1
        assignment.append(broker)
    return tuple(assignment)


def create_topic_record(image: MetadataImage, name: str, partitions: int, configs: Mapping[str, str]) -> CreateTopic:
    """The record creating topic ``name`` with its partitions spread over the live brokers."""
    if name in image.topics:
        raise errors.TopicAlreadyExistsError(f"topic {name!r} already exists")
    return CreateTopic(name=name, assignment=assign_partitions(image, partitions, name), configs=dict(configs))


def create_partitions_record(image: MetadataImage, name: str, total_count: int) -> CreatePartitions:
    """The record growing topic ``name`` to ``total_count`` partitions."""
    topic = image.topics.get(name)
    if topic is None:
        raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
    return CreatePartitions(name=name, assignment=assign_partitions(image, total_count - len(topic.partitions), name))


class BrokerSessions:
    """When the controller last heard from each broker, and whose session has expired."""

    def __init__(self, session_timeout_ms: int) -> None:
        self.session_timeout_ms = session_timeout_ms
        self._last_seen_ms: dict[int, int] = {}

    def heard_from(self, node_id: int, now_ms: int) -> None:
        """A heartbeat or registration from ``node_id`` was committed."""
        self._last_seen_ms[node_id] = now_ms

    def leadership_gained(self, image: MetadataImage, now_ms: int) -> None:
        """Give every registered broker a fresh session: this node did not see their heartbeats."""
        self._last_seen_ms = {node_id: now_ms for node_id in image.brokers}

    def expired(self, image: MetadataImage, now_ms: int) -> list[FenceBroker]:
        """Fence records for unfenced brokers whose session passed without a heartbeat."""
        return [
            FenceBroker(node_id=node_id)
            for node_id in image.live_brokers()
            if now_ms - self._last_seen_ms.setdefault(node_id, now_ms) > self.session_timeout_ms
        ]
