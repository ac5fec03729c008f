"""Blocking administration of consumer groups: list, describe, committed offsets, reset, delete."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mqbroker.client.blocking_group import coordinator_connection
from mqbroker.client.connection import parse_address
from mqbroker.client.group_member import TopicPartition, raise_for_commit
from mqbroker.client.security import ClientSecurity
from mqbroker.errors import error_for_code
from mqbroker.protocols.native import consumer_protocol
from mqbroker.protocols.native.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
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


class GroupAdmin:
    """Talks to the group coordinator on the caller's thread."""

    def __init__(self, bootstrap: str | Sequence[str], *, request_timeout_ms: int = 30_000,
                 client_id: str = "mqbroker-admin", security: ClientSecurity | None = None) -> None:
        addresses = [bootstrap] if isinstance(bootstrap, str) else list(bootstrap)
        self._timeout_s = request_timeout_ms / 1000
        self._connection = coordinator_connection(
            [parse_address(a) for a in addresses], client_id, self._timeout_s, security)

    def _request(self, request: object) -> object:
        return self._connection.request(request, self._timeout_s)

    def list_groups(self) -> list[tuple[str, str]]:
        """``(group id, state)`` of every group."""
        response = self._request(ListGroupsRequest())
        assert isinstance(response, ListGroupsResponse)
        return [(group.group_id, group.group_state) for group in response.groups]

    def describe_group(self, group_id: str) -> GroupInfo:
        """State, assignor and members (with their assignments) of a group."""
        response = self._request(DescribeGroupsRequest(groups=(group_id,)))
        assert isinstance(response, DescribeGroupsResponse)
        described = response.groups[0]
        if described.error_code:
            raise error_for_code(described.error_code, described.error_message or f"describing {group_id} failed")
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

    def committed_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        """Every committed offset of a group."""
        response = self._request(OffsetFetchRequest(group_id=group_id, topics=None))
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
        response = self._request(request)
        assert isinstance(response, OffsetCommitResponse)
        raise_for_commit(response)

    def delete_group(self, group_id: str) -> None:
        """Delete a group without members and its committed offsets."""
        response = self._request(DeleteGroupsRequest(groups_names=(group_id,)))
        assert isinstance(response, DeleteGroupsResponse)
        result = response.results[0]
        if result.error_code:
            raise error_for_code(result.error_code, result.error_message or f"deleting {group_id} failed")

    def close(self) -> None:
        """Close the connection."""
        self._connection.close()

    def __enter__(self) -> GroupAdmin:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
