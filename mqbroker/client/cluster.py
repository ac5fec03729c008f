"""The client's view of the cluster: brokers, partition counts and partition leaders.

Pure bookkeeping over Metadata replies. The drivers route each produce and fetch to the
partition's leader through this view and ask for a refresh when a reply says the view is stale
(NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, a lost connection).
"""

from __future__ import annotations

from mqbroker.errors import BrokerError, ErrorCode, error_for_code
from mqbroker.protocols.native.messages import MetadataResponse

NO_LEADER = -1


class ClusterView:
    """Brokers and partition leaders as last reported by a Metadata reply."""

    __slots__ = ("_addresses", "_leaders", "partition_counts", "_topic_errors", "stale_topics", "updated_ms")

    def __init__(self) -> None:
        self._addresses: dict[int, tuple[str, int]] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        #: Partitions per described topic; the same dict for the view's life. Read it, never write it, outside this
        #: class (a producer's ``send`` looks a topic up here per record, without a call of ``partition_count``).
        self.partition_counts: dict[str, int] = {}
        self._topic_errors: dict[str, BrokerError] = {}
        #: Topics a caller needs (or needs refreshed) before it can route their records.
        self.stale_topics: set[str] = set()
        self.updated_ms = -1

    def update(self, metadata: MetadataResponse, now_ms: int) -> None:
        """Take in a Metadata reply; topics it describes are no longer stale."""
        self._addresses = {broker.node_id: (broker.host, broker.port) for broker in metadata.brokers}
        for topic in metadata.topics:
            self.stale_topics.discard(topic.name)
            if topic.error_code != ErrorCode.NONE or not topic.partitions:
                self._forget(topic.name)
                if topic.error_code != ErrorCode.NONE:
                    message = topic.error_message or f"metadata for topic {topic.name!r} failed"
                    self._topic_errors[topic.name] = error_for_code(topic.error_code, message)
                continue
            self._topic_errors.pop(topic.name, None)
            self._forget(topic.name)
            self.partition_counts[topic.name] = len(topic.partitions)
            for partition in topic.partitions:
                leader = partition.leader_id if partition.error_code == ErrorCode.NONE else NO_LEADER
                self._leaders[topic.name, partition.partition_index] = leader
        self.updated_ms = now_ms

    def _forget(self, topic: str) -> None:
        count = self.partition_counts.pop(topic, 0)
        for partition in range(count):
            self._leaders.pop((topic, partition), None)

    def address(self, node_id: int) -> tuple[str, int] | None:
        """Host and port of broker ``node_id``, if known."""
        return self._addresses.get(node_id)

    @property
    def node_ids(self) -> list[int]:
        """Every broker the last reply named."""
        return list(self._addresses)

    def partition_count(self, topic: str) -> int | None:
        """How many partitions ``topic`` has, or None until metadata describes it."""
        return self.partition_counts.get(topic)

    def leader(self, topic: str, partition: int) -> int:
        """Node id of the partition's leader, or ``NO_LEADER``."""
        return self._leaders.get((topic, partition), NO_LEADER)

    def topic_error(self, topic: str) -> BrokerError | None:
        """The error the last Metadata reply gave for ``topic`` (e.g. it does not exist)."""
        return self._topic_errors.get(topic)

    def invalidate(self, topic: str) -> None:
        """Mark ``topic`` stale after a reply showed the view is out of date."""
        self.stale_topics.add(topic)
