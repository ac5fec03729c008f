"""The share-group calls of ``IBroker`` (tx-light): authorized here, answered by the group's host.

READ on the group to join, fetch and acknowledge, and READ on every topic a member subscribes to
(or names in a fetch); ALTER on the group to create or change it (and READ on its topics);
DELETE to delete it; DESCRIBE to find, describe and list it. Naming a dead-letter topic needs WRITE
on it: the broker copies records there as its own principal, so without this check a group could
write where its creator may not. Internal ``__`` topics can be neither read nor dead-lettered into
by a share group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from twisted.internet.defer import Deferred, succeed

from mqbroker import errors
from mqbroker.core.guards import errors_as_failures, require_permission
from mqbroker.interfaces import IAuthorizer
from mqbroker.model import BrokerEndpoint, Operation, Principal, ResourceType
from mqbroker.shares import messages as m
from mqbroker.shares.hosting import ShareHosting
from mqbroker.shares.service import ShareService

T = TypeVar("T")


def _check_topics(topics: Iterable[str]) -> None:
    for topic in topics:
        if topic.startswith("__"):
            raise errors.InvalidTopicError(f"topic {topic!r} is internal: share groups cannot read or write it")


class ShareRequests:
    """Checks each share-group call's permissions, then hands it to the service hosting the group."""

    def __init__(self, *, authorizer: IAuthorizer, hosting: ShareHosting) -> None:
        self._authorizer = authorizer
        self._hosting = hosting

    def _require_topics(self, principal: Principal, topics: Iterable[str]) -> None:
        topics = set(topics)
        _check_topics(topics)
        for topic in sorted(topics):
            require_permission(self._authorizer, principal, Operation.READ, ResourceType.TOPIC, topic)

    def _require_dead_letter_topic(self, principal: Principal, configs: Mapping[str, str]) -> None:
        topic = configs.get("dead.letter.topic")
        if topic:
            _check_topics([topic])
            require_permission(self._authorizer, principal, Operation.WRITE, ResourceType.TOPIC, topic)

    @errors_as_failures
    def _call(self, principal: Principal, operation: Operation, group_id: str,
              call: Callable[[ShareService], Deferred[T]]) -> Deferred[T]:
        require_permission(self._authorizer, principal, operation, ResourceType.GROUP, group_id)
        return call(self._hosting.service_for(group_id))

    @errors_as_failures
    def find_share_coordinator(self, principal: Principal, group_id: str) -> Deferred[BrokerEndpoint]:
        """The broker hosting the group; see ``IBroker.find_share_coordinator``."""
        require_permission(self._authorizer, principal, Operation.DESCRIBE, ResourceType.GROUP, group_id)
        return succeed(self._hosting.coordinator_of(group_id))

    @errors_as_failures
    def share_group_heartbeat(self, principal: Principal, request: m.ShareHeartbeatRequest) -> Deferred[m.ShareHeartbeatResponse]:
        """Join, stay in or leave a share group; see ``IBroker.share_group_heartbeat``."""
        self._require_topics(principal, request.topics)
        return self._call(principal, Operation.READ, request.group_id, lambda shares: shares.heartbeat(request))

    @errors_as_failures
    def share_fetch(self, principal: Principal, request: m.ShareFetchRequest) -> Deferred[m.ShareFetchResponse]:
        """Acquire records; see ``IBroker.share_fetch``."""
        self._require_topics(principal, {tp.topic for tp in request.partitions})
        return self._call(principal, Operation.READ, request.group_id, lambda shares: shares.fetch(request))

    def share_acknowledge(self, principal: Principal, request: m.ShareAcknowledgeRequest
                          ) -> Deferred[tuple[m.AcknowledgeResult, ...]]:
        """Settle acquired records; see ``IBroker.share_acknowledge``."""
        return self._call(principal, Operation.READ, request.group_id, lambda shares: shares.acknowledge(request))

    @errors_as_failures
    def create_share_group(self, principal: Principal, group_id: str, topics: Sequence[str],
                           configs: Mapping[str, str]) -> Deferred[None]:
        """Define a share group; see ``IBroker.create_share_group``."""
        self._require_topics(principal, topics)
        self._require_dead_letter_topic(principal, configs)
        return self._call(principal, Operation.ALTER, group_id,
                          lambda shares: shares.create_group(group_id, topics, dict(configs)))

    @errors_as_failures
    def alter_share_group(self, principal: Principal, group_id: str, topics: Sequence[str] | None,
                          set_configs: Mapping[str, str], delete_configs: Sequence[str]) -> Deferred[None]:
        """Change a share group; see ``IBroker.alter_share_group``."""
        self._require_topics(principal, topics or ())
        self._require_dead_letter_topic(principal, set_configs)
        return self._call(principal, Operation.ALTER, group_id,
                          lambda shares: shares.alter_group(group_id, topics, dict(set_configs), delete_configs))

    def delete_share_group(self, principal: Principal, group_id: str) -> Deferred[None]:
        """Delete a share group without members; see ``IBroker.delete_share_group``."""
        return self._call(principal, Operation.DELETE, group_id, lambda shares: shares.delete_group(group_id))

    def describe_share_group(self, principal: Principal, group_id: str) -> Deferred[m.ShareGroupDescription]:
        """A share group's state; see ``IBroker.describe_share_group``."""
        return self._call(principal, Operation.DESCRIBE, group_id, lambda shares: shares.describe_group(group_id))

    @errors_as_failures
    def list_share_groups(self, principal: Principal) -> Deferred[list[m.ShareGroupListing]]:
        """The share groups hosted here the principal may describe; see ``IBroker.list_share_groups``."""
        listings = [listing for service in self._hosting.services() for listing in service.list_groups()
                    if self._authorizer.authorize(principal, Operation.DESCRIBE, ResourceType.GROUP, listing.group_id)]
        return succeed(sorted(listings, key=lambda listing: listing.group_id))
