"""Which live sessions a published topic reaches: one trie of every connected client's subscriptions.

A message matching several subscriptions of one client is routed to that client once, with
all of them (the session merges them). A shared subscription ``$share/{group}/{filter}``
delivers each message to ONE member of the group, chosen round-robin among the members
whose subscription matched; the caller may veto a member (e.g. its window is full) and the
next one is tried.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from mqbroker.protocols.mqtt.state import GroupKey, Subscription, group_key_of
from mqbroker.protocols.mqtt.topics import SubscriptionTrie, parse_subscription_filter

#: Trie key: (client id, share group or None); one entry per client, group and filter.
EntryKey = tuple[str, str | None]
Member = tuple[str, Subscription]
#: What a topic matches: its plain subscriptions by client id, and its share groups' members.
Matches = tuple[dict[str, list[Subscription]], dict[GroupKey, list[Member]]]
#: Topics whose matches are remembered until the subscriptions change (a fan-out routes the same few topics
#: again and again); past this many the memory starts over.
_ROUTED_TOPICS_MAX = 4096


class SubscriptionRegistry:
    """Live subscriptions by client id, matched through a ``SubscriptionTrie``."""

    __slots__ = ("_trie", "_filters_by_client", "_turns", "_matches", "_group_sizes")

    def __init__(self) -> None:
        self._trie: SubscriptionTrie[EntryKey, Subscription] = SubscriptionTrie()
        self._filters_by_client: dict[str, dict[str, str]] = {}  # client id -> {sent filter: bare filter}
        self._turns: dict[tuple[str, str], int] = {}  # (group, bare filter) -> round-robin counter
        self._matches: dict[str, Matches] = {}  # by topic, while the subscriptions stay as they are
        self._group_sizes: dict[GroupKey, int] = {}  # live members of each share group

    def __len__(self) -> int:
        return len(self._trie)

    def add(self, client_id: str, subscription: Subscription) -> GroupKey | None:
        """Add or replace ``subscription`` of ``client_id``; the share group it opened (its first member), if any."""
        bare = parse_subscription_filter(subscription.topic_filter).topic_filter
        self._matches.clear()
        self._trie.add(bare, (client_id, subscription.share_group), subscription)
        filters = self._filters_by_client.setdefault(client_id, {})
        added = subscription.topic_filter not in filters
        filters[subscription.topic_filter] = bare
        if not added or subscription.share_group is None:
            return None
        group_key = group_key_of(subscription)
        size = self._group_sizes[group_key] = self._group_sizes.get(group_key, 0) + 1
        return group_key if size == 1 else None

    def remove(self, client_id: str, topic_filter: str) -> GroupKey | None:
        """Remove the subscription ``topic_filter`` (as sent, ``$share/...`` included) of ``client_id``; the share
        group it closed (its last member), if any."""
        filters = self._filters_by_client.get(client_id)
        if filters is None or topic_filter not in filters:
            return None
        bare = filters.pop(topic_filter)
        group = parse_subscription_filter(topic_filter).share_group
        self._matches.clear()
        self._trie.remove(bare, (client_id, group))
        if not filters:
            del self._filters_by_client[client_id]
        if group is None:
            return None
        group_key = (group, bare)
        size = self._group_sizes[group_key] = self._group_sizes[group_key] - 1
        if size:
            return None
        del self._group_sizes[group_key]
        return group_key

    def remove_client(self, client_id: str) -> list[GroupKey]:
        """Remove every subscription of ``client_id`` (its connection ended); the share groups that closed."""
        closed = [self.remove(client_id, topic_filter) for topic_filter in list(self._filters_by_client.get(client_id, {}))]
        return [group_key for group_key in closed if group_key is not None]

    def _matched(self, topic: str) -> Matches:
        matches = self._matches.get(topic)
        if matches is None:
            plain: dict[str, list[Subscription]] = {}
            groups: dict[GroupKey, list[Member]] = {}
            for (client_id, group), subscription in self._trie.match(topic):
                if group is None:
                    plain.setdefault(client_id, []).append(subscription)
                else:
                    groups.setdefault(group_key_of(subscription), []).append((client_id, subscription))
            if len(self._matches) >= _ROUTED_TOPICS_MAX:
                self._matches.clear()
            matches = self._matches[topic] = (plain, groups)
        return matches

    def unshared_route(self, topic: str) -> Mapping[str, list[Subscription]] | None:
        """``route`` of a topic that reaches no share group (nothing to choose: no ``accepts`` is needed), else None.
        The mapping is remembered for the next message to the topic: the caller only reads it."""
        plain, groups = self._matched(topic)
        return None if groups else plain

    def route(
        self, topic: str, accepts: Callable[[str, Subscription], bool], unplaced: list[GroupKey] | None = None
    ) -> Mapping[str, list[Subscription]]:
        """The subscriptions ``topic`` reaches, by client id: every plain one, one member per share group (the
        caller only reads the mapping).

        ``accepts(client_id, subscription)`` may turn a share-group member down; the group's
        next member is tried. If none accepts, the group goes to ``unplaced`` when the caller
        passes a list (it keeps the message for the group), else the first one in turn gets it.
        """
        plain, groups = self._matched(topic)
        if not groups:
            return plain
        routed = dict(plain)  # the remembered lists stay as they are: a chosen member's gets a new one
        for group_key, members in groups.items():
            chosen = self.choose(group_key, members, accepts)
            if chosen is None:
                if unplaced is not None:
                    unplaced.append(group_key)
                    continue
                chosen = members[(self._turns[group_key] - 1) % len(members)]
            routed[chosen[0]] = [*routed.get(chosen[0], ()), chosen[1]]
        return routed

    def group_members(self, topic: str, group_key: GroupKey) -> list[Member]:
        """The members of share group ``group_key`` whose subscription matches ``topic``."""
        group = group_key[0]
        return [
            (client_id, subscription) for (client_id, entry_group), subscription in self._trie.match(topic)
            if entry_group == group and group_key_of(subscription) == group_key
        ]

    def choose(self, group_key: GroupKey, members: list[Member], accepts: Callable[[str, Subscription], bool]) -> Member | None:
        """The member whose turn it is among those ``accepts`` takes (round-robin), or None."""
        members.sort(key=lambda member: member[0])  # the trie's order is not stable across changes
        turn = self._turns.get(group_key, 0)
        self._turns[group_key] = turn + 1
        for step in range(len(members)):
            candidate = members[(turn + step) % len(members)]
            if accepts(*candidate):
                return candidate
        return None

    def clients(self) -> Iterator[str]:
        """Client ids with at least one subscription."""
        return iter(self._filters_by_client)
