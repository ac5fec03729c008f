"""The blocking ``Admin``: topics, configs, partitions, offsets, ACLs, users and reassignments.

Requests go on the caller's thread through ``ClusterRequests``: topic and cluster operations
to any broker (retried while the controller moves), partition operations to the leader.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mqbroker.client import admin, connectors
from mqbroker.client.blocking.cluster import BlockingCluster, ClusterRequests
from mqbroker.client.consumer import parse_isolation_level
from mqbroker.client.security import ClientSecurity
from mqbroker.connector_model import ConnectorDescription
from mqbroker.errors import error_for_code
from mqbroker.protocols.native.messages import (
    AclBinding,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    ConfigResourceType,
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    MetadataResponse,
    OngoingPartitionReassignment,
    ReassignablePartition,
    ReassignableTopic,
    UserUpsertion,
)


class Admin:
    """Topic and partition administration: create, delete, describe, alter, offsets, metadata."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] = "localhost:9393",
        *,
        request_timeout_ms: int = 30_000,
        client_id: str = "mqbroker-admin",
        security: ClientSecurity | None = None,
    ) -> None:
        self._cluster = BlockingCluster(bootstrap, client_id, request_timeout_ms / 1000, security)
        self._calls = ClusterRequests(self._cluster)

    def create_topics(
        self,
        names: Iterable[str],
        partitions: int = -1,
        replication_factor: int = -1,
        configs: dict[str, str] | None = None,
    ) -> None:
        """Create topics (partitions and replication -1: the broker's defaults)."""
        request = admin.create_topics_request(names, partitions, replication_factor, configs)
        self._calls.retrying(lambda: admin.create_topics_result(self._calls.any_broker(request)))  # type: ignore[arg-type]

    def delete_topics(self, names: Iterable[str]) -> None:
        """Delete topics and all their data."""
        request = admin.delete_topics_request(names)
        self._calls.retrying(lambda: admin.delete_topics_result(self._calls.any_broker(request)))  # type: ignore[arg-type]

    def create_partitions(self, topic: str, total_count: int) -> None:
        """Grow ``topic`` to ``total_count`` partitions."""
        request = admin.create_partitions_request(topic, total_count)
        self._calls.retrying(lambda: admin.create_partitions_result(self._calls.any_broker(request)))  # type: ignore[arg-type]

    def describe_configs(self, topic: str) -> dict[str, str | None]:
        """The topic's effective configuration."""
        request = admin.describe_configs_request(topic)
        return self._calls.retrying(lambda: admin.describe_configs_result(self._calls.any_broker(request)))  # type: ignore[arg-type]

    def alter_configs(self, topic: str, set_configs: dict[str, str], delete_configs: Iterable[str] = ()) -> None:
        """Set some config keys of ``topic`` and reset others to their defaults."""
        request = admin.alter_configs_request(topic, set_configs, delete_configs)
        self._calls.retrying(lambda: admin.alter_configs_result(self._calls.any_broker(request)))  # type: ignore[arg-type]

    def describe_cluster_configs(self) -> dict[str, str | None]:
        """The cluster-wide dynamic topic defaults (they win over every broker's ``log.`` settings)."""
        request = admin.describe_configs_request("", ConfigResourceType.BROKER)
        return self._calls.retrying(lambda: admin.describe_configs_result(self._calls.any_broker(request)))  # type: ignore[arg-type]

    def alter_cluster_configs(self, set_configs: dict[str, str], delete_configs: Iterable[str] = ()) -> None:
        """Set some cluster-wide dynamic topic defaults (topic keys: ``retention.ms``) and reset others."""
        request = admin.alter_configs_request("", set_configs, delete_configs, ConfigResourceType.BROKER)
        self._calls.retrying(lambda: admin.alter_configs_result(self._calls.any_broker(request)))  # type: ignore[arg-type]

    def describe_quorum(self) -> DescribeQuorumResponse:
        """The controller quorum and brokers as one broker sees them."""
        return self._calls.any_broker(DescribeQuorumRequest())  # type: ignore[return-value]

    def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Store ACLs in the cluster metadata (needs ALTER on the cluster)."""
        self._calls.any_broker(CreateAclsRequest(creations=tuple(bindings)))

    def delete_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Remove exactly these ACLs."""
        self._calls.any_broker(DeleteAclsRequest(deletions=tuple(bindings)))

    def describe_acls(self) -> list[AclBinding]:
        """Every ACL (needs DESCRIBE on the cluster)."""
        response = self._calls.any_broker(DescribeAclsRequest())
        assert isinstance(response, DescribeAclsResponse)
        return list(response.acls)

    def upsert_user(self, name: str, password: str, *, create: bool) -> None:
        """Create a user (``create``) or change its password; the broker stores only salted SCRAM keys."""
        self._alter_users(AlterUserScramCredentialsRequest(
            upsertions=(UserUpsertion(name=name, password=password, create=int(create)),), deletions=()))

    def remove_user(self, name: str) -> None:
        """Delete a user."""
        self._alter_users(AlterUserScramCredentialsRequest(upsertions=(), deletions=(name,)))

    def list_users(self) -> list[str]:
        """Every user name."""
        response = self._calls.any_broker(DescribeUserScramCredentialsRequest())
        assert isinstance(response, DescribeUserScramCredentialsResponse)
        return [user.name for user in response.users]

    def create_connector(self, name: str, config: dict[str, str]) -> None:
        """Create connector ``name`` (needs ALTER on the cluster); the broker checks ``config`` first."""
        self._calls.any_broker(connectors.create_connector_request(name, config))

    def alter_connector(self, name: str, action: str) -> None:
        """``action`` is ``pause``, ``resume`` or ``delete``."""
        self._calls.any_broker(connectors.alter_connector_request(name, action))

    def describe_connectors(self, names: Sequence[str] | None = None) -> list[ConnectorDescription]:
        """Connectors with their tasks' status and metrics (None: every connector)."""
        response = self._calls.any_broker(connectors.describe_connectors_request(names))
        return connectors.describe_connectors_result(response)  # type: ignore[arg-type]

    def _alter_users(self, request: AlterUserScramCredentialsRequest) -> None:
        response = self._calls.any_broker(request)
        assert isinstance(response, AlterUserScramCredentialsResponse)
        for result in response.results:
            if result.error_code:
                raise error_for_code(result.error_code, result.error_message or f"user {result.name!r}: refused")

    def reassign_partition(self, topic: str, partition: int, replicas: Sequence[int]) -> None:
        """Start moving a partition to ``replicas`` (the first is the preferred leader); returns at once.

        The new replicas copy the log while producers and consumers go on; once all are in sync
        the others leave. ``list_reassignments`` shows the moves still in progress.
        """
        request = AlterPartitionReassignmentsRequest(topics=(ReassignableTopic(name=topic, partitions=(
            ReassignablePartition(partition_index=partition, replicas=tuple(replicas)),)),))

        def start() -> None:
            response = self._calls.any_broker(request)
            assert isinstance(response, AlterPartitionReassignmentsResponse)
            for result in response.topics[0].partitions:
                if result.error_code:
                    raise error_for_code(result.error_code, result.error_message or f"{topic}-{partition}: refused")

        self._calls.retrying(start)

    def list_reassignments(self, topics: Iterable[str] = ()) -> dict[tuple[str, int], OngoingPartitionReassignment]:
        """The reassignments in progress by (topic, partition) (of ``topics``; empty: of every topic)."""
        response = self._calls.any_broker(ListPartitionReassignmentsRequest(topics=tuple(topics)))
        assert isinstance(response, ListPartitionReassignmentsResponse)
        return {(topic.name, ongoing.partition_index): ongoing for topic in response.topics for ongoing in topic.partitions}

    def metadata(self, topics: Iterable[str] | None = None) -> MetadataResponse:
        """Brokers and partition leaders of ``topics`` (None: every topic); creates nothing."""
        return self._cluster.refresh(topics, auto_create=False)

    def list_topics(self) -> list[str]:
        """Names of every topic."""
        return sorted(topic.name for topic in self.metadata().topics)

    def describe_topics(self, topics: Iterable[str]) -> dict[str, int]:
        """Partition count of each topic (raises if one does not exist)."""
        response = self.metadata(topics)
        counts = {}
        for topic in response.topics:
            admin.raise_for_topic(topic)
            counts[topic.name] = len(topic.partitions)
        return counts

    def list_offset(self, topic: str, partition: int, timestamp_ms: int,
                    isolation_level: str = "read_uncommitted") -> int:
        """Earliest (-2), latest (-1: with ``isolation_level="read_committed"`` the last stable offset) or the first
        offset at or after ``timestamp_ms``."""
        return self._calls.list_offset(topic, partition, timestamp_ms, parse_isolation_level(isolation_level))

    def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        """Delete records below ``before_offset``; return the new log start offset."""
        request = admin.delete_records_request(topic, partition, before_offset)
        return self._calls.retrying(
            lambda: admin.delete_records_result(self._calls.leader(topic, partition, request)), topic  # type: ignore[arg-type]
        )

    def close(self, timeout: float | None = None) -> None:
        """Close the connections (at once: an admin has nothing in flight between calls; ``timeout`` is
        accepted so that every client closes alike)."""
        self._cluster.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
