"""Share-group calls answered by the group's host, wherever the caller arrived (Twisted).

A share group lives on one broker: the leader of its ``__share_group_state`` partition. The
native clients find that broker themselves; the admin HTTP API and the front ends that serve
their clients through the routing broker (AMQP share queues) cannot, so this does it for them:
admin calls, and a member's heartbeats, fetches and acknowledgements. The group's state thus has
one owner in the cluster however many brokers its members arrived through; a member is known to
the host by the member id the host gave it (its client id and host there are this broker's).
Each call goes to the local broker first, which authorizes it for the caller and answers when
it hosts the group; its ``NOT_COORDINATOR`` (raised only after the caller was authorized) sends
the call to the host over the native protocol (``PeerConnections``), as the routing broker
forwards produce and fetch. A fetch forwarded waits at the host for its long poll, so the call
may take that long plus ``share_admin_forward_wait_s``. Listing asks every live broker, since
each lists only the groups it hosts, and keeps the groups the caller may describe (the other
brokers answer the inter-broker principal). A broker that cannot be reached is left out of a
listing, as the CLI does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from twisted.internet.defer import Deferred, FirstError, gatherResults, maybeDeferred
from twisted.logger import Logger

from mqbroker import errors, limits
from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.forwarding import share_wire
from mqbroker.interfaces import IAuthorizer, IBroker
from mqbroker.model import Operation, Principal, ResourceType
from mqbroker.protocols.native import share_messages as wire
from mqbroker.shares import messages as shares

if TYPE_CHECKING:  # the routing broker builds this router: no import cycle at run time
    from mqbroker.forwarding.routing_broker import PeerRequests

T = TypeVar("T")


class ShareGroupRouting:
    """Share groups' admin and member calls at their hosts (see the module docstring)."""

    log = Logger()

    def __init__(self, *, local: IBroker, node_id: int, peers: PeerRequests, authorizer: IAuthorizer) -> None:
        self._local = local
        self._node_id = node_id
        self._peers = peers
        self._authorizer = authorizer

    async def create(self, principal: Principal, group_id: str, topics: Sequence[str],
                     configs: Mapping[str, str]) -> None:
        """Define a share group (see ``IBroker.create_share_group``)."""
        await self._at_host(principal, group_id,
                            lambda: self._local.create_share_group(principal, group_id, topics, configs),
                            share_wire.create_request(group_id, topics, configs), lambda response: None)

    async def alter(self, principal: Principal, group_id: str, topics: Sequence[str] | None,
                    set_configs: Mapping[str, str], delete_configs: Sequence[str]) -> None:
        """Change a share group's topics and configs (see ``IBroker.alter_share_group``)."""
        await self._at_host(principal, group_id,
                            lambda: self._local.alter_share_group(principal, group_id, topics, set_configs,
                                                                  delete_configs),
                            share_wire.alter_request(group_id, topics, set_configs, delete_configs),
                            lambda response: None)

    async def delete(self, principal: Principal, group_id: str) -> None:
        """Delete a share group without members (see ``IBroker.delete_share_group``)."""
        await self._at_host(principal, group_id, lambda: self._local.delete_share_group(principal, group_id),
                            share_wire.delete_request(group_id), lambda response: None)

    async def describe(self, principal: Principal, group_id: str) -> shares.ShareGroupDescription:
        """A share group's definition, members, partitions and dead letters."""
        return await self._at_host(principal, group_id, lambda: self._local.describe_share_group(principal, group_id),
                                   share_wire.describe_request(group_id),
                                   lambda response: share_wire.description(response, group_id))

    async def heartbeat(self, principal: Principal,
                        request: shares.ShareHeartbeatRequest) -> shares.ShareHeartbeatResponse:
        """Join, stay in or leave a share group (see ``IBroker.share_group_heartbeat``)."""
        return await self._at_host(principal, request.group_id,
                                   lambda: self._local.share_group_heartbeat(principal, request),
                                   share_wire.heartbeat_request(request), share_wire.heartbeat_answer)

    async def fetch(self, principal: Principal, request: shares.ShareFetchRequest) -> shares.ShareFetchResponse:
        """Acknowledge, then acquire records (see ``IBroker.share_fetch``)."""
        return await self._at_host(principal, request.group_id, lambda: self._local.share_fetch(principal, request),
                                   share_wire.fetch_request(request), share_wire.fetch_answer,
                                   wait_ms=max(request.wait_ms_max, 0))

    async def acknowledge(self, principal: Principal,
                          request: shares.ShareAcknowledgeRequest) -> tuple[shares.AcknowledgeResult, ...]:
        """Settle leased records (see ``IBroker.share_acknowledge``)."""
        return await self._at_host(principal, request.group_id,
                                   lambda: self._local.share_acknowledge(principal, request),
                                   share_wire.acknowledge_request(request),
                                   lambda response: share_wire.acknowledge_results(response.topics))

    async def list(self, principal: Principal) -> list[shares.ShareGroupListing]:
        """Every share group of the cluster the principal may describe, by id (the other brokers asked at once)."""
        listed = {listing.group_id: listing for listing in await maybeDeferred(self._local.list_share_groups, principal)}
        metadata = await maybeDeferred(self._local.metadata, principal, (), False)
        asked = [Deferred.fromCoroutine(self._hosted_at(broker.node_id))
                 for broker in metadata.brokers if broker.node_id != self._node_id]
        try:
            answers = await gatherResults(asked, consumeErrors=True)
        except FirstError as error:
            error.subFailure.raiseException()
        for listing in (listing for answer in answers for listing in answer):
            if self._authorizer.authorize(principal, Operation.DESCRIBE, ResourceType.GROUP, listing.group_id):
                listed.setdefault(listing.group_id, listing)
        return [listed[group_id] for group_id in sorted(listed)]

    async def _hosted_at(self, node_id: int) -> list[shares.ShareGroupListing]:
        """The share groups broker ``node_id`` hosts (none when it cannot be reached: its groups are moving)."""
        try:
            response = await self._peers.request(node_id, wire.ListShareGroupsRequest(),
                                                 limits.share_admin_forward_wait_s)
        except (BrokerUnavailableError, errors.RequestTimedOutError) as error:
            self.log.info("share groups of broker {node_id} left out of a listing: {error}", node_id=node_id,
                          error=error)
            return []
        return share_wire.listings(response)

    async def _at_host(self, principal: Principal, group_id: str, here: Callable[[], Any],
                       request: object, answer: Callable[[Any], T], wait_ms: int = 0) -> T:
        """``here()`` at the local broker; forwarded as ``request`` to the group's host when that is another broker
        (given ``wait_ms`` of its own to wait there)."""
        try:
            return await maybeDeferred(here)
        except errors.NotCoordinatorError:
            host = await maybeDeferred(self._local.find_share_coordinator, principal, group_id)
            if host.node_id == self._node_id:
                raise  # the group moved here meanwhile: the caller retries (503)
        return answer(await self._peers.request(host.node_id, request,
                                                wait_ms / 1000.0 + limits.share_admin_forward_wait_s))
