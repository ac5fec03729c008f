"""Admin API: the cluster, its brokers and Raft quorum, this broker's counters and configuration."""

from __future__ import annotations

import time
from typing import Any

from mqbroker import errors
from mqbroker.model import ClusterMetadata
from mqbroker.ops.api.routing import ApiCall, Route, path_parameter
from mqbroker.ops.api.schemas import array_of, ref

TAG = "cluster"


def partition_health(metadata: ClusterMetadata) -> dict[str, int]:
    """Partitions in total, under-replicated (ISR smaller than the replicas) and offline (no leader)."""
    partitions = [p for topic in metadata.topics if topic.error is None for p in topic.partitions]
    return {"total": len(partitions),
            "under_replicated": sum(1 for p in partitions if len(p.isr) < len(p.replicas)),
            "offline": sum(1 for p in partitions if p.leader_id < 0)}


def _brokers(call: ApiCall, quorum: dict[str, Any]) -> list[dict[str, Any]]:
    voters = set(quorum.get("voters", ()))
    return [{"node_id": broker["node_id"], "host": broker["host"], "port": broker["port"], "state": broker["state"],
             "controller": broker["node_id"] == quorum.get("leader"), "voter": broker["node_id"] in voters,
             "this_broker": broker["node_id"] == call.operations.node_id}
            for broker in quorum.get("brokers", ())]


async def cluster(call: ApiCall) -> dict[str, Any]:
    """The cluster: id, controller, Raft state, brokers, partition health."""
    quorum = await call.operations.quorum(call.principal)
    metadata = await call.operations.metadata(call.principal, None)
    return {"cluster_id": metadata.cluster_id, "node_id": call.operations.node_id,
            "controller_id": metadata.controller_id,
            "raft": {"leader": quorum["leader"], "term": quorum["term"], "commit_index": quorum["commit_index"],
                     "applied_index": quorum["applied_index"], "voters": list(quorum["voters"])},
            "brokers": _brokers(call, quorum), "partitions": partition_health(metadata),
            "topics": sum(1 for topic in metadata.topics if topic.error is None)}


async def brokers(call: ApiCall) -> list[dict[str, Any]]:
    """Every registered broker."""
    return _brokers(call, await call.operations.quorum(call.principal))


async def broker(call: ApiCall) -> dict[str, Any]:
    """One broker."""
    node_id = call.path["node_id"]
    for found in _brokers(call, await call.operations.quorum(call.principal)):
        if found["node_id"] == node_id:
            return found
    raise errors.ResourceNotFoundError(f"broker {node_id} is not registered in the cluster metadata")


async def counters(call: ApiCall) -> dict[str, Any]:
    """This broker's cumulative counters, with the time they were read (for rates)."""
    return {"node_id": call.operations.node_id, "time_ms": int(time.time() * 1000),
            **call.operations.counters(call.principal)}


async def configuration(call: ApiCall) -> dict[str, Any]:
    """This broker's configuration."""
    return {name: dict(value) if name == "topic_defaults" else value
            for name, value in call.operations.configuration(call.principal).items()}


ROUTES = (
    Route(method="GET", path="/api/v1/cluster", operation_id="describeCluster", tag=TAG,
          summary="Cluster id, controller, Raft term and indexes, brokers, partition health",
          handler=cluster, response=ref("Cluster")),
    Route(method="GET", path="/api/v1/brokers", operation_id="listBrokers", summary="Every registered broker",
          tag=TAG, handler=brokers, response=array_of("Broker")),
    Route(method="GET", path="/api/v1/brokers/{node_id}", operation_id="describeBroker", summary="One broker",
          tag=TAG, handler=broker, response=ref("Broker"), error_statuses=(404,),
          parameters=(path_parameter("node_id", "the broker's node id", {"type": "integer"}),)),
    Route(method="GET", path="/api/v1/counters", operation_id="getCounters", tag=TAG,
          summary="This broker's produce and fetch counters (poll them for rates)",
          handler=counters, response=ref("Counters")),
    Route(method="GET", path="/api/v1/configuration", operation_id="getConfiguration", tag=TAG,
          summary="This broker's configuration", handler=configuration, response=ref("Configuration")),
)
