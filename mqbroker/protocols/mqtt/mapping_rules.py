"""The MQTT mapping rules in force cluster-wide: the configured rules (``mqtt_mapping_rules``) at first, then
whatever an operator sets through the admin API, kept in the cluster metadata so that every broker's front end
applies the same rules.

The rules set at run time are one generic metadata record (kind ``mqtt_mapping``, key ``rules``): the rules'
JSON form and the wall-clock time they were set. Every broker applies the record when its metadata image does
(``IGenericRecords.add_record_listener``) and puts the rules in force for all its sessions at once; its hub
reads each log topic the rules added from the first record written at or after that time, so a message
published under the new rules through any broker reaches the subscribers on every other. Deleting the
record brings the configured rules back. Before it writes the record, the broker answering the admin call
creates the log topics the rules name (as the front end does at start for the configured ones), so the
record never names a topic that does not exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from twisted.logger import Logger

from mqbroker import errors
from mqbroker.interfaces import IGenericRecords
from mqbroker.protocols.mqtt.topics import MappingRule, mapping_rules_document, mapping_rules_from_document

if TYPE_CHECKING:
    from mqbroker.protocols.mqtt.hub import MqttHub

#: The generic metadata record's kind and key.
MAPPING_KIND = "mqtt_mapping"
RULES_KEY = "rules"
#: Where the rules in force come from (the admin API says which).
FROM_CONFIGURATION = "configuration"
FROM_CLUSTER = "cluster"


def stored_rules(value: Any) -> tuple[list[MappingRule], int]:
    """The rules and the time they were set (ms) of the record's value; ``ValueError`` for anything else."""
    if not (isinstance(value, dict) and isinstance(value.get("set_at_ms"), int) and "rules" in value):
        raise ValueError("the stored MQTT mapping rules are not {'rules': [...], 'set_at_ms': int}")
    return mapping_rules_from_document(value["rules"]), value["set_at_ms"]


class ClusterMappingRules:
    """One front end's view of the cluster's mapping rules (see the module docstring)."""

    log = Logger()

    def __init__(self, hub: MqttHub, records: IGenericRecords | None, configured: Sequence[MappingRule]) -> None:
        """``records``: the cluster metadata (None in tests of a bare front end: the rules stay this hub's)."""
        self._hub = hub
        self._records = records
        self.configured = tuple(configured)
        #: Where the rules in force come from: ``FROM_CONFIGURATION`` or ``FROM_CLUSTER``.
        self.source = FROM_CONFIGURATION

    def start(self) -> None:
        """Apply the metadata's rules now and whenever the record changes."""
        if self._records is None:
            return
        self._records.add_record_listener(self._applied)
        self._follow(self._records.image)

    def _applied(self, image: Any, record: Any) -> None:
        if record is None or getattr(record, "kind", None) == MAPPING_KIND:
            self._follow(image)

    def _follow(self, image: Any) -> None:
        value = image.generic.get(MAPPING_KIND, {}).get(RULES_KEY)
        if value is None:
            rules, set_at_ms, source = list(self.configured), None, FROM_CONFIGURATION
        else:
            try:
                rules, set_at_ms = stored_rules(value)
            except ValueError as error:  # written by a newer broker, or damaged: keep the rules in force
                self.log.warn("MQTT mapping rules in the cluster metadata ignored: {error}", error=error)
                return
            source = FROM_CLUSTER
        self.source = source
        if tuple(rules) != self._hub.mapping.rules:
            self.log.info("MQTT mapping rules from the {source}: {rules}", source=source,
                          rules=mapping_rules_document(rules))
            self._hub.apply_mapping_rules(rules, set_at_ms)

    async def replace(self, document: Any) -> list[MappingRule]:
        """Check rules in their JSON form, create their log topics, and put them in force cluster-wide;
        ``InvalidRequestError`` says what is wrong with them."""
        try:
            rules = mapping_rules_from_document(document)
        except ValueError as error:
            raise errors.InvalidRequestError(f"{error}") from None
        await self._hub.create_log_topics(sorted({rule.log_topic for rule in rules}))
        value = {"rules": mapping_rules_document(rules), "set_at_ms": self._hub.now_ms()}
        if self._records is None:
            self._hub.apply_mapping_rules(rules, value["set_at_ms"])
            self.source = FROM_CLUSTER
        else:
            await self._records.put_generic_record(MAPPING_KIND, RULES_KEY, value)
        return rules

    async def reset(self) -> None:
        """Delete the rules set at run time: the configured ones are in force again, everywhere."""
        if self._records is None:
            self._hub.apply_mapping_rules(list(self.configured), self._hub.now_ms())
            self.source = FROM_CONFIGURATION
        else:
            await self._records.put_generic_record(MAPPING_KIND, RULES_KEY, None)
