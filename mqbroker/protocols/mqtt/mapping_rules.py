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

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from mqbroker import errors, limits
from mqbroker.interfaces import IGenericRecords
from mqbroker.model import LATEST_TIMESTAMP
from mqbroker.protocols.mqtt.readers import FRONT_END_PRINCIPAL
from mqbroker.protocols.mqtt.stored import PartitionKey
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
        self._set_at_ms: int | None = None  # when the rules in force were set (None: configured)
        self._adding: set[str] = set()  # log topics whose readers are being started

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
            self._apply(rules, set_at_ms)

    def _apply(self, rules: list[MappingRule], set_at_ms: int | None) -> None:
        """Put ``rules`` in force for every session of the hub; read the log topics they add from ``set_at_ms``
        on (None: from their end)."""
        self._hub.mapping.replace_rules(rules)
        self._set_at_ms = set_at_ms
        if self._hub.started.started and not self._hub.stopped:
            Deferred.fromCoroutine(self.read_new_log_topics()).addErrback(self._hub.log_failure, "reading new log topics")

    async def read_new_log_topics(self) -> None:
        """Start the hub's readers of the log topics the rules added (the hub's next refresh retries a failure)."""
        hub = self._hub
        new = [name for name in hub.mapping.log_topics() if not hub.reads(name) and name not in self._adding]
        if not new:
            return
        self._adding.update(new)
        try:
            await hub.create_log_topics(new)
            cluster = await hub.broker.metadata(FRONT_END_PRINCIPAL, new, False)
            for topic in cluster.topics:
                if topic.error is not None or not topic.partitions:
                    continue
                positions = [await self._offset_since((topic.name, partition))
                             for partition in range(len(topic.partitions))]
                if hub.stopped:
                    return
                if not hub.reads(topic.name):
                    hub.start_readers(topic.name, positions)
        except errors.BrokerError as error:
            self.log.warn("MQTT: the mapping rules' new log topics are not read yet ({error}); retrying", error=error)
        finally:
            self._adding.difference_update(new)

    async def _offset_since(self, key: PartitionKey) -> int:
        """The first offset written at or after the time the rules were set, less the clock allowance (the
        partition's end with configured rules, or when nothing is that new)."""
        if self._set_at_ms is not None:
            found = await self._hub.offset_of(key, max(0, self._set_at_ms - limits.mqtt_mapping_read_back_ms))
            if found >= 0:
                return found
        return await self._hub.offset_of(key, LATEST_TIMESTAMP)

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
            self._apply(rules, value["set_at_ms"])
            self.source = FROM_CLUSTER
        else:
            await self._records.put_generic_record(MAPPING_KIND, RULES_KEY, value)
        return rules

    async def reset(self) -> None:
        """Delete the rules set at run time: the configured ones are in force again, everywhere."""
        if self._records is None:
            self._apply(list(self.configured), self._hub.now_ms())
            self.source = FROM_CONFIGURATION
        else:
            await self._records.put_generic_record(MAPPING_KIND, RULES_KEY, None)
