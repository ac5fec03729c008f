"""Admin operations as pure request builders and reply readers, shared by both drivers.

Each ``*_request`` function builds the native request; each ``*_result`` function reads the
reply and raises the typed ``BrokerError`` of the first failed item, so a driver only sends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from mqbroker.errors import ErrorCode, error_for_code
from mqbroker.protocols.native import messages as m

DEFAULT_TIMEOUT_MS = 30_000


def _raise_for(code: int, message: str | None, what: str) -> None:
    if code != ErrorCode.NONE:
        raise error_for_code(code, message or f"{what} failed")


def create_topics_request(
    names: Iterable[str], partitions: int, replication_factor: int, configs: Mapping[str, str] | None
) -> m.CreateTopicsRequest:
    """Create ``names`` with the given partition count (-1: broker default) and configs."""
    topics = tuple(
        m.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=replication_factor, configs=dict(configs or {})
        )
        for name in names
    )
    return m.CreateTopicsRequest(topics=topics, timeout_ms=DEFAULT_TIMEOUT_MS)


def create_topics_result(response: m.CreateTopicsResponse) -> None:
    """Raise the first topic's error, if any."""
    for topic in response.topics:
        _raise_for(topic.error_code, topic.error_message, f"creating topic {topic.name!r}")


def delete_topics_request(names: Iterable[str]) -> m.DeleteTopicsRequest:
    """Delete topics and all their data."""
    return m.DeleteTopicsRequest(topic_names=tuple(names), timeout_ms=DEFAULT_TIMEOUT_MS)


def delete_topics_result(response: m.DeleteTopicsResponse) -> None:
    """Raise the first topic's error, if any."""
    for topic in response.topics:
        _raise_for(topic.error_code, topic.error_message, f"deleting topic {topic.name!r}")


def create_partitions_request(topic: str, total_count: int) -> m.CreatePartitionsRequest:
    """Grow ``topic`` to ``total_count`` partitions."""
    return m.CreatePartitionsRequest(
        topics=(m.CreatePartitionsTopic(name=topic, count=total_count),), timeout_ms=DEFAULT_TIMEOUT_MS
    )


def create_partitions_result(response: m.CreatePartitionsResponse) -> None:
    """Raise the topic's error, if any."""
    for result in response.results:
        _raise_for(result.error_code, result.error_message, f"adding partitions to {result.name!r}")


def describe_configs_request(topic: str, resource_type: int = m.ConfigResourceType.TOPIC) -> m.DescribeConfigsRequest:
    """Every config key of ``topic`` (or, with BROKER and "", the cluster-wide dynamic topic defaults)."""
    resource = m.DescribeConfigsResource(resource_type=resource_type, resource_name=topic)
    return m.DescribeConfigsRequest(resources=(resource,))


def describe_configs_result(response: m.DescribeConfigsResponse) -> dict[str, str | None]:
    """The topic's configuration as ``{key: value}``."""
    (result,) = response.results
    _raise_for(result.error_code, result.error_message, f"describing {result.resource_name!r}")
    return {config.name: config.value for config in result.configs}


def alter_configs_request(
    topic: str, set_configs: Mapping[str, str], delete_configs: Iterable[str],
    resource_type: int = m.ConfigResourceType.TOPIC,
) -> m.IncrementalAlterConfigsRequest:
    """Set some keys and reset others to their defaults (of a topic, or as ``describe_configs_request``)."""
    changes = [
        m.AlterableConfig(name=name, config_operation=m.ConfigOperation.SET, value=value)
        for name, value in set_configs.items()
    ]
    changes += [m.AlterableConfig(name=name, config_operation=m.ConfigOperation.DELETE) for name in delete_configs]
    resource = m.AlterConfigsResource(resource_type=resource_type, resource_name=topic, configs=tuple(changes))
    return m.IncrementalAlterConfigsRequest(resources=(resource,))


def alter_configs_result(response: m.IncrementalAlterConfigsResponse) -> None:
    """Raise the resource's error, if any."""
    for result in response.results:
        _raise_for(result.error_code, result.error_message, f"altering {result.resource_name!r}")


def list_offsets_request(
    topic: str, partition: int, timestamp_ms: int, isolation_level: int = m.IsolationLevel.READ_UNCOMMITTED
) -> m.ListOffsetsRequest:
    """Earliest (-2), latest (-1: read_committed, the last stable offset) or first offset at or after ``timestamp_ms``."""
    wanted = m.ListOffsetsPartition(partition_index=partition, timestamp=timestamp_ms)
    return m.ListOffsetsRequest(isolation_level=isolation_level,
                                topics=(m.ListOffsetsTopic(name=topic, partitions=(wanted,)),))


def list_offsets_result(response: m.ListOffsetsResponse) -> int:
    """The offset found (-1 when no record is at or after the timestamp)."""
    (topic,) = response.topics
    (result,) = topic.partitions
    _raise_for(result.error_code, result.error_message, f"listing offsets of {topic.name}-{result.partition_index}")
    return result.offset


def delete_records_request(topic: str, partition: int, before_offset: int) -> m.DeleteRecordsRequest:
    """Delete records of one partition below ``before_offset``."""
    wanted = m.DeleteRecordsPartition(partition_index=partition, offset=before_offset)
    return m.DeleteRecordsRequest(
        topics=(m.DeleteRecordsTopic(name=topic, partitions=(wanted,)),), timeout_ms=DEFAULT_TIMEOUT_MS
    )


def delete_records_result(response: m.DeleteRecordsResponse) -> int:
    """The partition's new log start offset."""
    (topic,) = response.topics
    (result,) = topic.partitions
    _raise_for(result.error_code, result.error_message, f"deleting records of {topic.name}-{result.partition_index}")
    return result.low_watermark


def raise_for_topic(topic: m.MetadataTopic) -> None:
    """Raise the error a Metadata reply gave for ``topic``, if any."""
    _raise_for(topic.error_code, topic.error_message, f"describing topic {topic.name!r}")
