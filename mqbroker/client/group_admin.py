"""Blocking administration of consumer groups: list, describe, committed offsets, reset, delete.

A group's requests go to its coordinator (the leader of its offsets partition), found again
while it moves; listing asks every broker, since each lists only the groups it coordinates.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Self

from mqbroker.client.blocking.group import RETRY_S, coordinator_connection
from mqbroker.client.connection import (
    BlockingConnection,
    BrokerUnavailableError,
    parse_bootstrap,
)
from mqbroker.client.group_member import (
    COORDINATOR_RETRY_MS,
    TopicPartition,
    coordinator_moved,
    raise_for_commit,
)
from mqbroker.client.security import ClientSecurity
from mqbroker.errors import BrokerError, error_for_code
from mqbroker.protocols.native import consumer_protocol
from mqbroker.protocols.native.messages import (
    CoordinatorType,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMemberInfo:
    """One member of a described group."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupInfo:
    """A described group."""

    group_id: str
    state: str
    assignor: str
    members: tuple[GroupMemberInfo, ...]


def live_broker_addresses(bootstrap: Sequence[tuple[str, int]], client_id: str, timeout_s: float,
                          security: ClientSecurity | None) -> list[tuple[str, int]]:
    """Every live broker's address, from the first bootstrap broker that answers."""
    failures = []
    for host, port in bootstrap:
        try:
            probe = BlockingConnection(host, port, client_id, timeout_s, security)
        except BrokerUnavailableError as error:
            failures.append(str(error))
            continue
        try:
            response = probe.request(MetadataRequest(topics=(), allow_auto_topic_creation=False), timeout_s)
        finally:
            probe.close()
        assert isinstance(response, MetadataResponse)
        return [(broker.host, broker.port) for broker in response.brokers]
    raise BrokerUnavailableError("no bootstrap broker reachable: " + "; ".join(failures))


class CoordinatorAdmin:
    """Requests to the broker coordinating a group (``coordinator_type``), found again while it moves."""

    coordinator_type = CoordinatorType.GROUP

    def __init__(self, bootstrap: str | Sequence[str], *, request_timeout_ms: int = 30_000,
                 client_id: str = "mqbroker-admin", security: ClientSecurity | None = None) -> None:
        self._bootstrap = parse_bootstrap(bootstrap)
        self._timeout_s = request_timeout_ms / 1000
        self._client_id = client_id
        self._security = security
        #: Open coordinator connections by group id.
        self._connections: dict[str, BlockingConnection] = {}

    def _request(self, group_id: str, request: object, check: Callable[[object], None] = lambda response: None) -> object:
        """Send to the group's coordinator; while it moves (or is unreachable), find it again and retry."""
        deadline = time.monotonic() + COORDINATOR_RETRY_MS / 1000
        while True:
            try:
                connection = self._connections.get(group_id)
                if connection is None:
                    connection = coordinator_connection(self._bootstrap, group_id, self._client_id, self._timeout_s,
                                                        self._security, key_type=self.coordinator_type)
                    self._connections[group_id] = connection
                response = connection.request(request, self._timeout_s)
                check(response)
                return response
            except BrokerError as error:
                if not (isinstance(error, BrokerUnavailableError) or coordinator_moved(error)):
                    raise
                dropped = self._connections.pop(group_id, None)
                if dropped is not None:
                    dropped.close()
                if time.monotonic() + RETRY_S >= deadline:
                    raise
                time.sleep(RETRY_S)

    def _brokers(self) -> list[tuple[str, int]]:
        """Every live broker's address, from the first bootstrap broker that answers."""
        return live_broker_addresses(self._bootstrap, self._client_id, self._timeout_s, self._security)

    def _ask_every_broker(self, request: object) -> list[object]:
        """Each live broker's answer to ``request`` (brokers that cannot be reached are left out)."""
        responses = []
        for host, port in self._brokers():
            try:
                connection = BlockingConnection(host, port, self._client_id, self._timeout_s, self._security)
            except BrokerUnavailableError:
                continue  # its groups are moving to other brokers
            try:
                responses.append(connection.request(request, self._timeout_s))
            finally:
                connection.close()
        return responses

    def close(self, timeout: float | None = None) -> None:
        """Close the connections (at once; ``timeout`` is accepted so that every client closes alike)."""
        connections, self._connections = self._connections, {}
        for connection in connections.values():
            connection.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class GroupAdmin(CoordinatorAdmin):
    """Talks to the group coordinators on the caller's thread."""

    def list_groups(self) -> list[tuple[str, str]]:
        """``(group id, state)`` of every group: each live broker lists the groups it coordinates."""
        listed: dict[str, str] = {}
        for response in self._ask_every_broker(ListGroupsRequest()):
            assert isinstance(response, ListGroupsResponse)
            listed.update((group.group_id, group.group_state) for group in response.groups)
        return sorted(listed.items())

    def describe_group(self, group_id: str) -> GroupInfo:
        """State, assignor and members (with their assignments) of a group."""
        response = self._request(group_id, DescribeGroupsRequest(groups=(group_id,)), _raise_for_described)
        assert isinstance(response, DescribeGroupsResponse)
        described = response.groups[0]
        members = tuple(
            GroupMemberInfo(
                member_id=member.member_id, group_instance_id=member.group_instance_id, client_id=member.client_id,
                client_host=member.client_host,
                assignment=frozenset(
                    (topic.topic, partition)
                    for topic in consumer_protocol.decode_assignment(member.member_assignment).assigned_partitions
                    for partition in topic.partitions
                ),
            )
            for member in described.members
        )
        return GroupInfo(group_id=group_id, state=described.group_state, assignor=described.protocol_data,
                         members=members)

    def committed_offsets(self, group_id: str, require_stable: bool = False) -> dict[TopicPartition, int]:
        """Every committed offset of a group; ``require_stable``: raise ``UnstableOffsetCommitError`` while a
        transaction's offsets for the group are undecided instead of answering the older ones."""
        response = self._request(group_id, OffsetFetchRequest(group_id=group_id, topics=None, require_stable=require_stable))
        assert isinstance(response, OffsetFetchResponse)
        return {(topic.name, p.partition_index): p.committed_offset
                for topic in response.topics for p in topic.partitions if p.committed_offset >= 0}

    def set_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Overwrite committed offsets of a group without active members (the broker refuses otherwise)."""
        by_topic: dict[str, list[OffsetCommitPartition]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(OffsetCommitPartition(partition_index=partition, committed_offset=offset))
        request = OffsetCommitRequest(group_id=group_id, topics=tuple(
            OffsetCommitTopic(name=name, partitions=tuple(parts)) for name, parts in by_topic.items()
        ))
        self._request(group_id, request, raise_for_commit)

    def delete_group(self, group_id: str) -> None:
        """Delete a group without members and its committed offsets."""
        self._request(group_id, DeleteGroupsRequest(groups_names=(group_id,)), _raise_for_deleted)


def _raise_for_described(response: object) -> None:
    assert isinstance(response, DescribeGroupsResponse)
    described = response.groups[0]
    if described.error_code:
        raise error_for_code(described.error_code, described.error_message or f"describing {described.group_id} failed")


def _raise_for_deleted(response: object) -> None:
    assert isinstance(response, DeleteGroupsResponse)
    result = response.results[0]
    if result.error_code:
        raise error_for_code(result.error_code, result.error_message or f"deleting {result.group_id} failed")
