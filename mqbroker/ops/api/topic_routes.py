"""Admin API: topics and partitions (create, describe, configs, grow, delete, delete records)."""

from __future__ import annotations

from typing import Any

from mqbroker import errors
from mqbroker.model import PartitionMetadata, TopicMetadata, TopicSpec
from mqbroker.ops.api.routing import ApiCall, Route, gathered, path_parameter, query_parameter
from mqbroker.ops.api.schemas import array_of, ref

TAG = "topics"
TOPIC = path_parameter("topic", "the topic's name")
PARTITION = path_parameter("partition", "the partition number", {"type": "integer", "minimum": 0})


async def described_topic(call: ApiCall, name: str) -> TopicMetadata:
    """A topic's metadata, or its error (unknown topic, not authorized) raised."""
    metadata = await call.operations.metadata(call.principal, [name])
    (topic,) = metadata.topics
    if topic.error is not None:
        raise topic.error
    return topic


def _summary(topic: TopicMetadata) -> dict[str, Any]:
    return {"name": topic.name, "internal": topic.internal, "partitions": len(topic.partitions),
            "replication_factor": max((len(p.replicas) for p in topic.partitions), default=0),
            "under_replicated": sum(1 for p in topic.partitions if len(p.isr) < len(p.replicas)),
            "offline": sum(1 for p in topic.partitions if p.leader_id < 0)}


async def _partition(call: ApiCall, topic: str, partition: PartitionMetadata, sizes: dict[int, int]) -> dict[str, Any]:
    """One partition's leader, replicas, ISR, offsets (asked of its leader) and local size."""
    described: dict[str, Any] = {
        "partition": partition.partition, "leader": partition.leader_id, "leader_epoch": partition.leader_epoch,
        "replicas": list(partition.replicas), "isr": list(partition.isr),
        "under_replicated": len(partition.isr) < len(partition.replicas),
        "earliest_offset": None, "latest_offset": None, "size_bytes": sizes.get(partition.partition), "error": None,
    }
    try:
        described["earliest_offset"] = await call.operations.earliest_offset(call.principal, topic, partition.partition)
        described["latest_offset"] = await call.operations.latest_offset(call.principal, topic, partition.partition)
    except errors.BrokerError as error:
        described["error"] = f"{error.code.name}: {error.message}"
    return described


async def partitions_of(call: ApiCall, topic: TopicMetadata) -> list[dict[str, Any]]:
    """Every partition of ``topic`` described, their offsets read concurrently."""
    sizes = await call.operations.replica_sizes(call.principal, topic.name)
    return await gathered(_partition(call, topic.name, p, sizes) for p in topic.partitions)


async def list_topics(call: ApiCall) -> list[dict[str, Any]]:
    """Every topic the principal may describe (internal ones on request)."""
    metadata = await call.operations.metadata(call.principal, None)
    internal = call.query.get("internal", False)
    return [_summary(topic) for topic in metadata.topics
            if topic.error is None and (internal or not topic.internal)]


async def _describe(call: ApiCall, name: str) -> dict[str, Any]:
    topic = await described_topic(call, name)
    configs = await call.operations.topic_configs(call.principal, name)
    return {"name": topic.name, "internal": topic.internal, "partitions": await partitions_of(call, topic),
            "configs": dict(sorted(configs.items()))}


async def create_topic(call: ApiCall) -> dict[str, Any]:
    """Create a topic (or only check that it could be)."""
    body = call.body
    spec = TopicSpec(name=body["name"], partitions=body.get("partitions", -1),
                     replication_factor=body.get("replication_factor", -1), configs=body.get("configs", {}))
    validate_only = body.get("validate_only", False)
    await call.operations.create_topic(call.principal, spec, validate_only)
    if validate_only:
        return {"name": spec.name, "internal": spec.name.startswith("__"), "partitions": [],
                "configs": dict(spec.configs)}
    return await _describe(call, spec.name)


async def describe_topic(call: ApiCall) -> dict[str, Any]:
    """A topic: its partitions with leaders, ISR, offsets and sizes, and its effective configuration."""
    return await _describe(call, call.path["topic"])


async def delete_topic(call: ApiCall) -> None:
    """Delete a topic and all its data."""
    await call.operations.delete_topic(call.principal, call.path["topic"])


async def topic_configs(call: ApiCall) -> dict[str, str]:
    """A topic's effective configuration."""
    return dict(sorted((await call.operations.topic_configs(call.principal, call.path["topic"])).items()))


async def alter_topic_configs(call: ApiCall) -> dict[str, str]:
    """Set and reset config overrides; answers the effective configuration afterwards."""
    name = call.path["topic"]
    await call.operations.alter_topic_configs(call.principal, name, call.body.get("set", {}),
                                              call.body.get("delete", []))
    return dict(sorted((await call.operations.topic_configs(call.principal, name)).items()))


async def list_partitions(call: ApiCall) -> list[dict[str, Any]]:
    """Every partition of a topic."""
    return await partitions_of(call, await described_topic(call, call.path["topic"]))


async def add_partitions(call: ApiCall) -> list[dict[str, Any]]:
    """Grow a topic to ``count`` partitions; answers its partitions afterwards."""
    name = call.path["topic"]
    await call.operations.create_partitions(call.principal, name, call.body["count"])
    return await partitions_of(call, await described_topic(call, name))


async def describe_partition(call: ApiCall) -> dict[str, Any]:
    """One partition."""
    topic = await described_topic(call, call.path["topic"])
    number = call.path["partition"]
    if number >= len(topic.partitions):
        raise errors.UnknownTopicOrPartitionError(f"topic {topic.name!r} has {len(topic.partitions)} partitions")
    sizes = await call.operations.replica_sizes(call.principal, topic.name)
    return await _partition(call, topic.name, topic.partitions[number], sizes)


async def delete_records(call: ApiCall) -> dict[str, Any]:
    """Delete a partition's records below ``before_offset`` (default: every record, up to the high watermark)."""
    topic, partition = call.path["topic"], call.path["partition"]
    start = await call.operations.delete_records(call.principal, topic, partition, call.query.get("before_offset", -1))
    return {"topic": topic, "partition": partition, "log_start_offset": start}


ROUTES = (
    Route(method="GET", path="/api/v1/topics", operation_id="listTopics", tag=TAG, handler=list_topics,
          summary="Topics with partition counts and health", response=array_of("TopicSummary"),
          parameters=(query_parameter("internal", "include internal topics (__*)", {"type": "boolean"}),)),
    Route(method="POST", path="/api/v1/topics", operation_id="createTopic", tag=TAG, handler=create_topic,
          summary="Create a topic", body=ref("NewTopic"), response=ref("Topic"), status=201, error_statuses=(409,)),
    Route(method="GET", path="/api/v1/topics/{topic}", operation_id="describeTopic", tag=TAG, handler=describe_topic,
          summary="A topic's partitions (leader, ISR, offsets, size) and configuration", parameters=(TOPIC,),
          response=ref("Topic"), error_statuses=(404,)),
    Route(method="DELETE", path="/api/v1/topics/{topic}", operation_id="deleteTopic", tag=TAG, handler=delete_topic,
          summary="Delete a topic and its data", parameters=(TOPIC,), error_statuses=(404,)),
    Route(method="GET", path="/api/v1/topics/{topic}/configs", operation_id="describeTopicConfigs", tag=TAG,
          handler=topic_configs, summary="A topic's effective configuration", parameters=(TOPIC,),
          response={"type": "object", "additionalProperties": {"type": "string"}}, error_statuses=(404,)),
    Route(method="PATCH", path="/api/v1/topics/{topic}/configs", operation_id="alterTopicConfigs", tag=TAG,
          handler=alter_topic_configs, summary="Set and reset a topic's config overrides", parameters=(TOPIC,),
          body=ref("ConfigChange"), response={"type": "object", "additionalProperties": {"type": "string"}},
          error_statuses=(404,)),
    Route(method="GET", path="/api/v1/topics/{topic}/partitions", operation_id="listPartitions", tag=TAG,
          handler=list_partitions, summary="A topic's partitions", parameters=(TOPIC,),
          response=array_of("Partition"), error_statuses=(404,)),
    Route(method="POST", path="/api/v1/topics/{topic}/partitions", operation_id="addPartitions", tag=TAG,
          handler=add_partitions, summary="Grow a topic to more partitions", parameters=(TOPIC,),
          body=ref("PartitionCount"), response=array_of("Partition"), error_statuses=(404,)),
    Route(method="GET", path="/api/v1/topics/{topic}/partitions/{partition}", operation_id="describePartition",
          tag=TAG, handler=describe_partition, summary="One partition", parameters=(TOPIC, PARTITION),
          response=ref("Partition"), error_statuses=(404,)),
    Route(method="DELETE", path="/api/v1/topics/{topic}/partitions/{partition}/records", operation_id="deleteRecords",
          tag=TAG, handler=delete_records, summary="Delete a partition's records below an offset",
          parameters=(TOPIC, PARTITION, query_parameter(
              "before_offset", "delete below this offset (default -1: up to the high watermark)",
              {"type": "integer", "minimum": -1})),
          response=ref("LogStart"), error_statuses=(404,)),
)
