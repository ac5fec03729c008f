"""The native protocol's admin APIs: topics, partitions, records, configs, producer ids, the quorum, reassignments."""

from __future__ import annotations

from typing import Any

from mqbroker import errors
from mqbroker.interfaces import IBroker
from mqbroker.model import Principal, TopicSpec
from mqbroker.protocols.native import messages as m
from mqbroker.protocols.deferreds import settle
from mqbroker.protocols.native.replies import error_code


async def handle_create_topics(broker: IBroker, principal: Principal, request: m.CreateTopicsRequest) -> Any:
    """Create topics, one result each."""
    results = []
    for topic in request.topics:
        spec = TopicSpec(
            name=topic.name, partitions=topic.num_partitions, replication_factor=topic.replication_factor,
            configs={k: v for k, v in topic.configs.items() if v is not None},
        )
        _, error = await settle(broker.create_topic(principal, spec, request.validate_only))
        code, message = error_code(error)
        results.append(m.CreateTopicResult(
            name=topic.name, error_code=code, error_message=message,
            num_partitions=topic.num_partitions, replication_factor=topic.replication_factor,
        ))
    return m.CreateTopicsResponse(topics=tuple(results))


async def handle_delete_topics(broker: IBroker, principal: Principal, request: m.DeleteTopicsRequest) -> Any:
    """Delete topics, one result each."""
    results = []
    for name in request.topic_names:
        _, error = await settle(broker.delete_topic(principal, name))
        code, message = error_code(error)
        results.append(m.DeleteTopicResult(name=name, error_code=code, error_message=message))
    return m.DeleteTopicsResponse(topics=tuple(results))


async def handle_create_partitions(broker: IBroker, principal: Principal, request: m.CreatePartitionsRequest) -> Any:
    """Grow topics."""
    results = []
    for topic in request.topics:
        if request.validate_only:
            error = None
        else:
            _, error = await settle(broker.create_partitions(principal, topic.name, topic.count))
        code, message = error_code(error)
        results.append(m.CreatePartitionsResult(name=topic.name, error_code=code, error_message=message))
    return m.CreatePartitionsResponse(results=tuple(results))


async def handle_delete_records(broker: IBroker, principal: Principal, request: m.DeleteRecordsRequest) -> Any:
    """Advance log start offsets."""
    topics = []
    for topic in request.topics:
        partitions = []
        for partition in topic.partitions:
            low, error = await settle(
                broker.delete_records(principal, topic.name, partition.partition_index, partition.offset)
            )
            code, message = error_code(error)
            partitions.append(m.DeleteRecordsPartitionResult(
                partition_index=partition.partition_index, error_code=code, error_message=message,
                low_watermark=low if low is not None else -1,
            ))
        topics.append(m.DeleteRecordsTopicResult(name=topic.name, partitions=tuple(partitions)))
    return m.DeleteRecordsResponse(topics=tuple(topics))


def _config_resource_error(resource_type: int, name: str) -> errors.BrokerError | None:
    """Topics and the cluster-wide dynamic topic defaults (broker resource "") are served."""
    if resource_type == m.ConfigResourceType.TOPIC or (resource_type == m.ConfigResourceType.BROKER and not name):
        return None
    return errors.InvalidRequestError(f"only topic configs and the cluster-wide dynamic defaults (broker resource \"\") "
                                      f"can be described or altered, not resource type {resource_type} {name!r}")


def _described(broker: IBroker, principal: Principal, resource: m.DescribeConfigsResource) -> Any:
    """A Deferred of the topic's effective configs, or of the cluster-wide dynamic topic defaults."""
    if resource.resource_type == m.ConfigResourceType.TOPIC:
        return broker.describe_configs(principal, resource.resource_name)
    return broker.describe_config_layers(principal, None).addCallback(lambda layers: dict(layers.dynamic_default))


async def handle_describe_configs(broker: IBroker, principal: Principal, request: m.DescribeConfigsRequest) -> Any:
    """Effective topic configs, or the cluster-wide dynamic topic defaults."""
    results = []
    for resource in request.resources:
        configs: dict[str, Any] | None = None
        error = _config_resource_error(resource.resource_type, resource.resource_name)
        if error is None:
            configs, error = await settle(_described(broker, principal, resource))
        wanted = set(resource.configuration_keys) if resource.configuration_keys is not None else None
        entries = tuple(
            m.DescribedConfig(name=key, value=str(value))
            for key, value in sorted((configs or {}).items())
            if wanted is None or key in wanted
        )
        code, message = error_code(error)
        results.append(m.DescribeConfigsResult(
            resource_type=resource.resource_type, resource_name=resource.resource_name,
            error_code=code, error_message=message, configs=entries,
        ))
    return m.DescribeConfigsResponse(results=tuple(results))


async def handle_alter_configs(broker: IBroker, principal: Principal, request: m.IncrementalAlterConfigsRequest) -> Any:
    """Set or reset topic config keys, or cluster-wide dynamic topic defaults."""
    results = []
    for resource in request.resources:
        error = _config_resource_error(resource.resource_type, resource.resource_name)
        set_configs = {c.name: c.value or "" for c in resource.configs if c.config_operation == m.ConfigOperation.SET}
        delete_configs = [c.name for c in resource.configs if c.config_operation == m.ConfigOperation.DELETE]
        if error is None and resource.resource_type == m.ConfigResourceType.BROKER:
            _, error = await settle(broker.alter_broker_configs(principal, None, set_configs, delete_configs,
                                                                request.validate_only))
        elif error is None and not request.validate_only:
            _, error = await settle(broker.alter_configs(principal, resource.resource_name, set_configs, delete_configs))
        code, message = error_code(error)
        results.append(m.AlterConfigsResourceResult(
            resource_type=resource.resource_type, resource_name=resource.resource_name,
            error_code=code, error_message=message,
        ))
    return m.IncrementalAlterConfigsResponse(results=tuple(results))


async def handle_init_producer_id(broker: IBroker, principal: Principal, request: m.InitProducerIdRequest) -> Any:
    """A fresh idempotent producer identity, or a transactional id's producer id with a new epoch."""
    identity = await broker.init_producer_id(principal, request.transactional_id, request.transaction_timeout_ms)
    return m.InitProducerIdResponse(producer_id=identity.producer_id, producer_epoch=identity.producer_epoch)


async def handle_describe_quorum(broker: IBroker, principal: Principal, request: m.DescribeQuorumRequest) -> Any:
    """The controller quorum and the registered brokers, as this broker sees them."""
    quorum = await broker.describe_quorum(principal)
    return m.DescribeQuorumResponse(
        node_id=quorum["node_id"], leader_id=quorum["leader"] or -1, term=quorum["term"],
        commit_index=quorum["commit_index"], applied_index=quorum["applied_index"],
        voters=tuple(m.QuorumVoter(node_id=voter) for voter in quorum["voters"]),
        brokers=tuple(m.QuorumBroker(**broker_state) for broker_state in quorum["brokers"]),
    )


async def handle_alter_partition_reassignments(
    broker: IBroker, principal: Principal, request: m.AlterPartitionReassignmentsRequest
) -> Any:
    """Start moving partitions; one outcome each (the replicas catch up in the background)."""
    topics = []
    for topic in request.topics:
        partitions = []
        for partition in topic.partitions:
            _, error = await settle(broker.reassign_partition(principal, topic.name, partition.partition_index,
                                                               partition.replicas))
            code, message = error_code(error)
            partitions.append(m.ReassignablePartitionResult(partition_index=partition.partition_index,
                                                            error_code=code, error_message=message))
        topics.append(m.ReassignableTopicResult(name=topic.name, partitions=tuple(partitions)))
    return m.AlterPartitionReassignmentsResponse(topics=tuple(topics))


async def handle_list_partition_reassignments(
    broker: IBroker, principal: Principal, request: m.ListPartitionReassignmentsRequest
) -> Any:
    """The reassignments in progress."""
    ongoing = await broker.list_reassignments(principal, request.topics or None)
    by_topic: dict[str, list[m.OngoingPartitionReassignment]] = {}
    for item in ongoing:
        by_topic.setdefault(item.topic, []).append(m.OngoingPartitionReassignment(
            partition_index=item.partition, replicas=item.replicas, target_replicas=item.target_replicas,
            adding_replicas=item.adding_replicas, removing_replicas=item.removing_replicas,
        ))
    return m.ListPartitionReassignmentsResponse(topics=tuple(
        m.OngoingTopicReassignment(name=name, partitions=tuple(partitions)) for name, partitions in by_topic.items()
    ))
