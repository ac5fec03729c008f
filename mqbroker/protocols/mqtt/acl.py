"""MQTT topic ACLs, in the manner of Mosquitto's ``acl_file``: who may publish and read which MQTT topics (pure).

An MQTT topic ACL (resource type ``mqtt_topic``, managed with ``mqbroker acls --mqtt-topic``)
allows or denies a principal (or ``User:*``), from a host (or ``*``), ``read``, ``write`` or
``all`` on an MQTT topic filter. In the filter ``%c`` stands for the connection's client id and
``%u`` for its user name, so one ACL ``allow User:* write devices/%c/#`` lets every device
publish under its own id only (Mosquitto's ``pattern write devices/%c/#``). A client id or user
name that is empty or holds ``/``, ``+`` or ``#`` cannot stand in a filter: an allowing ACL that
needs it does not apply, a denying one applies with ``+`` in its place.

Once the cluster has any MQTT topic ACL (with the ACL authorizer on), every MQTT action needs
one: deny wins, then an allow decides, and what no ACL allows is denied.

* PUBLISH (and the will, checked at CONNECT; a retained message) needs ``write`` on the topic;
* delivering a message (live, from the log, retained) needs ``read`` on its topic;
* SUBSCRIBE to a filter is refused (SUBACK 0x80 / 0x87) when no allowing ``read`` ACL
  overlaps it or a denying one covers all of it; otherwise it is granted and each message is
  checked as it is delivered, so ``#`` brings only what the principal may read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from mqbroker.model import ANONYMOUS, Operation, Principal
from mqbroker.protocols.mqtt.topics import topic_matches
from mqbroker.security.acl import WILDCARD, WILDCARD_PRINCIPAL, Acl, AllOperations, Permission

CLIENT_ID_PLACEHOLDER = "%c"
USER_NAME_PLACEHOLDER = "%u"
#: What a client id or user name may not hold to stand in a topic filter.
_FILTER_CHARACTERS = ("/", "+", "#")
#: Topic decisions one connection keeps (per operation) before it starts over.
DECISIONS_CACHED_MAX = 4096


@dataclass(frozen=True, slots=True, kw_only=True)
class MqttIdentity:
    """Who an MQTT connection is, for its topic ACLs."""

    principal: Principal
    client_id: str

    @property
    def user_name(self) -> str | None:
        """The user name ``%u`` stands for (None for anonymous and non-user principals)."""
        principal = self.principal
        if principal.kind != "User" or principal.name == ANONYMOUS.name:
            return None
        return principal.name


def _usable(value: str | None) -> bool:
    return bool(value) and not any(character in value for character in _FILTER_CHARACTERS)  # type: ignore[operator]


def _substituted(topic_filter: str, identity: MqttIdentity, permission: Permission) -> str | None:
    """The ACL's filter for this connection: placeholders replaced (None: an allow that cannot apply)."""
    if "%" not in topic_filter:
        return topic_filter
    for placeholder, value in ((CLIENT_ID_PLACEHOLDER, identity.client_id), (USER_NAME_PLACEHOLDER, identity.user_name)):
        if placeholder not in topic_filter:
            continue
        if _usable(value):
            topic_filter = topic_filter.replace(placeholder, value)  # type: ignore[arg-type]
        elif permission is Permission.ALLOW:
            return None
        else:
            topic_filter = topic_filter.replace(placeholder, "+")
    return topic_filter


def filters_overlap(first: str, second: str) -> bool:
    """Whether some topic matches both filters."""
    first_levels, second_levels = first.split("/"), second.split("/")
    if _skips_dollar_topics(first_levels[0]) and second_levels[0].startswith("$"):
        return False
    if _skips_dollar_topics(second_levels[0]) and first_levels[0].startswith("$"):
        return False
    for index in range(max(len(first_levels), len(second_levels))):
        one = first_levels[index] if index < len(first_levels) else None
        other = second_levels[index] if index < len(second_levels) else None
        if one == "#" or other == "#":
            return True
        if one is None or other is None:
            return False
        if one != "+" and other != "+" and one != other:
            return False
    return True


def filter_covers(outer: str, inner: str) -> bool:
    """Whether every topic ``inner`` matches is matched by ``outer``."""
    outer_levels, inner_levels = outer.split("/"), inner.split("/")
    if _skips_dollar_topics(outer_levels[0]) and inner_levels[0].startswith("$"):
        return False
    for index, level in enumerate(inner_levels):
        covering = outer_levels[index] if index < len(outer_levels) else None
        if covering == "#":
            return True
        if level == "#":  # at the first level '#' means one level or more, which '+/#' covers too
            return index == 0 and outer_levels == ["+", "#"]
        if covering is None:
            return False
        if covering != "+" and (level == "+" or covering != level):
            return False
    return len(outer_levels) == len(inner_levels) or outer_levels[len(inner_levels):] == ["#"]


def _skips_dollar_topics(first_level: str) -> bool:
    return first_level in ("+", "#")  # [MQTT-4.7.2-1]


class MqttTopicAcls:
    """The cluster's MQTT topic ACLs, by principal; decides publishing, reading and subscribing."""

    def __init__(self, acls: Iterable[Acl]) -> None:
        self._by_principal: dict[str, list[Acl]] = {}
        for acl in acls:
            self._by_principal.setdefault(acl.principal, []).append(acl)

    def __bool__(self) -> bool:
        return bool(self._by_principal)

    def _applicable(self, identity: MqttIdentity, operation: Operation) -> Iterable[tuple[Permission, str]]:
        """(permission, filter for this connection) of every ACL about ``identity`` and ``operation``."""
        host = identity.principal.host
        for principal in (str(identity.principal), WILDCARD_PRINCIPAL):
            for acl in self._by_principal.get(principal, ()):
                if acl.operation not in (operation, AllOperations.ALL) or acl.host not in (WILDCARD, host):
                    continue
                topic_filter = _substituted(acl.resource_name, identity, acl.permission)
                if topic_filter is not None:
                    yield acl.permission, topic_filter

    def may(self, identity: MqttIdentity, operation: Operation, topic: str) -> bool:
        """May ``identity`` publish (WRITE) or receive (READ) a message of ``topic``?"""
        allowed = False
        for permission, topic_filter in self._applicable(identity, operation):
            if topic_matches(topic_filter, topic):
                if permission is Permission.DENY:
                    return False
                allowed = True
        return allowed

    def may_subscribe(self, identity: MqttIdentity, topic_filter: str) -> bool:
        """Grant a subscription to ``topic_filter``? (Its messages are then checked one by one with ``may``.)"""
        readable = False
        for permission, acl_filter in self._applicable(identity, Operation.READ):
            if permission is Permission.DENY:
                if filter_covers(acl_filter, topic_filter):
                    return False
            elif filters_overlap(acl_filter, topic_filter):
                readable = True
        return readable


class TopicDecisions:
    """One connection's topic decisions, cached per operation and topic, until the ACLs change."""

    def __init__(self, identity: MqttIdentity) -> None:
        self.identity = identity
        self._cached: dict[tuple[Operation, str], bool] = {}
        self._acls: MqttTopicAcls | None = None

    def may(self, acls: MqttTopicAcls, operation: Operation, topic: str) -> bool:
        """``acls.may`` for this connection, remembered until ``acls`` is replaced."""
        if acls is not self._acls:
            self._acls, self._cached = acls, {}
        key = (operation, topic)
        decided = self._cached.get(key)
        if decided is None:
            if len(self._cached) >= DECISIONS_CACHED_MAX:
                self._cached.clear()
            decided = self._cached[key] = acls.may(self.identity, operation, topic)
        return decided
