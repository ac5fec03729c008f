"""The pure side of the MQTT adapter: registry, retained store, stored sessions, receive-maximum pacing."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.protocols.mqtt.registry import SubscriptionRegistry
from mqbroker.protocols.mqtt.retained import RetainedStore
from mqbroker.protocols.mqtt.state import OutboundMessage, Subscription
from mqbroker.protocols.mqtt.stored import StoredSession
from mqbroker.protocols.mqtt.topics import topic_matches


def _message(topic: str, payload: bytes = b"x") -> OutboundMessage:
    return OutboundMessage(topic=topic, payload=payload, qos=0, retain=True)


def test_a_client_with_overlapping_subscriptions_is_routed_once_with_all_of_them() -> None:
    registry = SubscriptionRegistry()
    registry.add("c", Subscription(topic_filter="a/#", qos=1))
    registry.add("c", Subscription(topic_filter="a/+", qos=0))
    routed = registry.route("a/b", lambda *_: True)
    assert sorted(s.topic_filter for s in routed["c"]) == ["a/#", "a/+"]


def test_a_share_group_gets_each_message_once_round_robin() -> None:
    registry = SubscriptionRegistry()
    for client in ("x", "y"):
        registry.add(client, Subscription(topic_filter="$share/g/t/#", share_group="g", qos=1))
    registry.add("plain", Subscription(topic_filter="t/#"))
    chosen = [next(c for c in registry.route("t/1", lambda *_: True) if c != "plain") for _ in range(4)]
    assert chosen == ["x", "y", "x", "y"]


def test_the_registry_says_when_a_share_group_gets_its_first_member_and_loses_its_last() -> None:
    registry = SubscriptionRegistry()
    shared = Subscription(topic_filter="$share/g/t/#", share_group="g", qos=1)
    assert registry.add("x", shared) == ("g", "t/#")
    assert registry.add("x", shared) is None  # replaced, not a second member
    assert registry.add("y", shared) is None
    assert registry.add("y", Subscription(topic_filter="t/#")) is None
    assert registry.remove("x", "$share/g/t/#") is None
    assert registry.remove_client("y") == [("g", "t/#")]
    assert registry.add("x", shared) == ("g", "t/#")


def test_a_share_group_member_that_declines_is_skipped() -> None:
    registry = SubscriptionRegistry()
    for client in ("x", "y"):
        registry.add(client, Subscription(topic_filter="$share/g/t", share_group="g"))
    for _ in range(3):
        assert list(registry.route("t", lambda client, _: client == "y")) == ["y"]


def test_a_share_group_no_member_accepts_is_reported_unplaced_when_the_caller_keeps_it() -> None:
    registry = SubscriptionRegistry()
    for client in ("x", "y"):
        registry.add(client, Subscription(topic_filter="$share/g/t/+", share_group="g"))
    registry.add("plain", Subscription(topic_filter="t/#"))
    unplaced: list[tuple[str, str]] = []
    assert list(registry.route("t/1", lambda *_: False, unplaced)) == ["plain"]
    assert unplaced == [("g", "t/+")]
    assert sorted(registry.route("t/1", lambda *_: False)) == ["plain", "y"]  # without the list: the next in turn


def test_group_members_and_choose_hand_a_kept_message_to_a_member_with_room() -> None:
    registry = SubscriptionRegistry()
    for client in ("x", "y"):
        registry.add(client, Subscription(topic_filter="$share/g/t/+", share_group="g"))
    registry.add("z", Subscription(topic_filter="$share/other/t/+", share_group="other"))
    members = registry.group_members("t/1", ("g", "t/+"))
    assert sorted(client for client, _ in members) == ["x", "y"]
    assert registry.choose(("g", "t/+"), members, lambda client, _: client == "y") == members[1]
    assert registry.choose(("g", "t/+"), members, lambda *_: False) is None
    assert registry.group_members("u/1", ("g", "t/+")) == []


def test_removing_a_client_removes_all_its_subscriptions() -> None:
    registry = SubscriptionRegistry()
    registry.add("c", Subscription(topic_filter="a"))
    registry.add("c", Subscription(topic_filter="$share/g/b", share_group="g"))
    registry.remove_client("c")
    assert len(registry) == 0 and registry.route("a", lambda *_: True) == {}


def test_an_empty_retained_payload_clears_the_topic() -> None:
    store = RetainedStore()
    store.set(_message("a/b"))
    store.set(_message("a/b", b""))
    assert len(store) == 0 and list(store.matching("#")) == []


def test_retained_wildcards_do_not_reach_dollar_topics_at_the_first_level() -> None:
    store = RetainedStore()
    store.set(_message("$SYS/x"))
    store.set(_message("sport"))
    assert [m.topic for m in store.matching("#")] == ["sport"]
    assert [m.topic for m in store.matching("$SYS/#")] == ["$SYS/x"]


_LEVEL = st.sampled_from(["a", "b", "$c", ""])
_TOPIC = st.lists(_LEVEL, min_size=1, max_size=4).map("/".join)
_FILTER = st.lists(st.sampled_from(["a", "b", "$c", "", "+"]), min_size=1, max_size=4).map("/".join) | st.lists(
    st.sampled_from(["a", "b", "+"]), min_size=0, max_size=3
).map(lambda levels: "/".join([*levels, "#"]))


@settings(max_examples=100)
@given(topics=st.lists(_TOPIC, max_size=8), topic_filter=_FILTER)
def test_retained_matching_agrees_with_the_reference_matcher(topics: list[str], topic_filter: str) -> None:
    store = RetainedStore()
    for topic in topics:
        store.set(_message(topic))
    expected = sorted({t for t in topics if topic_matches(topic_filter, t)})
    assert sorted(m.topic for m in store.matching(topic_filter)) == expected


def test_a_stored_session_round_trips_its_cursors() -> None:
    stored = StoredSession(state=b"{}", cursors={("mqtt.messages", 0): 42}, ended_at_ms=7)
    assert StoredSession.from_bytes(stored.to_bytes()) == stored
    shared = StoredSession(state=b"{}", cursors={("mqtt.messages", 0): 42}, share_cursors={("mqtt.messages", 0): 9})
    assert StoredSession.from_bytes(shared.to_bytes()) == shared
    assert b"share_cursors" not in stored.to_bytes()  # a record without any reads as before (and in older brokers)
