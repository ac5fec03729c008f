"""Topic configuration layers: a key's value comes from the topic's override, else this broker's dynamic default,
else the cluster's, else the broker's static ``log.`` default, else the built-in one."""

from __future__ import annotations

import pytest

from mqbroker import errors
from mqbroker.core.topic_config import (
    ConfigLayer,
    TopicConfigLayers,
    built_in_topic_configs,
    validate_dynamic_topic_defaults,
)

KEY = "retention.ms"


@pytest.mark.parametrize(("layers", "value", "layer"), [
    ({"topic": "1", "dynamic_broker": "2", "dynamic_default": "3", "static_broker": "4"}, "1", ConfigLayer.TOPIC),
    ({"dynamic_broker": "2", "dynamic_default": "3", "static_broker": "4"}, "2", ConfigLayer.DYNAMIC_BROKER),
    ({"dynamic_default": "3", "static_broker": "4"}, "3", ConfigLayer.DYNAMIC_DEFAULT),
    ({"static_broker": "4"}, "4", ConfigLayer.STATIC_BROKER),
    ({}, "604800000", ConfigLayer.BUILT_IN),
])
def test_each_layer_wins_over_the_ones_below_it(layers: dict[str, str], value: str, layer: ConfigLayer) -> None:
    resolved = TopicConfigLayers(**{name: {KEY: text} for name, text in layers.items()})
    assert resolved.effective()[KEY] == value
    assert resolved.sources()[KEY][0] == (layer, value)
    assert [each for each, _ in resolved.sources()[KEY]] == [
        *(ConfigLayer(name) if name != "topic" else ConfigLayer.TOPIC for name in layers), ConfigLayer.BUILT_IN]


def test_layers_are_taken_from_the_images_entities_for_one_broker() -> None:
    dynamic = {"": {KEY: "3", "min.insync.replicas": "2"}, "1": {KEY: "2"}, "2": {KEY: "9"}}
    layers = TopicConfigLayers.of({"segment.bytes": "2000000"}, dynamic, 1, {"cleanup.policy": "compact"})
    assert layers.broker_defaults() == {"segment.bytes": "2000000", KEY: "2", "min.insync.replicas": "2"}
    effective = layers.effective()
    assert (effective[KEY], effective["min.insync.replicas"], effective["cleanup.policy"]) == ("2", "2", "compact")
    assert set(effective) == set(built_in_topic_configs())


def test_a_dynamic_default_must_be_a_topic_key_with_a_valid_value() -> None:
    with pytest.raises(errors.InvalidConfigError, match="num.partitions"):
        validate_dynamic_topic_defaults(TopicConfigLayers(dynamic_default={"num.partitions": "3"}))
    with pytest.raises(errors.InvalidConfigError, match="min.insync.replicas"):
        validate_dynamic_topic_defaults(TopicConfigLayers(dynamic_broker={"min.insync.replicas": "0"}))
    with pytest.raises(errors.InvalidConfigError):
        validate_dynamic_topic_defaults(TopicConfigLayers(dynamic_default={"segment.bytes": "x"}))
    validate_dynamic_topic_defaults(TopicConfigLayers(dynamic_default={"segment.bytes": "2000000",
                                                                       "compression.type": "zstd"}))
