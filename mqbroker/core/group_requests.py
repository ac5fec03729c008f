"""The consumer-group calls of ``IBroker`` (tx-light): authorized here, answered by the group's coordinator."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from twisted.internet.defer import Deferred, gatherResults, succeed

from mqbroker.core.guards import errors_as_failures, require_permission
from mqbroker.groups import messages as group_messages
from mqbroker.groups.hosting import GroupHosting
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.offsets import CommittedOffset
from mqbroker.groups.service import GroupService
from mqbroker.interfaces import IAuthorizer
from mqbroker.model import BrokerEndpoint, Operation, Principal, ResourceType

Result = TypeVar("Result")


class GroupRequests:
    """Checks each group call's permission, then hands it to the ``GroupService`` coordinating the group."""

    def __init__(self, *, authorizer: IAuthorizer, hosting: GroupHosting) -> None:
        self._authorizer = authorizer
        self._hosting = hosting

    @errors_as_failures
    def _call(
        self, principal: Principal, operation: Operation, group_id: str, call: Callable[[GroupService], Deferred[Result]]
    ) -> Deferred[Result]:
        """Authorize ``operation`` on the group, then hand the call to the group's service."""
        require_permission(self._authorizer, principal, operation, ResourceType.GROUP, group_id)
        return call(self._hosting.service_for(group_id))

    def join_group(
        self, principal: Principal, request: group_messages.JoinRequest
    ) -> Deferred[group_messages.JoinResponse]:
        """Join a group; see ``IBroker.join_group``."""
        return self._call(principal, Operation.READ, request.group_id, lambda groups: groups.join(request))

    def sync_group(
        self, principal: Principal, request: group_messages.MemberRequest
    ) -> Deferred[group_messages.SyncResponse]:
        """A member's assignment; see ``IBroker.sync_group``."""
        return self._call(principal, Operation.READ, request.group_id, lambda groups: groups.sync(request))

    def heartbeat(self, principal: Principal, request: group_messages.MemberRequest, polled: bool) -> Deferred[None]:
        """Keep a member alive; see ``IBroker.heartbeat``."""
        return self._call(principal, Operation.READ, request.group_id, lambda groups: groups.heartbeat(request, polled))

    def leave_group(self, principal: Principal, request: group_messages.MemberRequest) -> Deferred[None]:
        """A member leaves; see ``IBroker.leave_group``."""
        return self._call(principal, Operation.READ, request.group_id, lambda groups: groups.leave(request))

    @errors_as_failures
    def commit_offsets(self, principal: Principal, request: group_messages.OffsetCommitRequest) -> Deferred[None]:
        """Commit offsets durably; see ``IBroker.commit_offsets``."""
        for commit in request.offsets:
            require_permission(self._authorizer, principal, Operation.READ, ResourceType.TOPIC,
                               commit.topic_partition.topic)
        return self._call(principal, Operation.READ, request.group_id, lambda groups: groups.commit(request))

    def fetch_offsets(
        self, principal: Principal, group_id: str, partitions: Sequence[TopicPartition] | None,
        require_stable: bool = False,
    ) -> Deferred[dict[TopicPartition, CommittedOffset | None]]:
        """Committed offsets; see ``IBroker.fetch_offsets``."""
        return self._call(principal, Operation.DESCRIBE, group_id,
                          lambda groups: groups.fetch_offsets(group_id, partitions, require_stable))

    def describe_group(self, principal: Principal, group_id: str) -> Deferred[group_messages.GroupDescription]:
        """A group's state and members; see ``IBroker.describe_group``."""
        return self._call(principal, Operation.DESCRIBE, group_id, lambda groups: groups.describe_group(group_id))

    def delete_group(self, principal: Principal, group_id: str) -> Deferred[None]:
        """Delete an empty group and its offsets; see ``IBroker.delete_group``."""
        return self._call(principal, Operation.DELETE, group_id, lambda groups: groups.delete_group(group_id))

    @errors_as_failures
    def delete_offsets(self, principal: Principal, group_id: str, partitions: Sequence[TopicPartition]
                       ) -> Deferred[dict[TopicPartition, BaseException | None]]:
        """Delete some committed offsets of a group; see ``IBroker.delete_offsets``."""
        for topic in sorted({tp.topic for tp in partitions}):
            require_permission(self._authorizer, principal, Operation.READ, ResourceType.TOPIC, topic)
        return self._call(principal, Operation.DELETE, group_id,
                          lambda groups: groups.delete_offsets(group_id, partitions))

    @errors_as_failures
    def find_coordinator(self, principal: Principal, group_id: str) -> Deferred[BrokerEndpoint]:
        """The broker leading the group's offsets partition; see ``IBroker.find_coordinator``."""
        require_permission(self._authorizer, principal, Operation.DESCRIBE, ResourceType.GROUP, group_id)
        return succeed(self._hosting.coordinator_of(group_id))

    @errors_as_failures
    def list_groups(self, principal: Principal) -> Deferred[list[group_messages.GroupListing]]:
        """Groups coordinated here that the principal may describe; see ``IBroker.list_groups``."""
        listed = gatherResults([service.list_groups() for service in self._hosting.services()], consumeErrors=True)
        listed.addCallback(lambda lists: sorted(
            (g for groups in lists for g in groups
             if self._authorizer.authorize(principal, Operation.DESCRIBE, ResourceType.GROUP, g.group_id)),
            key=lambda g: g.group_id,
        ))
        return listed
