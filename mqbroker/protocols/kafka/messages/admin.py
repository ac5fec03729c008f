"""The Kafka admin messages for topics and configurations.

Written from Kafka's published message specifications, one class per struct; the field
annotations are the wire schema and ``wire(...)`` says in which versions a field travels
(see ``mqbroker.protocols.schema``). Versions outside the ranges in ``apis.py`` are not modelled.
"""

from __future__ import annotations

from mqbroker.protocols.schema import Int8, Int16, Int32, Int64, Uuid, ZERO_UUID, message, wire


@message
class CreatableReplicaAssignment:
    """Replicas chosen by the client for one partition (mqbroker places it, then moves it there)."""

    partition_index: Int32
    broker_ids: tuple[Int32, ...]


@message
class CreatableTopicConfig:
    """One configuration key of a topic to create."""

    name: str
    value: str | None


@message
class CreatableTopic:
    """A topic to create (-1 partitions or replication factor: the broker default)."""

    name: str
    num_partitions: Int32
    replication_factor: Int16
    assignments: tuple[CreatableReplicaAssignment, ...]
    configs: tuple[CreatableTopicConfig, ...]


@message
class CreateTopicsRequest:
    """Create topics (or only check that they could be, ``validate_only``)."""

    topics: tuple[CreatableTopic, ...]
    timeout_ms: Int32 = 60000
    validate_only: bool = False


@message
class CreatableTopicConfigs:
    """One effective configuration key of a created topic."""

    name: str
    value: str | None
    read_only: bool
    config_source: Int8 = -1
    is_sensitive: bool


@message
class CreatableTopicResult:
    """The outcome of creating one topic."""

    name: str
    topic_id: Uuid = wire(since=7, default=ZERO_UUID)
    error_code: Int16
    error_message: str | None
    topic_config_error_code: Int16 = wire(tag=0, since=5, default=0)
    num_partitions: Int32 = wire(since=5, default=-1)
    replication_factor: Int16 = wire(since=5, default=-1)
    configs: tuple[CreatableTopicConfigs, ...] | None = wire(since=5, default=())


@message
class CreateTopicsResponse:
    """The creation outcome, per topic."""

    throttle_time_ms: Int32
    topics: tuple[CreatableTopicResult, ...]


@message
class DeleteTopicState:
    """A topic to delete, by name or (no name) by topic id."""

    name: str | None = None
    topic_id: Uuid


@message
class DeleteTopicsRequest:
    """Delete topics and all their data."""

    topics: tuple[DeleteTopicState, ...] = wire(since=6, default=())
    topic_names: tuple[str, ...] = wire(until=5, default=())
    timeout_ms: Int32


@message
class DeletableTopicResult:
    """Whether one topic was deleted."""

    name: str | None = wire(nullable_since=6)
    topic_id: Uuid = wire(since=6, default=ZERO_UUID)
    error_code: Int16
    error_message: str | None = wire(since=5, default=None)


@message
class DeleteTopicsResponse:
    """The deletion outcome, per topic."""

    throttle_time_ms: Int32
    responses: tuple[DeletableTopicResult, ...]


@message
class CreatePartitionsAssignment:
    """Replicas chosen by the client for a new partition (mqbroker places it, then moves it there)."""

    broker_ids: tuple[Int32, ...]


@message
class CreatePartitionsTopic:
    """A topic to grow to ``count`` partitions."""

    name: str
    count: Int32
    assignments: tuple[CreatePartitionsAssignment, ...] | None


@message
class CreatePartitionsRequest:
    """Add partitions to topics."""

    topics: tuple[CreatePartitionsTopic, ...]
    timeout_ms: Int32
    validate_only: bool


@message
class CreatePartitionsTopicResult:
    """Whether one topic grew."""

    name: str
    error_code: Int16
    error_message: str | None = None


@message
class CreatePartitionsResponse:
    """The outcome, per topic."""

    throttle_time_ms: Int32
    results: tuple[CreatePartitionsTopicResult, ...]


@message
class DeleteRecordsPartition:
    """Delete one partition's records below ``offset`` (-1: the high watermark)."""

    partition_index: Int32
    offset: Int64


@message
class DeleteRecordsTopic:
    """The partitions of one topic whose oldest records are deleted."""

    name: str
    partitions: tuple[DeleteRecordsPartition, ...]


@message
class DeleteRecordsRequest:
    """Move log start offsets forward."""

    topics: tuple[DeleteRecordsTopic, ...]
    timeout_ms: Int32


@message
class DeleteRecordsPartitionResult:
    """One partition's new log start offset, or the error."""

    partition_index: Int32
    low_watermark: Int64
    error_code: Int16


@message
class DeleteRecordsTopicResult:
    """The outcome for one topic's partitions."""

    name: str
    partitions: tuple[DeleteRecordsPartitionResult, ...]


@message
class DeleteRecordsResponse:
    """The outcome, per partition."""

    throttle_time_ms: Int32
    topics: tuple[DeleteRecordsTopicResult, ...]


@message
class DescribeConfigsResource:
    """A resource (2 topic, 4 broker) and the keys wanted (null: all)."""

    resource_type: Int8
    resource_name: str
    configuration_keys: tuple[str, ...] | None


@message
class DescribeConfigsRequest:
    """Describe configurations of topics or brokers."""

    resources: tuple[DescribeConfigsResource, ...]
    include_synonyms: bool = False
    include_documentation: bool = wire(since=3, default=False)


@message
class DescribeConfigsSynonym:
    """A setting that shaped a key's value (the default it overrides)."""

    name: str
    value: str | None
    source: Int8


@message
class DescribeConfigsResourceResult:
    """One configuration key: value, source and whether it is read-only."""

    name: str
    value: str | None
    read_only: bool
    config_source: Int8 = -1
    is_sensitive: bool
    synonyms: tuple[DescribeConfigsSynonym, ...]
    config_type: Int8 = wire(since=3, default=0)
    documentation: str | None = wire(since=3, default=None)


@message
class DescribeConfigsResult:
    """One resource's configuration, or the error describing it."""

    error_code: Int16
    error_message: str | None
    resource_type: Int8
    resource_name: str
    configs: tuple[DescribeConfigsResourceResult, ...]


@message
class DescribeConfigsResponse:
    """The described configurations, per resource."""

    throttle_time_ms: Int32
    results: tuple[DescribeConfigsResult, ...]


@message
class AlterableConfig:
    """One key of a configuration replaced whole (null: back to the default)."""

    name: str
    value: str | None


@message
class AlterConfigsResource:
    """A resource whose configuration is replaced whole."""

    resource_type: Int8
    resource_name: str
    configs: tuple[AlterableConfig, ...]


@message
class AlterConfigsRequest:
    """Replace resources' whole configurations (keys not named go back to defaults)."""

    resources: tuple[AlterConfigsResource, ...]
    validate_only: bool


@message
class AlterConfigsResourceResponse:
    """Whether one resource's configuration changed."""

    error_code: Int16
    error_message: str | None
    resource_type: Int8
    resource_name: str


@message
class AlterConfigsResponse:
    """The outcome, per resource."""

    throttle_time_ms: Int32
    responses: tuple[AlterConfigsResourceResponse, ...]


@message
class IncrementalAlterableConfig:
    """One key change: 0 set, 1 delete (back to the default), 2 append, 3 subtract."""

    name: str
    config_operation: Int8
    value: str | None


@message
class IncrementalAlterConfigsResource:
    """A resource and the key changes to make."""

    resource_type: Int8
    resource_name: str
    configs: tuple[IncrementalAlterableConfig, ...]


@message
class IncrementalAlterConfigsRequest:
    """Change some configuration keys, leaving the others as they are."""

    resources: tuple[IncrementalAlterConfigsResource, ...]
    validate_only: bool


@message
class IncrementalAlterConfigsResponse:
    """The outcome, per resource."""

    throttle_time_ms: Int32
    responses: tuple[AlterConfigsResourceResponse, ...]
