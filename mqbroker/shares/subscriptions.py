"""Push subscriptions as operations over ``IBroker``: what the HTTP admin API (and anything in the broker) calls.

A push subscription is a share group with ``push.*`` configs: creating one defines the group (with
a fresh signing secret unless one is given), and the broker hosting it starts POSTing. Listing
covers the groups hosted by this broker; the CLI asks every broker.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Mapping
from typing import Any

from twisted.internet.defer import Deferred

from mqbroker.interfaces import IBroker
from mqbroker.model import Principal
from mqbroker.shares.messages import ShareGroupDescription, ShareGroupListing
from mqbroker.shares.settings import SECRET_BYTES, push_configs


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionListing:
    """One push subscription: its topic(s) and endpoint."""

    name: str
    topics: tuple[str, ...]
    endpoint: str


class Subscriptions:
    """Create, change, delete, list and describe push subscriptions."""

    def __init__(self, broker: IBroker) -> None:
        self._broker = broker

    def create(self, principal: Principal, name: str, topic: str, *, endpoint: str, secret: str | None = None,
               **options: Any) -> Deferred[str]:
        """Define the subscription (``push_configs``'s options); fires with its signing secret."""
        configs = push_configs(endpoint=endpoint, secret=secret or secrets.token_hex(SECRET_BYTES), **options)
        created = self._broker.create_share_group(principal, name, [topic], configs)
        return created.addCallback(lambda _: configs["push.secret"])

    def update(self, principal: Principal, name: str, configs: Mapping[str, str],
               removed: tuple[str, ...] = ()) -> Deferred[None]:
        """Change configs (``push.endpoint``, ``push.max.outstanding``, ...) or remove them."""
        return self._broker.alter_share_group(principal, name, None, dict(configs), removed)

    def delete(self, principal: Principal, name: str) -> Deferred[None]:
        """Delete the subscription and its delivery state (records stay in their topic)."""
        return self._broker.delete_share_group(principal, name)

    def list(self, principal: Principal) -> Deferred[list[SubscriptionListing]]:
        """The push subscriptions hosted by this broker."""
        listed = self._broker.list_share_groups(principal)
        return listed.addCallback(_subscriptions)

    def describe(self, principal: Principal, name: str) -> Deferred[ShareGroupDescription]:
        """Its configs (secret masked), partitions in flight and dead-letter depth."""
        return self._broker.describe_share_group(principal, name)


def _subscriptions(listings: list[ShareGroupListing]) -> list[SubscriptionListing]:
    return [SubscriptionListing(name=listing.group_id, topics=listing.topics, endpoint=listing.push_endpoint)
            for listing in listings if listing.push_endpoint]
