"""Metadata, DescribeCluster and FindCoordinator: where the brokers' Kafka listeners are and who leads what."""

from __future__ import annotations

from typing import Any

from mqbroker import errors
from mqbroker.model import BrokerEndpoint, ClusterMetadata, PartitionMetadata, TopicMetadata
from mqbroker.protocols.deferreds import settle
from mqbroker.protocols.kafka.error_codes import UNKNOWN_TOPIC_ID, kafka_error
from mqbroker.protocols.kafka.handlers.context import RequestContext
from mqbroker.protocols.kafka.messages import cluster as m
from mqbroker.transactions.messages import TransactionState

#: Kafka's "authorized operations not requested" value.
OPERATIONS_NOT_REQUESTED = -(2**31)
COORDINATOR_GROUP = 0
COORDINATOR_TRANSACTION = 1


def kafka_address(endpoint: BrokerEndpoint, listener: str) -> tuple[str, int] | None:
    """Where ``endpoint``'s Kafka listener (``listener``: its port key) is; None if it has none."""
    port = endpoint.listeners.get(listener, 0)
    return (endpoint.host, port) if port else None


def _brokers(cluster: ClusterMetadata, listener: str) -> list[tuple[int, str, int]]:
    """(node id, host, port) of every live broker with this Kafka listener."""
    found = []
    for endpoint in cluster.brokers:
        address = kafka_address(endpoint, listener)
        if address is not None:
            found.append((endpoint.node_id, *address))
    return found


async def handle_metadata(context: RequestContext, request: m.MetadataRequest) -> m.MetadataResponse:
    """Brokers at their Kafka listeners and topic partitions with their leaders (may create missing topics);
    topics asked for by id (version 10 on, no name) are looked up among all."""
    if request.topics is None or (context.version == 0 and not request.topics):
        names: list[str] | None = None  # every topic (an empty list means all of them in version 0 only)
    else:
        names = [topic.name for topic in request.topics if topic.name is not None]
    by_id = [] if request.topics is None else [topic.topic_id for topic in request.topics if topic.name is None]
    cluster = await context.calls.metadata(names, request.allow_auto_topic_creation)
    live = {endpoint.node_id for endpoint in cluster.brokers}
    topics = [_topic(topic, live) for topic in cluster.topics]
    if by_id:
        known = {topic.topic_id: topic for topic in (await context.calls.metadata(None, False)).topics}
        topics += [_topic(known[topic_id], live) if topic_id in known else
                   m.MetadataResponseTopic(error_code=UNKNOWN_TOPIC_ID, name=None, topic_id=topic_id, partitions=())
                   for topic_id in by_id]
    return m.MetadataResponse(
        brokers=tuple(m.MetadataResponseBroker(node_id=node_id, host=host, port=port)
                      for node_id, host, port in _brokers(cluster, context.listener)),
        cluster_id=cluster.cluster_id, controller_id=context.node_id, topics=tuple(topics),
    )


def _topic(topic: TopicMetadata, live: set[int]) -> m.MetadataResponseTopic:
    code, _ = kafka_error(topic.error)
    return m.MetadataResponseTopic(error_code=code, name=topic.name, topic_id=topic.topic_id, is_internal=topic.internal,
                                   partitions=tuple(m.MetadataResponsePartition(**partition_answer(partition, live))
                                                    for partition in topic.partitions))


def partition_answer(partition: PartitionMetadata, live: set[int]) -> dict[str, Any]:
    """A partition's fields as Metadata and DescribeTopicPartitions answer them (``live``: live broker ids)."""
    error = 0 if partition.leader_id >= 0 else int(errors.ErrorCode.LEADER_NOT_AVAILABLE)
    return {"error_code": error, "partition_index": partition.partition, "leader_id": partition.leader_id,
            "leader_epoch": partition.leader_epoch, "replica_nodes": partition.replicas, "isr_nodes": partition.isr,
            "offline_replicas": tuple(replica for replica in partition.replicas if replica not in live)}


async def handle_describe_cluster(context: RequestContext, request: m.DescribeClusterRequest) -> m.DescribeClusterResponse:
    """The cluster id and the brokers at their Kafka listeners (this broker stands in for the controller)."""
    cluster = await context.calls.metadata([], False)
    return m.DescribeClusterResponse(
        throttle_time_ms=0, error_code=0, cluster_id=cluster.cluster_id, controller_id=context.node_id,
        brokers=tuple(m.DescribeClusterBroker(broker_id=node_id, host=host, port=port)
                      for node_id, host, port in _brokers(cluster, context.listener)),
    )


async def handle_find_coordinator(context: RequestContext, request: m.FindCoordinatorRequest) -> m.FindCoordinatorResponse:
    """The broker coordinating a group or a transactional id (one key before version 4, a batch after)."""
    if context.version < 4:
        found = await _coordinator(context, request.key, request.key_type)
        return m.FindCoordinatorResponse(error_code=found.error_code, error_message=found.error_message,
                                         node_id=found.node_id, host=found.host, port=found.port)
    return m.FindCoordinatorResponse(coordinators=tuple(
        [await _coordinator(context, key, request.key_type) for key in request.coordinator_keys]))


async def _coordinator(context: RequestContext, key: str, key_type: int) -> m.Coordinator:
    error: BaseException | None
    if key_type == COORDINATOR_TRANSACTION:
        endpoint, error = await settle(context.calls.find_transaction_coordinator(key))
    elif key_type != COORDINATOR_GROUP:
        error, endpoint = errors.InvalidRequestError(f"coordinator type {key_type} is unknown"), None
    else:
        endpoint, error = await settle(context.calls.find_coordinator(key))
    address = kafka_address(endpoint, context.listener) if endpoint is not None else None
    if endpoint is not None and address is None:
        what = "transactional id" if key_type == COORDINATOR_TRANSACTION else "group"
        error = errors.CoordinatorNotAvailableError(
            f"the coordinator of {what} {key!r}, broker {endpoint.node_id}, has no Kafka listener")
    code, message = kafka_error(error)
    host, port = address if address is not None else ("", -1)
    return m.Coordinator(key=key, node_id=endpoint.node_id if address else -1, host=host, port=port,
                         error_code=code, error_message=message)


#: Kafka's transaction states (ListTransactions filters); a filter naming another is reported back as unknown.
TRANSACTION_STATES = frozenset({"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                                "Dead", "PrepareEpochFence"})


async def handle_list_transactions(context: RequestContext, request: m.ListTransactionsRequest
                                   ) -> m.ListTransactionsResponse:
    """The transactions this broker coordinates (``kafka-transactions list`` asks every broker and merges)."""
    unknown = tuple(state for state in request.state_filters if state not in TRANSACTION_STATES)
    ours = {state.value: state for state in TransactionState}
    states = [ours[name] for name in request.state_filters if name in ours]
    if request.state_filters and not states:
        return m.ListTransactionsResponse(throttle_time_ms=0, error_code=0, unknown_state_filters=unknown,
                                          transaction_states=())  # only states no transaction here is in
    listings, error = await settle(context.calls.list_transactions(states, request.producer_id_filters))
    code, _ = kafka_error(error)
    return m.ListTransactionsResponse(
        throttle_time_ms=0, error_code=code, unknown_state_filters=unknown,
        transaction_states=tuple(
            m.TransactionState(transactional_id=listing.transactional_id, producer_id=listing.producer_id,
                               transaction_state=listing.state.value)
            for listing in listings or ()))
