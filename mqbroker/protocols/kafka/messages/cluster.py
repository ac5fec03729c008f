"""The Kafka messages that describe the cluster: ApiVersions, Metadata, DescribeCluster, FindCoordinator and
ListTransactions.

Written from Kafka's published message specifications, one class per struct; the field
annotations are the wire schema and ``wire(...)`` says in which versions a field travels
(see ``mqbroker.protocols.schema``). Versions outside the ranges in ``apis.py`` are not modelled.
"""

from __future__ import annotations

from mqbroker.protocols.schema import Int8, Int16, Int32, Int64, Uuid, ZERO_UUID, message, wire


@message
class ApiVersionsRequest:
    """Which APIs and versions does the broker speak (the first request of a connection)."""

    client_software_name: str = wire(since=3, default="")
    client_software_version: str = wire(since=3, default="")


@message
class ApiVersion:
    """The versions of one API the broker speaks."""

    api_key: Int16
    min_version: Int16
    max_version: Int16


@message
class SupportedFeatureKey:
    """A cluster feature and the levels the broker supports (mqbroker: ``transaction.version``)."""

    name: str
    min_version: Int16
    max_version: Int16


@message
class FinalizedFeatureKey:
    """A cluster feature level in force (mqbroker: ``transaction.version``)."""

    name: str
    max_version_level: Int16
    min_version_level: Int16


@message
class ApiVersionsResponse:
    """The APIs and version ranges the broker speaks."""

    error_code: Int16
    api_keys: tuple[ApiVersion, ...]
    throttle_time_ms: Int32 = wire(since=1, default=0)
    supported_features: tuple[SupportedFeatureKey, ...] = wire(tag=0, since=3, default=())
    finalized_features_epoch: Int64 = wire(tag=1, since=3, default=-1)
    finalized_features: tuple[FinalizedFeatureKey, ...] = wire(tag=2, since=3, default=())
    zk_migration_ready: bool = wire(tag=3, since=3, default=False)


@message
class MetadataRequestTopic:
    """A topic to describe, by name."""

    topic_id: Uuid = wire(since=10, default=ZERO_UUID)
    name: str | None = wire(nullable_since=10)


@message
class MetadataRequest:
    """Describe the brokers and some topics (null: every topic); may create missing topics."""

    topics: tuple[MetadataRequestTopic, ...] | None = wire(nullable_since=1)
    allow_auto_topic_creation: bool = wire(since=4, default=True)
    include_cluster_authorized_operations: bool = wire(since=8, until=10, default=False)
    include_topic_authorized_operations: bool = wire(since=8, default=False)


@message
class MetadataResponseBroker:
    """A broker and the address of its Kafka listener."""

    node_id: Int32
    host: str
    port: Int32
    rack: str | None = wire(since=1, default=None)


@message
class MetadataResponsePartition:
    """A partition's leader, replicas and in-sync replicas."""

    error_code: Int16
    partition_index: Int32
    leader_id: Int32
    leader_epoch: Int32 = wire(since=7, default=-1)
    replica_nodes: tuple[Int32, ...]
    isr_nodes: tuple[Int32, ...]
    offline_replicas: tuple[Int32, ...] = wire(since=5, default=())


@message
class MetadataResponseTopic:
    """A topic's partitions, or the error explaining why it has none."""

    error_code: Int16
    name: str | None = wire(nullable_since=12)
    topic_id: Uuid = wire(since=10, default=ZERO_UUID)
    is_internal: bool = wire(since=1, default=False)
    partitions: tuple[MetadataResponsePartition, ...]
    topic_authorized_operations: Int32 = wire(since=8, default=-2147483648)


@message
class MetadataResponse:
    """The cluster's brokers and the described topics."""

    throttle_time_ms: Int32 = wire(since=3, default=0)
    brokers: tuple[MetadataResponseBroker, ...]
    cluster_id: str | None = wire(since=2, default=None)
    controller_id: Int32 = wire(since=1, default=-1)
    topics: tuple[MetadataResponseTopic, ...]
    cluster_authorized_operations: Int32 = wire(since=8, until=10, default=-2147483648)


@message
class DescribeClusterRequest:
    """Describe the cluster: its id, controller and brokers."""

    include_cluster_authorized_operations: bool
    endpoint_type: Int8 = wire(since=1, default=1)


@message
class DescribeClusterBroker:
    """A broker and the address of its Kafka listener."""

    broker_id: Int32
    host: str
    port: Int32
    rack: str | None = None


@message
class DescribeClusterResponse:
    """The cluster's id, controller and brokers."""

    throttle_time_ms: Int32
    error_code: Int16
    error_message: str | None = None
    endpoint_type: Int8 = wire(since=1, default=1)
    cluster_id: str
    controller_id: Int32 = -1
    brokers: tuple[DescribeClusterBroker, ...]
    cluster_authorized_operations: Int32 = -2147483648


@message
class FindCoordinatorRequest:
    """Which broker coordinates a group (``key_type`` 0) or a transactional id (1)."""

    key: str = wire(until=3, default="")
    key_type: Int8 = wire(since=1, default=0)
    coordinator_keys: tuple[str, ...] = wire(since=4, default=())


@message
class Coordinator:
    """The coordinator of one key, or the error finding it (version 4 on)."""

    key: str
    node_id: Int32
    host: str
    port: Int32
    error_code: Int16
    error_message: str | None


@message
class FindCoordinatorResponse:
    """The coordinator found (single key before version 4, one per key after)."""

    throttle_time_ms: Int32 = wire(since=1, default=0)
    error_code: Int16 = wire(until=3, default=0)
    error_message: str | None = wire(since=1, until=3, default=None)
    node_id: Int32 = wire(until=3, default=0)
    host: str = wire(until=3, default="")
    port: Int32 = wire(until=3, default=0)
    coordinators: tuple[Coordinator, ...] = wire(since=4, default=())


@message
class ListTransactionsRequest:
    """List transactions, optionally only those in some states, of some producers or running for long."""

    state_filters: tuple[str, ...]
    producer_id_filters: tuple[Int64, ...]
    duration_filter: Int64 = wire(since=1, default=-1)
    transactional_id_pattern: str | None = wire(since=2, nullable_since=2, default=None)


@message
class TransactionState:
    """One transactional id, its producer and its transaction's state."""

    transactional_id: str
    producer_id: Int64
    transaction_state: str


@message
class ListTransactionsResponse:
    """The transactions found, and the state filters the coordinator does not know."""

    throttle_time_ms: Int32
    error_code: Int16
    unknown_state_filters: tuple[str, ...]
    transaction_states: tuple[TransactionState, ...]
