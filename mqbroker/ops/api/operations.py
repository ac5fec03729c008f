# -*- test-case-name: tests.integration.test_admin_api -*-
"""Every broker operation the admin API performs, in one place: ``IBroker`` calls and the front ends' admin views.

The API's handlers call only this class, so the HTTP API does exactly what the native admin
API does (the same ``IBroker`` methods, authorized by the core for the caller's principal)
and a change of the broker API's signatures is adapted here alone. The broker is the
front ends' routing broker: partition calls (offsets, reads, delete-records) reach each
partition's leader in a cluster; users and ACLs are ``IBroker``'s too, as for the native
admin API and the CLI. The MQTT and AMQP front ends' own state comes from their admin views,
shown to principals that may describe the cluster and changed by those that may alter it.
Share groups (and push subscriptions, which are share groups) are asked of each group's host
(``forwarding.share_routing``); connectors of the connector admin service (``IConnectorAdmin``),
which answers on any broker.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from twisted.internet.defer import maybeDeferred

from mqbroker import errors
from mqbroker.connector_model import ConnectorDescription
from mqbroker.groups import messages as group_messages
from mqbroker.groups.model import TopicPartition
from mqbroker.interfaces import IBroker, IConnectorAdmin
from mqbroker.model import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ClusterMetadata,
    FetchPosition,
    FetchRequest,
    FetchResult,
    Operation,
    Principal,
    ResourceType,
    TopicSpec,
)
from mqbroker.security.acl import Acl
from mqbroker.shares import messages as share_messages

#: The name ACLs give the cluster resource.
CLUSTER_RESOURCE = "kafka-cluster"


class FrontEndMissing(Exception):
    """The front end an admin call is about does not run on this broker (its listener is off)."""


class AdminOperations:
    """The broker operations behind the admin API (see the module docstring)."""

    def __init__(self, *, broker: IBroker, authorizer: Any, counters: Any, config: Any,
                 front_ends: Mapping[str, Any], share_groups: Any,
                 connectors: IConnectorAdmin | None = None) -> None:
        """``broker``: the routing ``IBroker``; ``counters``: the local broker's produce/fetch counters;
        ``front_ends``: admin views by front-end name; ``share_groups``: the share-group calls answered at each
        group's host (``forwarding.share_routing.ShareGroupRouting``); ``connectors``: None when they are off."""
        self._broker = broker
        self._authorizer = authorizer
        self._counters = counters
        self.config = config
        self._front_ends = dict(front_ends)
        self._share_groups = share_groups
        self._connectors = connectors

    @property
    def node_id(self) -> int:
        """This broker's node id."""
        return int(self.config.node_id)

    # -- authorization of what is not on IBroker -------------------------------------------

    def require_cluster(self, principal: Principal, operation: Operation) -> None:
        """ClusterAuthorizationError unless ``principal`` may ``operation`` the cluster."""
        if not self._authorizer.authorize(principal, operation, ResourceType.CLUSTER, CLUSTER_RESOURCE):
            raise errors.ClusterAuthorizationError(f"{principal} may not {operation.value} the cluster")

    # -- cluster ---------------------------------------------------------------------------

    async def quorum(self, principal: Principal) -> dict[str, Any]:
        """The controller quorum: voters, leader, term, commit index, brokers."""
        return await maybeDeferred(self._broker.describe_quorum, principal)

    async def metadata(self, principal: Principal, topics: Sequence[str] | None) -> ClusterMetadata:
        """Brokers and topics (None: every topic the principal may describe) from the metadata image."""
        return await maybeDeferred(self._broker.metadata, principal, topics, False)

    def counters(self, principal: Principal) -> dict[str, int]:
        """This broker's cumulative produce and fetch counters (the console turns them into rates)."""
        self.require_cluster(principal, Operation.DESCRIBE)
        counters = self._counters
        return {"produced_bytes": counters.produced_bytes, "produced_records": counters.produced_records,
                "fetched_bytes": counters.fetched_bytes, "partitions": counters.partition_count(),
                "log_size_bytes": counters.log_size_bytes()}

    def configuration(self, principal: Principal) -> dict[str, Any]:
        """This broker's effective configuration."""
        self.require_cluster(principal, Operation.DESCRIBE_CONFIGS)
        return {item.name: getattr(self.config, item.name) for item in dataclasses.fields(self.config)}

    # -- topics and partitions -------------------------------------------------------------

    async def create_topic(self, principal: Principal, spec: TopicSpec, validate_only: bool) -> None:
        """Create a topic through the controller."""
        await maybeDeferred(self._broker.create_topic, principal, spec, validate_only)

    async def delete_topic(self, principal: Principal, name: str) -> None:
        """Delete a topic and its data everywhere."""
        await maybeDeferred(self._broker.delete_topic, principal, name)

    async def topic_configs(self, principal: Principal, name: str) -> dict[str, str]:
        """A topic's effective configuration, every value as text (as the native DescribeConfigs reports it)."""
        configs = await maybeDeferred(self._broker.describe_configs, principal, name)
        return {key: str(value) for key, value in configs.items()}

    async def alter_topic_configs(self, principal: Principal, name: str, set_configs: Mapping[str, str],
                                  delete_configs: Sequence[str]) -> None:
        """Set and reset topic config overrides."""
        await maybeDeferred(self._broker.alter_configs, principal, name, set_configs, delete_configs)

    async def create_partitions(self, principal: Principal, name: str, total_count: int) -> None:
        """Grow a topic to ``total_count`` partitions."""
        await maybeDeferred(self._broker.create_partitions, principal, name, total_count)

    async def delete_records(self, principal: Principal, topic: str, partition: int, before_offset: int) -> int:
        """Delete a partition's records below ``before_offset`` (-1: the high watermark); the new log start."""
        return await maybeDeferred(self._broker.delete_records, principal, topic, partition, before_offset)

    async def earliest_offset(self, principal: Principal, topic: str, partition: int) -> int:
        """A partition's log start offset (asked of its leader)."""
        return await self.offset_for_time(principal, topic, partition, EARLIEST_TIMESTAMP)

    async def latest_offset(self, principal: Principal, topic: str, partition: int) -> int:
        """A partition's high watermark (asked of its leader)."""
        return await self.offset_for_time(principal, topic, partition, LATEST_TIMESTAMP)

    async def offset_for_time(self, principal: Principal, topic: str, partition: int, timestamp_ms: int) -> int:
        """The first offset at or after ``timestamp_ms`` (-1: none yet), or the earliest (-2) / latest (-1)."""
        found = await maybeDeferred(self._broker.list_offset, principal, topic, partition, timestamp_ms)
        return int(found.offset)

    async def replica_sizes(self, principal: Principal, topic: str) -> dict[int, int]:
        """Bytes on disk of the topic's replicas on this broker."""
        return await maybeDeferred(self._broker.replica_sizes, principal, topic)

    async def read(self, principal: Principal, topic: str, partition: int, offset: int, max_bytes: int) -> FetchResult:
        """Whole record batches of a partition from ``offset`` (read at its leader; no waiting)."""
        position = FetchPosition(topic=topic, partition=partition, offset=offset, max_bytes=max_bytes)
        request = FetchRequest(positions=(position,), wait_ms_max=0, response_bytes_max=max_bytes)
        (result,) = await maybeDeferred(self._broker.fetch, principal, request)
        if result.error is not None:
            raise result.error
        return result

    # -- consumer groups -------------------------------------------------------------------

    async def list_groups(self, principal: Principal) -> list[Any]:
        """The groups coordinated here that the principal may describe (``GroupListing``s)."""
        return list(await maybeDeferred(self._broker.list_groups, principal))

    async def describe_group(self, principal: Principal, group_id: str) -> Any:
        """A group's state, assignor and members (a ``GroupDescription``; state Dead when unknown)."""
        return await maybeDeferred(self._broker.describe_group, principal, group_id)

    async def committed_offsets(self, principal: Principal, group_id: str) -> dict[TopicPartition, int]:
        """Every committed offset of a group."""
        found = await maybeDeferred(self._broker.fetch_offsets, principal, group_id, None)
        return {partition: committed.offset for partition, committed in found.items() if committed is not None}

    async def commit_offsets(self, principal: Principal, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Overwrite a group's committed offsets as a standalone committer (the group must have no members)."""
        request = group_messages.OffsetCommitRequest(group_id=group_id, offsets=tuple(
            group_messages.PartitionCommit(topic_partition=partition, offset=offset)
            for partition, offset in sorted(offsets.items())))
        await maybeDeferred(self._broker.commit_offsets, principal, request)

    async def delete_group(self, principal: Principal, group_id: str) -> None:
        """Delete a group without members and its committed offsets."""
        await maybeDeferred(self._broker.delete_group, principal, group_id)

    # -- users and ACLs ----------------------------------------------------------------------

    async def users(self, principal: Principal) -> list[str]:
        """Every SCRAM user's name."""
        return sorted(await maybeDeferred(self._broker.list_users, principal))

    async def upsert_user(self, principal: Principal, name: str, password: str, create: bool) -> None:
        """Add a user (``create``) or set a user's password (fresh salted SCRAM credentials)."""
        await maybeDeferred(self._broker.upsert_user, principal, name, password, create)

    async def remove_user(self, principal: Principal, name: str) -> None:
        """Delete a user."""
        await maybeDeferred(self._broker.remove_user, principal, name)

    async def acls(self, principal: Principal) -> list[Acl]:
        """Every ACL."""
        return list(await maybeDeferred(self._broker.list_acls, principal))

    async def add_acls(self, principal: Principal, acls: Sequence[Acl]) -> None:
        """Store ACLs in the cluster metadata."""
        await maybeDeferred(self._broker.add_acls, principal, acls)

    async def remove_acls(self, principal: Principal, acls: Sequence[Acl]) -> None:
        """Delete ACLs (exact matches)."""
        await maybeDeferred(self._broker.remove_acls, principal, acls)

    # -- share groups and push subscriptions (answered by each group's host) -----------------

    async def share_groups(self, principal: Principal) -> list[share_messages.ShareGroupListing]:
        """Every share group of the cluster the principal may describe."""
        return await self._share_groups.list(principal)

    async def describe_share_group(self, principal: Principal, group_id: str) -> share_messages.ShareGroupDescription:
        """A share group's members, partitions (in flight, available, delivery counts, lag) and dead letters."""
        return await self._share_groups.describe(principal, group_id)

    async def create_share_group(self, principal: Principal, group_id: str, topics: Sequence[str],
                                 configs: Mapping[str, str]) -> None:
        """Define a share group (a push subscription: with ``push.*`` configs)."""
        await self._share_groups.create(principal, group_id, topics, configs)

    async def delete_share_group(self, principal: Principal, group_id: str) -> None:
        """Delete a share group without members, with its state."""
        await self._share_groups.delete(principal, group_id)

    # -- connectors --------------------------------------------------------------------------

    def _connector_admin(self) -> IConnectorAdmin:
        if self._connectors is None:
            raise errors.ResourceNotFoundError("connectors are off on this broker (connectors.enabled = false); "
                                               "turn them on to manage connectors")
        return self._connectors

    async def connectors(self, principal: Principal, names: Sequence[str] | None) -> list[ConnectorDescription]:
        """Connectors by name (None: every one) with their tasks' states, counters and lag."""
        return list(await self._connector_admin().describe(principal, names))

    async def create_connector(self, principal: Principal, name: str, config: Mapping[str, str]) -> None:
        """Check and store a new connector; its tasks start on their owners."""
        await self._connector_admin().create(principal, name, config)

    async def pause_connector(self, principal: Principal, name: str) -> None:
        """Stop a connector's tasks, keeping their progress."""
        await self._connector_admin().pause(principal, name)

    async def resume_connector(self, principal: Principal, name: str) -> None:
        """Run a paused connector's tasks again from their progress."""
        await self._connector_admin().resume(principal, name)

    async def delete_connector(self, principal: Principal, name: str) -> None:
        """Stop a connector's tasks and delete its configuration, status and progress."""
        await self._connector_admin().delete(principal, name)

    # -- front ends ------------------------------------------------------------------------

    def front_end(self, name: str, principal: Principal, operation: Operation) -> Any:
        """The admin view of front end ``name`` for a principal allowed ``operation`` on the cluster."""
        self.require_cluster(principal, operation)
        view = self._front_ends.get(name)
        if view is None:
            raise FrontEndMissing(f"the {name} front end does not run on this broker (its listener is off)")
        return view
