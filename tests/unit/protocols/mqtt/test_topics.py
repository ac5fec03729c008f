"""Topic validation, the subscription trie against a brute-force reference, and the log mapping."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker import limits
from mqbroker.protocols.mqtt.errors import MqttProtocolError
from mqbroker.protocols.mqtt.packets import ReasonCode
from mqbroker.protocols.mqtt.topics import (
    mapping_rules_document,
    mapping_rules_from_document,
    parse_mapping_rules,
    MappingRule,
    SubscriptionFilter,
    SubscriptionTrie,
    TopicMapping,
    filter_covers,
    filters_overlap,
    parse_subscription_filter,
    record_key,
    topic_matches,
    validate_topic_filter,
    validate_topic_name,
)

# A small alphabet makes matches likely; "$" at the start exercises the $-topic rule.
literal_levels = st.sampled_from(["a", "b", "$SYS", "", "c"])
topics = st.lists(literal_levels, min_size=1, max_size=4).map("/".join)
filter_levels = st.sampled_from(["a", "b", "$SYS", "", "+", "c"])
filters = st.builds(
    lambda levels, tail: "/".join(levels + (["#"] if tail else [])) or "#",
    st.lists(filter_levels, min_size=0, max_size=4),
    st.booleans(),
)


@pytest.mark.parametrize("topic_filter", ["#", "+", "a/#", "a/+/b", "+/+", "/", "$SYS/#", "a//b"])
def test_well_formed_filters_are_accepted(topic_filter: str) -> None:
    validate_topic_filter(topic_filter)


@pytest.mark.parametrize("topic_filter", ["", "a/#/b", "a#", "a/b+", "#/a", "++"])
def test_misplaced_wildcards_are_topic_filter_invalid_mqtt_4_7_1(topic_filter: str) -> None:
    with pytest.raises(MqttProtocolError) as caught:
        validate_topic_filter(topic_filter)
    assert caught.value.reason_code == ReasonCode.TOPIC_FILTER_INVALID


@pytest.mark.parametrize("topic", ["", "a/+", "#", "a/#"])
def test_topic_names_with_wildcards_or_empty_are_invalid_mqtt_3_3_2_2(topic: str) -> None:
    with pytest.raises(MqttProtocolError) as caught:
        validate_topic_name(topic)
    assert caught.value.reason_code == ReasonCode.TOPIC_NAME_INVALID


def test_shared_subscription_is_split_into_group_and_filter() -> None:
    assert parse_subscription_filter("$share/workers/jobs/+") == SubscriptionFilter(
        share_group="workers", topic_filter="jobs/+"
    )
    assert parse_subscription_filter("jobs/+").share_group is None


@pytest.mark.parametrize("text", ["$share/", "$share//a", "$share/g", "$share/g/", "$share/g+/a", "$share/g/a/#/b"])
def test_malformed_shared_subscriptions_are_rejected_mqtt_4_8_2(text: str) -> None:
    with pytest.raises(MqttProtocolError) as caught:
        parse_subscription_filter(text)
    assert caught.value.reason_code == ReasonCode.TOPIC_FILTER_INVALID


@pytest.mark.parametrize(
    ("topic_filter", "topic", "expected"),
    [
        ("sport/#", "sport", True),
        ("sport/+", "sport", False),
        ("sport/+", "sport/", True),
        ("+/+", "/finance", True),
        ("#", "$SYS/uptime", False),
        ("+/uptime", "$SYS/uptime", False),
        ("$SYS/#", "$SYS/uptime", True),
    ],
)
def test_wildcard_rules_of_the_specification_mqtt_4_7(topic_filter: str, topic: str, expected: bool) -> None:
    trie: SubscriptionTrie[str, int] = SubscriptionTrie()
    trie.add(topic_filter, "client", 1)
    assert topic_matches(topic_filter, topic) is expected
    assert (trie.match(topic) == [("client", 1)]) is expected


@given(subscriptions=st.lists(st.tuples(filters, st.integers(0, 3)), max_size=25), topic=topics)
def test_trie_matches_exactly_what_a_scan_of_all_filters_matches(
    subscriptions: list[tuple[str, int]], topic: str
) -> None:
    trie: SubscriptionTrie[int, str] = SubscriptionTrie()
    reference: dict[tuple[str, int], str] = {}
    for topic_filter, client in subscriptions:
        trie.add(topic_filter, client, topic_filter)
        reference[(topic_filter, client)] = topic_filter
    expected = sorted((client, f) for (f, client) in reference if topic_matches(f, topic))
    assert sorted(trie.match(topic)) == expected
    assert len(trie) == len(reference)


@given(
    subscriptions=st.lists(st.tuples(filters, st.integers(0, 3)), max_size=20),
    removals=st.lists(st.integers(0, 19), max_size=20),
    topic=topics,
)
def test_removal_leaves_the_trie_equal_to_the_reference(
    subscriptions: list[tuple[str, int]], removals: list[int], topic: str
) -> None:
    trie: SubscriptionTrie[int, str] = SubscriptionTrie()
    reference: set[tuple[str, int]] = set()
    for topic_filter, client in subscriptions:
        trie.add(topic_filter, client, topic_filter)
        reference.add((topic_filter, client))
    for index in removals:
        if index < len(subscriptions):
            topic_filter, client = subscriptions[index]
            removed = trie.remove(topic_filter, client)
            assert (removed is not None) == ((topic_filter, client) in reference)
            reference.discard((topic_filter, client))
    assert sorted(trie.match(topic)) == sorted((c, f) for f, c in reference if topic_matches(f, topic))
    assert sorted((f, c) for f, c, _ in trie.items()) == sorted(reference)


def test_removing_the_last_entry_prunes_the_branch() -> None:
    trie: SubscriptionTrie[str, int] = SubscriptionTrie()
    trie.add("a/b/c", "x", 1)
    assert trie.remove("a/b/c", "x") == 1
    assert list(trie.items()) == [] and len(trie) == 0
    assert trie.remove("a/b/c", "x") is None


@given(first=filters, second=filters, topic=topics)
@settings(max_examples=300)
def test_overlap_and_cover_agree_with_matching(first: str, second: str, topic: str) -> None:
    if topic_matches(first, topic) and topic_matches(second, topic):
        assert filters_overlap(first, second)
    if filter_covers(first, second) and topic_matches(second, topic):
        assert topic_matches(first, topic)


def test_unmapped_topics_go_to_the_default_log_topic_keyed_by_topic_name() -> None:
    mapping = TopicMapping()
    assert mapping.log_topic_for("devices/42/temperature") == "mqtt.messages"
    assert record_key("devices/42/temperature") == b"devices/42/temperature"


def test_first_matching_rule_wins() -> None:
    mapping = TopicMapping([
        MappingRule(mqtt_filter="factory/+/alarms", log_topic="alarms"),
        MappingRule(mqtt_filter="factory/#", log_topic="factory"),
    ])
    assert mapping.log_topic_for("factory/7/alarms") == "alarms"
    assert mapping.log_topic_for("factory/7/temperature") == "factory"
    assert mapping.log_topic_for("home/kitchen") == "mqtt.messages"


def test_a_subscription_reads_every_log_topic_its_filter_may_map_onto() -> None:
    mapping = TopicMapping([
        MappingRule(mqtt_filter="factory/+/alarms", log_topic="alarms"),
        MappingRule(mqtt_filter="factory/#", log_topic="factory"),
    ])
    assert mapping.log_topics_for_filter("factory/7/#") == ("alarms", "factory")
    assert mapping.log_topics_for_filter("#") == ("alarms", "factory", "mqtt.messages")
    assert mapping.log_topics_for_filter("home/+") == ("mqtt.messages",)


def test_invalid_log_topic_names_are_refused() -> None:
    with pytest.raises(ValueError, match="log topic"):
        TopicMapping([MappingRule(mqtt_filter="a", log_topic="has space")])


def test_mapping_rules_are_read_from_the_setting_in_order_and_a_malformed_one_is_named() -> None:
    rules = parse_mapping_rules(" plant/+/temperature = mqtt.temperature ,alarms/#=mqtt.alarms,")
    assert [(rule.mqtt_filter, rule.log_topic) for rule in rules] == [
        ("plant/+/temperature", "mqtt.temperature"), ("alarms/#", "mqtt.alarms")]
    assert parse_mapping_rules("") == []
    with pytest.raises(ValueError, match="'alarms/#' is not 'topic filter=log topic'"):
        parse_mapping_rules("alarms/#")


@settings(max_examples=300)
@given(st.text(alphabet="ab/+#=,. -", max_size=40))
def test_any_mapping_rules_setting_gives_rules_or_a_value_error(text: str) -> None:
    try:
        rules = parse_mapping_rules(text)
    except ValueError:
        return
    assert all(rule.mqtt_filter and rule.log_topic and "," not in rule.log_topic for rule in rules)


@pytest.mark.parametrize(("rules", "complaint"), [
    ([MappingRule(mqtt_filter="a/#/b", log_topic="t")], "'#' must be a whole last level"),
    ([MappingRule(mqtt_filter="$share/g/a", log_topic="t")], "shared subscription"),
    ([MappingRule(mqtt_filter="a", log_topic="__consumer_offsets")], "internal"),
    ([MappingRule(mqtt_filter="a", log_topic="t"), MappingRule(mqtt_filter="a", log_topic="u")], "given twice"),
    ([MappingRule(mqtt_filter="a/" * 600, log_topic="t")], "longer than"),
    ([MappingRule(mqtt_filter=f"a/{index}", log_topic="t") for index in range(limits.mqtt_mapping_rules_max + 1)],
     "at most"),
])
def test_hostile_mapping_rules_are_refused_with_what_is_wrong_and_the_old_rules_stay(
    rules: list[MappingRule], complaint: str,
) -> None:
    mapping = TopicMapping([MappingRule(mqtt_filter="alarms/#", log_topic="alarms")])
    with pytest.raises(ValueError, match=re.escape(complaint)):
        mapping.replace_rules(rules)
    assert mapping.log_topic_for("alarms/1") == "alarms"


def test_replaced_rules_are_in_force_at_once() -> None:
    mapping = TopicMapping()
    mapping.replace_rules([MappingRule(mqtt_filter="alarms/#", log_topic="alarms")])
    assert mapping.log_topic_for("alarms/1") == "alarms"
    assert mapping.log_topics() == ["alarms", "mqtt.messages"]
    mapping.replace_rules([])
    assert mapping.log_topic_for("alarms/1") == "mqtt.messages"


def test_mapping_rules_round_trip_through_their_json_form() -> None:
    rules = [MappingRule(mqtt_filter="plant/+/temperature", log_topic="mqtt.temperature"),
             MappingRule(mqtt_filter="alarms/#", log_topic="mqtt.alarms")]
    assert mapping_rules_from_document(json.loads(json.dumps(mapping_rules_document(rules)))) == rules


_json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(alphabet="ab/+#_$.", max_size=12),
                            lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                                st.sampled_from(["filter", "log_topic", "x"]), inner, max_size=3), max_leaves=12)


@settings(max_examples=400)
@given(_json_values)
def test_any_json_gives_checked_mapping_rules_or_a_value_error(document: object) -> None:
    try:
        rules = mapping_rules_from_document(document)
    except ValueError:
        return
    TopicMapping(rules)  # whatever decodes is usable as it is
