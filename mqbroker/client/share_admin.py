"""Blocking administration of share groups and push subscriptions: create, alter, delete, list, describe.

A share group's requests go to its host (the leader of its ``__share_group_state`` partition),
found again while it moves; listing asks every broker, since each lists only the groups it hosts.
A push subscription is a share group with ``push.*`` configs: ``create_subscription`` builds them
(generating the signing secret when none is given).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from mqbroker.client.group_admin import CoordinatorAdmin
from mqbroker.errors import error_for_code
from mqbroker.shares.settings import SECRET_BYTES, push_configs
from mqbroker.protocols.native.messages import CoordinatorType
from mqbroker.protocols.native.share_messages import (
    AlterShareGroupRequest,
    CreateShareGroupRequest,
    DeleteShareGroupRequest,
    DescribedShareGroup,
    ListedShareGroup,
    ListShareGroupsRequest,
    ListShareGroupsResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)

class ShareGroupAdmin(CoordinatorAdmin):
    """Talks to share groups' hosts on the caller's thread."""

    coordinator_type = CoordinatorType.SHARE

    def create(self, group_id: str, topics: Sequence[str], configs: Mapping[str, str] | None = None) -> None:
        """Define a share group over ``topics`` (see ``mqbroker.shares.settings`` for the configs)."""
        self._request(group_id, CreateShareGroupRequest(group_id=group_id, topics=tuple(topics),
                                                        configs=dict(configs or {})))

    def alter(self, group_id: str, *, topics: Sequence[str] | None = None, set_configs: Mapping[str, str] | None = None,
              delete_configs: Sequence[str] = ()) -> None:
        """Change a share group's topics (None: unchanged) and configs."""
        self._request(group_id, AlterShareGroupRequest(group_id=group_id, topics=None if topics is None else tuple(topics),
                                                       set_configs=dict(set_configs or {}),
                                                       delete_configs=tuple(delete_configs)))

    def delete(self, group_id: str) -> None:
        """Delete a share group without members, with its state and scheduled records."""
        self._request(group_id, DeleteShareGroupRequest(group_id=group_id))

    def list(self) -> list[ListedShareGroup]:
        """Every share group: each live broker lists those it hosts."""
        listed: dict[str, ListedShareGroup] = {}
        for response in self._ask_every_broker(ListShareGroupsRequest()):
            assert isinstance(response, ListShareGroupsResponse)
            listed.update((group.group_id, group) for group in response.groups)
        return [listed[group_id] for group_id in sorted(listed)]

    def describe(self, group_id: str) -> DescribedShareGroup:
        """A share group's configs (secrets masked), members, partitions (in flight, available, delivery
        counts, lag) and dead-letter depth."""
        response = self._request(group_id, ShareGroupDescribeRequest(group_ids=(group_id,)), _raise_for_described)
        assert isinstance(response, ShareGroupDescribeResponse)
        return response.groups[0]

    def create_subscription(self, name: str, topic: str, *, endpoint: str, secret: str | None = None,
                            **options: Any) -> str:
        """Create a push subscription (the other keywords are ``push_configs``'s); returns its signing secret,
        a fresh random one unless ``secret`` is given."""
        configs = push_configs(endpoint=endpoint, secret=secret or secrets.token_hex(SECRET_BYTES), **options)
        self.create(name, [topic], configs)
        return configs["push.secret"]


def _raise_for_described(response: object) -> None:
    assert isinstance(response, ShareGroupDescribeResponse)
    described = response.groups[0]
    if described.error_code:
        raise error_for_code(described.error_code, described.error_message or f"describing {described.group_id} failed")
