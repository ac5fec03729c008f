"""The cluster's MQTT mapping rules: checked before they are stored, in force on every hub that applies the
metadata record, read from the time they were set, and the configured rules again once the record is gone."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock

from mqbroker import errors
from mqbroker.protocols.mqtt.hub import MqttHub
from mqbroker.protocols.mqtt.mapping_rules import FROM_CLUSTER, FROM_CONFIGURATION, MAPPING_KIND, RULES_KEY
from mqbroker.protocols.mqtt.topics import MappingRule, TopicMapping
from tests.fake_broker import FakeBroker

CONFIGURED = (MappingRule(mqtt_filter="alarms/#", log_topic="mqtt.alarms"),)


class _Metadata:
    """The cluster metadata's generic records as one broker sees them: a put is committed and applied at once."""

    def __init__(self) -> None:
        self.image = SimpleNamespace(generic={})
        self.listeners: list[Callable[[Any, Any], None]] = []

    def add_record_listener(self, listener: Callable[[Any, Any], None]) -> None:
        self.listeners.append(listener)

    def put_generic_record(self, kind: str, key: str, value: Any) -> Deferred[None]:
        records = self.image.generic.setdefault(kind, {})
        if value is None:
            records.pop(key, None)
        else:
            records[key] = value
        for listener in self.listeners:
            listener(self.image, SimpleNamespace(kind=kind, key=key, value=value))
        return succeed(None)

    def when_caught_up(self) -> Deferred[None]:
        return succeed(None)


def _hub(broker: FakeBroker, metadata: _Metadata, clock: Clock | None = None) -> MqttHub:
    hub = MqttHub(broker, clock or Clock(), TopicMapping(CONFIGURED), records=metadata)
    hub.mapping_rules.start()
    return hub


def _run(coroutine: Any) -> Any:
    found: list[Any] = []
    Deferred.fromCoroutine(coroutine).addBoth(found.append)
    [result] = found
    if hasattr(result, "raiseException"):
        result.raiseException()
    return result


def test_configured_rules_hold_until_rules_are_set_and_come_back_on_reset() -> None:
    broker, metadata = FakeBroker(), _Metadata()
    hub = _hub(broker, metadata)
    assert hub.mapping.rules == CONFIGURED and hub.mapping_rules.source == FROM_CONFIGURATION
    _run(hub.mapping_rules.replace([{"filter": "plant/+/alarms", "log_topic": "mqtt.plant"}]))
    assert hub.mapping.log_topic_for("plant/7/alarms") == "mqtt.plant"
    assert hub.mapping.log_topic_for("alarms/1") == "mqtt.messages", "the new rules replace the configured ones"
    assert hub.mapping_rules.source == FROM_CLUSTER
    assert "mqtt.plant" in broker.topic_configs, "the log topic exists before the rules name it"
    _run(hub.mapping_rules.reset())
    assert hub.mapping.rules == CONFIGURED and hub.mapping_rules.source == FROM_CONFIGURATION


def test_another_brokers_rules_are_applied_when_the_metadata_record_is() -> None:
    metadata = _Metadata()
    setter, follower = _hub(FakeBroker(), metadata), _hub(FakeBroker(), metadata)
    _run(setter.mapping_rules.replace([{"filter": "plant/#", "log_topic": "mqtt.plant"}]))
    assert follower.mapping.log_topic_for("plant/7") == "mqtt.plant"


@pytest.mark.parametrize("document", [
    [{"filter": "a/#/b", "log_topic": "t"}], [{"filter": "a", "log_topic": "__consumer_offsets"}],
    [{"filter": "a"}], "a=t", [{"filter": f"f/{index}", "log_topic": "t"} for index in range(257)],
])
def test_hostile_rules_are_an_invalid_request_and_nothing_is_stored(document: Any) -> None:
    broker, metadata = FakeBroker(), _Metadata()
    hub = _hub(broker, metadata)
    with pytest.raises(errors.InvalidRequestError):
        _run(hub.mapping_rules.replace(document))
    assert metadata.image.generic == {} and hub.mapping.rules == CONFIGURED


def test_a_damaged_stored_record_is_ignored_and_the_rules_in_force_stay() -> None:
    metadata = _Metadata()
    hub = _hub(FakeBroker(), metadata)
    metadata.put_generic_record(MAPPING_KIND, RULES_KEY, {"rules": [{"filter": "#/x", "log_topic": "t"}], "set_at_ms": 1})
    metadata.put_generic_record(MAPPING_KIND, RULES_KEY, ["not", "a", "document"])
    assert hub.mapping.rules == CONFIGURED


def test_a_started_hub_reads_the_log_topics_new_rules_add() -> None:
    broker, metadata = FakeBroker(), _Metadata()
    hub = _hub(broker, metadata)
    Deferred.fromCoroutine(hub.start())
    assert hub.started.started
    assert ("mqtt.plant", 0) not in hub.dispatchers
    _run(hub.mapping_rules.replace([{"filter": "plant/#", "log_topic": "mqtt.plant"}]))
    assert ("mqtt.plant", 0) in hub.dispatchers
    since = [call for call in broker.calls_of("list_offset") if call[1] == "mqtt.plant" and call[3] >= 0]
    assert since, "read from the time the rules were set"
    hub.stop()
