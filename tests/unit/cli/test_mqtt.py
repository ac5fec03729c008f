"""``mqbroker mqtt mapping-rules``: rules from the command line, and a usage error for a malformed one."""

from __future__ import annotations

import pytest

from mqbroker.cli.common import UsageError
from mqbroker.cli.mqtt import rules_from_arguments


def test_rules_are_read_in_order_and_split_at_the_last_equals_sign() -> None:
    assert rules_from_arguments(["plant/+/alarms=mqtt.alarms", "a=b/#=mqtt.odd"]) == [
        {"filter": "plant/+/alarms", "log_topic": "mqtt.alarms"}, {"filter": "a=b/#", "log_topic": "mqtt.odd"}]
    assert rules_from_arguments([]) == []


@pytest.mark.parametrize("item", ["alarms/#", "=mqtt.alarms", "alarms/#="])
def test_a_rule_without_filter_or_log_topic_is_a_usage_error(item: str) -> None:
    with pytest.raises(UsageError, match="FILTER=LOG_TOPIC"):
        rules_from_arguments([item])
