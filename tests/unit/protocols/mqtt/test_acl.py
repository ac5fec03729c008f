"""MQTT topic ACLs: %c/%u patterns, deny over allow, subscriptions granted where something is readable."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.errors import InvalidRequestError
from mqbroker.model import Operation, Principal, ResourceType
from mqbroker.protocols.mqtt.acl import (
    DECISIONS_CACHED_MAX,
    MqttIdentity,
    MqttTopicAcls,
    TopicDecisions,
    filter_covers,
    filters_overlap,
)
from mqbroker.protocols.mqtt.topics import topic_matches
from mqbroker.security.acl import Acl, AllOperations, PatternType, Permission

READ, WRITE = Operation.READ, Operation.WRITE


def _acl(principal: str, operation: Operation | AllOperations, topic_filter: str, allow: bool = True,
         host: str = "*") -> Acl:
    return Acl(principal=principal, host=host, resource_type=ResourceType.MQTT_TOPIC, resource_name=topic_filter,
               operation=operation, permission=Permission.ALLOW if allow else Permission.DENY)


def _device(client_id: str, user: str = "device", host: str = "10.0.0.9") -> MqttIdentity:
    return MqttIdentity(principal=Principal("User", user, host), client_id=client_id)


#: Mosquitto's fleet example: each device publishes and reads under its own id only; operators read everything.
FLEET = MqttTopicAcls([
    _acl("User:*", WRITE, "devices/%c/#"),
    _acl("User:*", READ, "devices/%c/commands/#"),
    _acl("User:*", READ, "users/%u/inbox"),
    _acl("User:ops", READ, "#"),
    _acl("User:ops", READ, "devices/+/secrets/#", allow=False),
])


def test_a_device_publishes_only_under_its_own_client_id() -> None:
    assert FLEET.may(_device("42"), WRITE, "devices/42/temperature")
    assert FLEET.may(_device("42"), WRITE, "devices/42")  # '#' covers the parent level too
    assert not FLEET.may(_device("42"), WRITE, "devices/43/temperature")
    assert not FLEET.may(_device("42"), READ, "devices/42/temperature")  # write is not read
    assert FLEET.may(_device("42"), READ, "devices/42/commands/reboot")
    assert FLEET.may(_device("42", user="alice"), READ, "users/alice/inbox")
    assert not FLEET.may(_device("42", user="alice"), READ, "users/bob/inbox")


def test_deny_wins_and_what_no_acl_allows_is_denied() -> None:
    ops = MqttIdentity(principal=Principal("User", "ops"), client_id="console")
    assert FLEET.may(ops, READ, "devices/7/temperature")
    assert not FLEET.may(ops, READ, "devices/7/secrets/key")
    assert not FLEET.may(ops, WRITE, "devices/7/temperature")
    assert not FLEET.may(_device("42"), WRITE, "elsewhere")


@pytest.mark.parametrize("client_id", ["a/b", "+", "#", ""])
def test_an_id_that_would_widen_the_filter_gets_nothing_from_allows_and_all_denies(client_id: str) -> None:
    acls = MqttTopicAcls([_acl("User:*", WRITE, "devices/%c/#"), _acl("User:*", WRITE, "x/#"),
                          _acl("User:*", WRITE, "x/%c/stop", allow=False)])
    identity = _device(client_id)
    assert not acls.may(identity, WRITE, "devices/a/b/c") and not acls.may(identity, WRITE, "devices/+/x")
    assert not acls.may(identity, WRITE, "x/anyone/stop") and acls.may(identity, WRITE, "x/anyone/go")


def test_anonymous_clients_have_no_user_name_to_substitute() -> None:
    anonymous = MqttIdentity(principal=Principal("User", "ANONYMOUS"), client_id="c")
    assert not FLEET.may(anonymous, READ, "users/ANONYMOUS/inbox")


def test_acls_apply_to_their_host_only() -> None:
    acls = MqttTopicAcls([_acl("User:device", WRITE, "#", host="10.0.0.1")])
    assert acls.may(_device("1", host="10.0.0.1"), WRITE, "t") and not acls.may(_device("1", host="10.0.0.2"), WRITE, "t")


def test_a_subscription_is_granted_where_something_is_readable_and_each_message_is_checked() -> None:
    device, ops = _device("42"), MqttIdentity(principal=Principal("User", "ops"), client_id="console")
    assert FLEET.may_subscribe(device, "#")  # granted; deliveries then bring only devices/42/commands/...
    assert FLEET.may_subscribe(device, "devices/+/commands/#")
    assert not FLEET.may_subscribe(device, "devices/43/#")  # nothing under it is readable
    assert not FLEET.may_subscribe(ops, "devices/7/secrets/#")  # all of it is denied
    assert FLEET.may_subscribe(ops, "devices/7/#")


def test_acls_are_topic_filters_with_read_or_write() -> None:
    with pytest.raises(InvalidRequestError, match="whole level"):
        _acl("User:*", READ, "devices/a#")
    with pytest.raises(InvalidRequestError, match="read, write or all"):
        _acl("User:*", Operation.DELETE, "devices/#")
    with pytest.raises(InvalidRequestError, match="not a prefix"):
        Acl(principal="User:*", resource_type=ResourceType.MQTT_TOPIC, resource_name="devices",
            pattern_type=PatternType.PREFIXED, operation=READ, permission=Permission.ALLOW)


def test_a_connection_remembers_decisions_until_the_acls_change() -> None:
    decisions = TopicDecisions(_device("42"))
    assert decisions.may(FLEET, WRITE, "devices/42/t")
    changed = MqttTopicAcls([_acl("User:*", WRITE, "devices/%c/#", allow=False)])
    assert not decisions.may(changed, WRITE, "devices/42/t")
    for number in range(DECISIONS_CACHED_MAX + 10):  # bounded: it starts over when full
        decisions.may(changed, WRITE, f"devices/42/{number}")
    assert len(decisions._cached) <= DECISIONS_CACHED_MAX


# -- the filter algebra, checked against every topic of a small world ---------------------------

LEVELS = ["a", "b", "z", "$s"]
TOPICS = ["/".join(levels) for depth in range(1, 5) for levels in itertools.product(LEVELS, repeat=depth)]
filters = st.lists(st.sampled_from(["a", "b", "+", "$s"]), min_size=1, max_size=3).flatmap(
    lambda levels: st.sampled_from(["/".join(levels), "/".join([*levels, "#"]), "#"]))


@given(first=filters, second=filters)
def test_overlap_means_some_topic_matches_both(first: str, second: str) -> None:
    assert filters_overlap(first, second) == any(topic_matches(first, t) and topic_matches(second, t) for t in TOPICS)


@given(outer=filters, inner=filters)
def test_cover_means_every_topic_of_the_inner_filter_matches_the_outer(outer: str, inner: str) -> None:
    expected = all(topic_matches(outer, t) for t in TOPICS if topic_matches(inner, t))
    if any(topic_matches(inner, t) for t in TOPICS):
        assert filter_covers(outer, inner) == expected
