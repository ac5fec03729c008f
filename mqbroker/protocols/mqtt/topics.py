"""MQTT topic names and filters: validation, a subscription trie, shared subscriptions, log mapping.

Matching a published topic against subscriptions walks a trie of filter levels, so its cost
depends on the topic's depth and the number of matches, never on the number of
subscriptions (amqtt scans them all on every publish; we do not).

Mapping onto the log (DESIGN §4): ``TopicMapping`` holds ordered rules "MQTT topic filter →
log topic". A published MQTT message goes to the log topic of the first rule whose filter
matches its topic name, or to the default log topic ``mqtt.messages`` when none does; the
record key is the MQTT topic name (UTF-8), so one device's messages land in one partition
and stay in order. A subscription reads every log topic its filter may map onto and keeps
the records whose key matches the filter.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from mqbroker.limits import mqtt_mapping_filter_length_max, mqtt_mapping_rules_max
from mqbroker.protocols.mqtt.errors import MqttProtocolError
from mqbroker.protocols.mqtt.packets import ReasonCode

SHARED_PREFIX = "$share/"
#: The default log topic for MQTT traffic when no mapping rule matches.
DEFAULT_LOG_TOPIC = "mqtt.messages"
_LOG_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")

Key = TypeVar("Key", bound=Hashable)
Value = TypeVar("Value")


def _invalid_name(message: str) -> MqttProtocolError:
    return MqttProtocolError(ReasonCode.TOPIC_NAME_INVALID, message)


def _invalid_filter(message: str) -> MqttProtocolError:
    return MqttProtocolError(ReasonCode.TOPIC_FILTER_INVALID, message)


def validate_topic_name(topic: str) -> None:
    """Raise TOPIC_NAME_INVALID unless ``topic`` may be published to."""
    if not topic:
        raise _invalid_name("a topic name has at least one character [MQTT-4.7.3-1]")
    if "+" in topic or "#" in topic:
        raise _invalid_name(f"topic name {topic!r} contains a wildcard [MQTT-3.3.2-2]")


def validate_topic_filter(topic_filter: str) -> None:
    """Raise TOPIC_FILTER_INVALID unless ``topic_filter`` is a well-formed (non-shared) filter."""
    if not topic_filter:
        raise _invalid_filter("a topic filter has at least one character [MQTT-4.7.3-1]")
    levels = topic_filter.split("/")
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != len(levels) - 1):
            raise _invalid_filter(f"'#' must be a whole last level in {topic_filter!r} [MQTT-4.7.1-1]")
        if "+" in level and level != "+":
            raise _invalid_filter(f"'+' must be a whole level in {topic_filter!r} [MQTT-4.7.1-2]")


def has_wildcards(topic_filter: str) -> bool:
    """Whether ``topic_filter`` uses ``+`` or ``#``."""
    return "+" in topic_filter or "#" in topic_filter


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionFilter:
    """A SUBSCRIBE filter split into its share group (None when not shared) and topic filter."""

    share_group: str | None
    topic_filter: str


def parse_subscription_filter(text: str) -> SubscriptionFilter:
    """Validate a SUBSCRIBE/UNSUBSCRIBE filter, recognising ``$share/{group}/{filter}``."""
    if not text.startswith(SHARED_PREFIX):
        validate_topic_filter(text)
        return SubscriptionFilter(share_group=None, topic_filter=text)
    group, separator, topic_filter = text[len(SHARED_PREFIX) :].partition("/")
    if not group or "+" in group or "#" in group:
        raise _invalid_filter(f"share name in {text!r} must be non-empty without '+' or '#' [MQTT-4.8.2-1]")
    if not separator or not topic_filter:
        raise _invalid_filter(f"shared subscription {text!r} needs a topic filter after the share name [MQTT-4.8.2-2]")
    validate_topic_filter(topic_filter)
    return SubscriptionFilter(share_group=group, topic_filter=topic_filter)


def topic_matches(topic_filter: str, topic: str) -> bool:
    """Whether ``topic`` matches ``topic_filter`` (a reference for single checks, not for fan-out)."""
    filter_levels, topic_levels = topic_filter.split("/"), topic.split("/")
    if topic.startswith("$") and filter_levels[0] in ("+", "#"):
        return False  # [MQTT-4.7.2-1]
    for index, level in enumerate(filter_levels):
        if level == "#":
            return True
        if index >= len(topic_levels) or (level != "+" and level != topic_levels[index]):
            return False
    return len(filter_levels) == len(topic_levels)


class _Node(Generic[Key, Value]):
    __slots__ = ("children", "entries")

    def __init__(self) -> None:
        self.children: dict[str, _Node[Key, Value]] = {}
        self.entries: dict[Key, Value] = {}


class SubscriptionTrie(Generic[Key, Value]):
    """Topic filters in a trie of levels; ``match(topic)`` finds every entry whose filter matches.

    Each entry is stored under one filter and a key that is unique for that filter; the
    session layer uses ``(client_id, share_group)`` as key and the subscription as value.
    """

    __slots__ = ("_root", "_count")

    def __init__(self) -> None:
        self._root: _Node[Key, Value] = _Node()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, topic_filter: str, key: Key, value: Value) -> bool:
        """Store ``value`` under ``topic_filter`` and ``key``; True if it was not there before."""
        node = self._root
        for level in topic_filter.split("/"):
            child = node.children.get(level)
            if child is None:
                child = node.children[level] = _Node()
            node = child
        is_new = key not in node.entries
        node.entries[key] = value
        self._count += is_new
        return is_new

    def remove(self, topic_filter: str, key: Key) -> Value | None:
        """Remove the entry for ``key`` under ``topic_filter``; return it, or None if absent."""
        path = [self._root]
        levels = topic_filter.split("/")
        for level in levels:
            child = path[-1].children.get(level)
            if child is None:
                return None
            path.append(child)
        value = path[-1].entries.pop(key, None)
        if value is None:
            return None
        self._count -= 1
        for depth in range(len(levels), 0, -1):  # prune branches left empty, deepest first
            node = path[depth]
            if node.entries or node.children:
                break
            del path[depth - 1].children[levels[depth - 1]]
        return value

    def match(self, topic: str) -> list[tuple[Key, Value]]:
        """Every (key, value) whose filter matches ``topic``; wildcards skip ``$`` topics at level 1."""
        levels = topic.split("/")
        count = len(levels)
        found: list[tuple[Key, Value]] = []
        stack: list[tuple[_Node[Key, Value], int]] = [(self._root, 0)]
        while stack:
            node, index = stack.pop()
            children = node.children
            wildcards_allowed = index > 0 or not topic.startswith("$")  # [MQTT-4.7.2-1]
            multi = children.get("#") if wildcards_allowed else None
            if multi is not None:
                found.extend(multi.entries.items())  # '#' also matches the parent level
            if index == count:
                found.extend(node.entries.items())
                continue
            single = children.get("+") if wildcards_allowed else None
            if single is not None:
                stack.append((single, index + 1))
            exact = children.get(levels[index])
            if exact is not None:
                stack.append((exact, index + 1))
        return found

    def items(self) -> Iterator[tuple[str, Key, Value]]:
        """Every (filter, key, value), for snapshots and tests."""
        stack: list[tuple[_Node[Key, Value], tuple[str, ...]]] = [(self._root, ())]
        while stack:
            node, path = stack.pop()
            for key, value in node.entries.items():
                yield "/".join(path), key, value
            stack.extend((child, path + (level,)) for level, child in node.children.items())


# ---------------------------------------------------------------------------- log mapping


def filters_overlap(first: str, second: str) -> bool:
    """Whether some topic name matches both filters."""
    first_levels, second_levels = first.split("/"), second.split("/")
    if _dollar_mismatch(first_levels, second_levels) or _dollar_mismatch(second_levels, first_levels):
        return False
    for index in range(max(len(first_levels), len(second_levels))):
        a = first_levels[index] if index < len(first_levels) else None
        b = second_levels[index] if index < len(second_levels) else None
        if a == "#" or b == "#":
            return True
        if a is None or b is None:
            return False
        if a != "+" and b != "+" and a != b:
            return False
    return True


def filter_covers(general: str, specific: str) -> bool:
    """Whether every topic name matching ``specific`` also matches ``general``."""
    general_levels, specific_levels = general.split("/"), specific.split("/")
    if _dollar_mismatch(general_levels, specific_levels):
        return False
    for index, level in enumerate(specific_levels):
        if index >= len(general_levels):
            return False
        wanted = general_levels[index]
        if wanted == "#":
            return True
        if level == "#" or (level == "+" and wanted != "+") or (wanted not in ("+", level)):
            return False
    return len(general_levels) == len(specific_levels) or general_levels[len(specific_levels) :] == ["#"]


def _dollar_mismatch(wildcard_side: list[str], literal_side: list[str]) -> bool:
    """A leading wildcard never reaches a ``$`` topic [MQTT-4.7.2-1]."""
    return wildcard_side[0] in ("+", "#") and literal_side[0].startswith("$")


@dataclass(frozen=True, slots=True, kw_only=True)
class MappingRule:
    """MQTT topics matching ``mqtt_filter`` are stored in log topic ``log_topic``."""

    mqtt_filter: str
    log_topic: str


def parse_mapping_rules(text: str) -> list[MappingRule]:
    """``"filter=log_topic,filter=log_topic"`` (the ``mqtt_mapping_rules`` setting) → the rules, in order.

    ``ValueError`` says which rule is malformed; ``TopicMapping`` then checks filters and topic names.
    """
    rules = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        mqtt_filter, equals, log_topic = item.rpartition("=")
        if not equals or not mqtt_filter.strip() or not log_topic.strip():
            raise ValueError(f"MQTT mapping rule {item!r} is not 'topic filter=log topic'")
        rules.append(MappingRule(mqtt_filter=mqtt_filter.strip(), log_topic=log_topic.strip()))
    return rules


def check_mapping_rules(rules: Sequence[MappingRule], default_log_topic: str = DEFAULT_LOG_TOPIC) -> None:
    """``ValueError`` naming the first thing wrong with ``rules``: too many, a filter that is malformed, shared,
    too long or given twice, a log topic whose name is invalid or internal (``__``)."""
    if len(rules) > mqtt_mapping_rules_max:
        raise ValueError(f"{len(rules)} MQTT mapping rules; at most {mqtt_mapping_rules_max} are allowed "
                         "(map whole subtrees with '#' instead of single topics)")
    seen: set[str] = set()
    for number, rule in enumerate(rules, start=1):
        where = f"MQTT mapping rule {number} ({rule.mqtt_filter[:64]!r} -> {rule.log_topic[:64]!r})"
        if len(rule.mqtt_filter) > mqtt_mapping_filter_length_max:
            raise ValueError(f"{where}: the topic filter is longer than {mqtt_mapping_filter_length_max} characters")
        if rule.mqtt_filter.startswith(SHARED_PREFIX):
            raise ValueError(f"{where}: a shared subscription ($share/...) is not a topic filter; map its filter")
        try:
            validate_topic_filter(rule.mqtt_filter)
        except MqttProtocolError as error:
            raise ValueError(f"{where}: {error.message}") from None
        if rule.mqtt_filter in seen:
            raise ValueError(f"{where}: the filter is given twice (the first rule would always win)")
        seen.add(rule.mqtt_filter)
    for name in [rule.log_topic for rule in rules] + [default_log_topic]:
        if not _LOG_TOPIC_NAME.fullmatch(name):
            raise ValueError(f"log topic {name[:300]!r} must be 1-249 characters of [A-Za-z0-9._-]")
        if name.startswith("__"):
            raise ValueError(f"log topic {name!r} is internal (it starts with '__'); map onto a topic of your own")


def mapping_rules_document(rules: Sequence[MappingRule]) -> list[dict[str, str]]:
    """The JSON form of ``rules`` (the admin API's and the cluster metadata's)."""
    return [{"filter": rule.mqtt_filter, "log_topic": rule.log_topic} for rule in rules]


def mapping_rules_from_document(document: Any) -> list[MappingRule]:
    """Rules from their JSON form, checked (``check_mapping_rules``); ``ValueError`` (only) for anything else."""
    if not isinstance(document, list):
        raise ValueError(f"MQTT mapping rules are a list of {{'filter', 'log_topic'}} objects, not {type(document).__name__}")
    if len(document) > mqtt_mapping_rules_max:
        raise ValueError(f"{len(document)} MQTT mapping rules; at most {mqtt_mapping_rules_max} are allowed")
    rules = []
    for number, item in enumerate(document, start=1):
        if not (isinstance(item, dict) and set(item) == {"filter", "log_topic"}
                and isinstance(item["filter"], str) and isinstance(item["log_topic"], str)):
            raise ValueError(f"MQTT mapping rule {number} is not an object with string fields 'filter' and 'log_topic'")
        rules.append(MappingRule(mqtt_filter=item["filter"], log_topic=item["log_topic"]))
    check_mapping_rules(rules)
    return rules


class TopicMapping:
    """Maps MQTT topic names to log topics by ordered rules, with a default (DESIGN §4).

    One object per front end, shared by its sessions: ``replace_rules`` puts new rules in force for all of
    them at once (the cluster's rules changed).
    """

    __slots__ = ("_rules", "_trie", "default_log_topic", "rules_version")

    def __init__(self, rules: Sequence[MappingRule] = (), default_log_topic: str = DEFAULT_LOG_TOPIC) -> None:
        self.default_log_topic = default_log_topic
        #: Counts ``replace_rules`` calls: a log topic looked up before is still right while it is unchanged.
        self.rules_version = 0
        self._rules: tuple[MappingRule, ...] = ()
        self._trie: SubscriptionTrie[int, MappingRule] = SubscriptionTrie()
        self.replace_rules(rules)

    def replace_rules(self, rules: Sequence[MappingRule]) -> None:
        """Put ``rules`` in force (checked first: ``ValueError`` leaves the old ones)."""
        check_mapping_rules(rules, self.default_log_topic)
        trie: SubscriptionTrie[int, MappingRule] = SubscriptionTrie()
        for index, rule in enumerate(rules):
            trie.add(rule.mqtt_filter, index, rule)
        self._rules, self._trie = tuple(rules), trie
        self.rules_version += 1

    @property
    def rules(self) -> tuple[MappingRule, ...]:
        """The rules, first match wins."""
        return self._rules

    def log_topics(self) -> list[str]:
        """Every log topic the rules and the default name, sorted."""
        return sorted({self.default_log_topic, *(rule.log_topic for rule in self._rules)})

    def log_topic_for(self, mqtt_topic: str) -> str:
        """The log topic a message published to ``mqtt_topic`` is stored in."""
        if not self._rules:
            return self.default_log_topic
        matches = self._trie.match(mqtt_topic)
        return min(matches)[1].log_topic if matches else self.default_log_topic

    def log_topics_for_filter(self, topic_filter: str) -> tuple[str, ...]:
        """Every log topic that may hold messages matching ``topic_filter`` (a superset, sorted)."""
        topics = {rule.log_topic for rule in self._rules if filters_overlap(rule.mqtt_filter, topic_filter)}
        if not any(filter_covers(rule.mqtt_filter, topic_filter) for rule in self._rules):
            topics.add(self.default_log_topic)
        return tuple(sorted(topics))


def record_key(mqtt_topic: str) -> bytes:
    """The log record key of a message published to ``mqtt_topic``."""
    return mqtt_topic.encode("utf-8")
