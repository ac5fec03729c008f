"""The JSON schemas of the admin API's bodies (OpenAPI 3.1 components, JSON Schema 2020-12).

Routes refer to them with ``ref("Name")``; the same schemas validate requests at run time and
describe responses in ``/api/openapi.json`` (the integration tests validate every response too).
"""

from __future__ import annotations

import enum
from typing import Any

from mqbroker.connector_model import TargetState, TaskState
from mqbroker.limits import (
    connector_config_entries_max,
    connector_config_value_bytes_max,
    connector_name_length_max,
    group_id_length_max,
    mqtt_mapping_filter_length_max,
    mqtt_mapping_rules_max,
    partitions_per_topic_max,
    topic_name_length_max,
    username_length_max,
)
from mqbroker.model import Operation, ResourceType
from mqbroker.security.acl import AllOperations, PatternType, Permission
from mqbroker.shares.push.filters import FILTER_LENGTH_MAX
from mqbroker.shares.settings import NUMERIC_BOUNDS, OFFSET_RESETS


def ref(name: str) -> dict[str, str]:
    """A reference to the component schema ``name`` (the OpenAPI validator checks that it resolves)."""
    return {"$ref": f"#/components/schemas/{name}"}


def array_of(name: str) -> dict[str, Any]:
    """An array of component ``name``."""
    return {"type": "array", "items": ref(name)}


_INT = {"type": "integer"}
_STR = {"type": "string"}
_INT_LIST = {"type": "array", "items": _INT}
_NULLABLE_STR = {"type": ["string", "null"]}
_NULLABLE_INT = {"type": ["integer", "null"]}
_STRING_MAP = {"type": "object", "additionalProperties": _STR}
#: MQTT mapping rules in order, first match wins.
_MAPPING_RULES = {"type": "array", "items": ref("MqttMappingRule"), "maxItems": mqtt_mapping_rules_max}


def _object(properties: dict[str, Any], required: tuple[str, ...] | None = None, **extra: Any) -> dict[str, Any]:
    """An object with these properties, all required unless ``required`` names fewer, no others."""
    return {"type": "object", "properties": properties,
            "required": list(properties if required is None else required), "additionalProperties": False, **extra}


#: No C0 or C1 control character: what a portable (ECMA-262) pattern can say of ``security/names.py``'s rule.
_NO_CONTROL_CHARACTER = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$"


def printable_name(length_max: int) -> dict[str, Any]:
    """A name the broker checks whole (``security/names.py``): a user name, a group id."""
    return {"type": "string", "minLength": 1, "maxLength": length_max, "pattern": _NO_CONTROL_CHARACTER,
            "description": f"printable, at most {length_max} characters: a control, format, private-use or "
                           "unassigned character is refused (400)"}


def _enum_of(values: type[enum.Enum]) -> dict[str, list[str]]:
    """A string enum of every value of ``values`` (the schema follows the model)."""
    return {"enum": [member.value for member in values]}


_MQTT_TOPIC_ACLS = ("mqtt_topic: the name is an MQTT topic filter ('+', '#'; %c and %u stand for the client id "
                    "and user name), literal, with operation read, write or all")
_TOPIC_NAME = {"type": "string", "minLength": 1, "maxLength": topic_name_length_max}
_TEXT_OR_NULL = {"oneOf": [{"type": "null"}, {"$ref": "#/components/schemas/Text"}]}

COMPONENTS: dict[str, Any] = {
    "Error": _object({"error": _object({
        "code": {**_STR, "description": "the broker's error name (as in docs/protocol.md) or an HTTP-level one"},
        "error_code": {**_INT, "description": "the broker's wire error code, when the broker refused"},
        "message": _STR, "retriable": {"type": "boolean"}}, required=("code", "message", "retriable"))}),
    "Index": _object({"version": _STR, "node_id": _INT, "sections": {"type": "array", "items": _object({
        "name": _STR, "path": _STR, "present": {"type": "boolean"}})}}),
    "Broker": _object({"node_id": _INT, "host": _STR, "port": _INT, "state": {"enum": ["active", "fenced"]},
                       "controller": {"type": "boolean", "description": "the Raft leader"},
                       "voter": {"type": "boolean"}, "this_broker": {"type": "boolean"}}),
    "Cluster": _object({
        "cluster_id": _STR, "node_id": {**_INT, "description": "the broker answering"},
        "controller_id": {**_INT, "description": "the Raft leader (0: none known)"},
        "raft": _object({"leader": _INT, "term": _INT, "commit_index": _INT, "applied_index": _INT,
                         "voters": _INT_LIST}),
        "brokers": array_of("Broker"),
        "partitions": _object({"total": _INT, "under_replicated": _INT, "offline": _INT}),
        "topics": _INT}),
    "Counters": _object({"node_id": _INT, "time_ms": _INT, "produced_bytes": _INT, "produced_records": _INT,
                         "fetched_bytes": _INT, "partitions": _INT, "log_size_bytes": _INT}),
    "Configuration": {"type": "object", "description": "this broker's settings by name (docs/configuration.md)"},
    "TopicSummary": _object({"name": _STR, "internal": {"type": "boolean"}, "partitions": _INT,
                             "replication_factor": _INT, "under_replicated": _INT, "offline": _INT}),
    "NewTopic": _object({
        "name": _TOPIC_NAME,
        "partitions": {**_INT, "minimum": 1, "maximum": partitions_per_topic_max},
        "replication_factor": {**_INT, "minimum": 1},
        "configs": _STRING_MAP,
        "validate_only": {"type": "boolean", "description": "check only; create nothing"},
    }, required=("name",)),
    "Partition": _object({
        "partition": _INT, "leader": {**_INT, "description": "-1: offline"}, "leader_epoch": _INT,
        "replicas": _INT_LIST, "isr": _INT_LIST, "under_replicated": {"type": "boolean"},
        "earliest_offset": _NULLABLE_INT, "latest_offset": {**_NULLABLE_INT, "description": "the high watermark"},
        "size_bytes": {**_NULLABLE_INT, "description": "of the replica on this broker (null: it holds none)"},
        "error": {**_NULLABLE_STR, "description": "why the offsets could not be read"}}),
    "Topic": _object({"name": _STR, "internal": {"type": "boolean"}, "partitions": array_of("Partition"),
                      "configs": _STRING_MAP}),
    "ConfigChange": _object({"set": _STRING_MAP, "delete": {"type": "array", "items": _STR}}, required=()),
    "PartitionCount": _object({"count": {**_INT, "minimum": 1, "maximum": partitions_per_topic_max,
                                         "description": "the new total"}}),
    "LogStart": _object({"topic": _STR, "partition": _INT, "log_start_offset": _INT}),
    "Text": _object({"text": {**_NULLABLE_STR, "description": "UTF-8 text (null: not UTF-8, or no value)"},
                     "base64": _NULLABLE_STR, "truncated": {"type": "boolean"}},
                    description="a key or value: null when absent"),
    "Record": _object({"partition": _INT, "offset": _INT, "timestamp_ms": _INT,
                       "key": _TEXT_OR_NULL, "value": _TEXT_OR_NULL,
                       "headers": {"type": "array", "items": _object({"key": _STR, "value": _TEXT_OR_NULL})}}),
    "Records": _object({"topic": _STR, "records": array_of("Record"),
                        "next_offsets": {"type": "object", "additionalProperties": _INT,
                                         "description": "per partition: where the next page starts"},
                        "unreadable": {"type": "array", "items": ref("UnreadableBatch"),
                                       "description": "batches whose CRC or records do not decode, passed over"}}),
    "UnreadableBatch": _object({"partition": _INT, "first_offset": _INT, "last_offset": _INT, "error": _STR}),
    "GroupSummary": _object({"group_id": _STR, "state": _STR, "protocol_type": _STR}),
    "GroupMember": _object({"member_id": _STR, "group_instance_id": _NULLABLE_STR, "client_id": _STR,
                            "client_host": _STR, "assignment": {"type": "array", "items": ref("TopicPartition")}}),
    "TopicPartition": _object({"topic": _STR, "partition": _INT}),
    "GroupOffset": _object({"topic": _STR, "partition": _INT, "committed_offset": _INT,
                            "latest_offset": _NULLABLE_INT, "lag": _NULLABLE_INT}),
    "GroupOffsets": _object({"group_id": _STR, "offsets": array_of("GroupOffset"), "total_lag": _INT}),
    "Group": _object({"group_id": _STR, "state": _STR, "protocol_type": _STR, "assignor": _STR,
                      "generation_id": _INT, "members": array_of("GroupMember"), "offsets": array_of("GroupOffset"),
                      "total_lag": _INT}),
    "OffsetReset": _object({
        "to": {"enum": ["earliest", "latest", "offset", "timestamp"]},
        "topic": {**_TOPIC_NAME, "description": "only this topic's partitions (default: every committed one)"},
        "offset": {**_INT, "minimum": 0, "description": "with to=offset"},
        "timestamp_ms": {**_INT, "minimum": 0, "description": "with to=timestamp"},
        "dry_run": {"type": "boolean", "description": "show the new offsets, commit nothing"},
    }, required=("to",)),
    "User": _object({"name": _STR}),
    "NewUser": _object({"name": printable_name(username_length_max),
                        "password": {**_STR, "minLength": 1}}),
    "Password": _object({"password": {**_STR, "minLength": 1}}),
    "Acl": _object({
        "principal": {**_STR, "minLength": 1, "examples": ["User:alice"]}, "host": {**_STR, "minLength": 1},
        "resource_type": {**_enum_of(ResourceType), "description": _MQTT_TOPIC_ACLS},
        "resource_name": {**_STR, "minLength": 1}, "pattern_type": _enum_of(PatternType),
        "operation": {"enum": [AllOperations.ALL.value, *_enum_of(Operation)["enum"]]},
        "permission": _enum_of(Permission)}),
    "AclList": _object({"acls": {"type": "array", "items": {"$ref": "#/components/schemas/Acl"}, "minItems": 1,
                                 "maxItems": 1000}}),
    "MqttSubscription": _object({"topic_filter": _STR, "qos": _INT, "share_group": _NULLABLE_STR,
                                 "no_local": {"type": "boolean"}}),
    "MqttClient": _object({"client_id": _STR, "principal": _STR, "peer": _STR, "protocol_level": _INT,
                           "subscriptions": array_of("MqttSubscription"), "inflight": _INT, "pending": _INT}),
    "MqttSession": _object({"client_id": _STR, "connected": {"type": "boolean"}, "expiry_interval_s": _INT,
                            "ended_at_ms": _NULLABLE_INT, "subscriptions": array_of("MqttSubscription"),
                            "inflight": _INT}),
    "MqttRetained": _object({"topic": _STR, "qos": _INT, "payload": ref("Text"), "created_ms": _INT}),
    "MqttMappingRule": _object({
        "filter": {"type": "string", "minLength": 1, "maxLength": mqtt_mapping_filter_length_max,
                   "description": "an MQTT topic filter ('+', '#'; not $share/...)"},
        "log_topic": {"type": "string", "minLength": 1, "maxLength": topic_name_length_max,
                      "pattern": "^[A-Za-z0-9._-]+$", "description": "the log topic (not internal: no '__' prefix)"},
    }),
    "NewMqttMappingRules": _object({"rules": _MAPPING_RULES}),
    "MqttMappingRules": _object({"rules": _MAPPING_RULES, "default_log_topic": _STR,
                                 "source": {"type": "string", "enum": ["configuration", "cluster"]}}),
    "AmqpExchange": _object({"name": _STR, "type": _STR, "durable": {"type": "boolean"},
                             "auto_delete": {"type": "boolean"}, "internal": {"type": "boolean"}}),
    "AmqpQueue": _object({"name": _STR, "type": _STR, "durable": {"type": "boolean"},
                          "exclusive": {"type": "boolean"}, "auto_delete": {"type": "boolean"},
                          "messages": {**_NULLABLE_INT, "description": "ready plus unacknowledged (null: a stream)"},
                          "unacknowledged": _NULLABLE_INT, "consumers": _INT, "topic": _STR}),
    "AmqpBinding": _object({"source": _STR, "destination": _STR, "destination_type": {"enum": ["queue", "exchange"]},
                            "routing_key": _STR}),
}


# -- share groups, push subscriptions and connectors ------------------------------------------------

_NUMBER = {"type": "number"}
_BOOLEAN = {"type": "boolean"}
_STRING_LIST = {"type": "array", "items": _STR}


def _share_setting(key: str, description: str) -> dict[str, Any]:
    """An integer share-group setting bounded as the broker bounds it (``shares.settings``)."""
    low, high = NUMERIC_BOUNDS[key]
    return {**_INT, "minimum": low, "maximum": high, "description": f"{description} ({key})"}


COMPONENTS.update({
    "ShareGroupSummary": _object({"group_id": _STR, "topics": _STRING_LIST, "members": _INT,
                                  "push_endpoint": {**_NULLABLE_STR, "description": "set: a push subscription"}}),
    "ShareGroupMember": _object({"member_id": _STR, "client_id": _STR, "client_host": _STR, "topics": _STRING_LIST,
                                 "acquired": {**_INT, "description": "records it holds leased now"}}),
    "SharePartition": _object({
        "topic": _STR, "partition": _INT, "start_offset": _INT, "end_offset": _INT,
        "in_flight": {**_INT, "description": "records acquired (leased) now"},
        "available": _INT, "dead_lettering": _INT, "due": _INT,
        "scheduled": {**_INT, "description": "delayed records not yet due"}, "lag": _INT,
        "delivery_counts": {"type": "object", "additionalProperties": _INT,
                            "description": "records delivered and not yet done, by delivery count"}}),
    "ShareGroup": _object({
        "group_id": _STR, "topics": _STRING_LIST, "configs": {**_STRING_MAP, "description": "secrets masked"},
        "push_endpoint": _NULLABLE_STR, "members": array_of("ShareGroupMember"),
        "partitions": array_of("SharePartition"), "in_flight": _INT, "lag": _INT,
        "dead_lettered": {**_INT, "description": "records dead-lettered since the host took the group over"},
        "dead_letter_depth": {**_NULLABLE_INT, "description": "records on the dead-letter topic (null: none set)"}}),
    "NewShareGroup": _object({
        "group_id": printable_name(group_id_length_max),
        "topics": {"type": "array", "items": _TOPIC_NAME, "minItems": 1, "maxItems": 1000},
        "configs": {**_STRING_MAP, "maxProperties": 100,
                    "description": "share-group configs (docs/queues.md): lease.ms, max.delivery.attempts, ..."},
    }, required=("group_id", "topics")),
    "Subscription": _object({"name": _STR, "topics": _STRING_LIST, "endpoint": _STR}),
    "NewSubscription": _object({
        "name": printable_name(group_id_length_max), "topic": _TOPIC_NAME,
        "endpoint": {**_STR, "maxLength": 2048, "pattern": "^https?://", "description": "the URL records are POSTed to"},
        "secret": {**_STR, "minLength": 16, "maxLength": 1024,
                   "description": "the HMAC-SHA256 signing key (default: a new random one, returned once)"},
        "filter": {**_STR, "maxLength": FILTER_LENGTH_MAX, "description": "push only matching records (docs/queues.md)"},
        "start": {"enum": list(OFFSET_RESETS), "description": "deliver from the topic's start or end (default latest)"},
        "dead_letter_topic": _TOPIC_NAME,
        "max_outstanding": _share_setting("push.max.outstanding", "POSTs in flight at once"),
        "ack_deadline_ms": _share_setting("push.ack.deadline.ms", "answer time before a retry"),
        "max_delivery_attempts": _share_setting("max.delivery.attempts", "attempts per record"),
        "rate_per_second": _share_setting("push.rate.per.second", "POSTs per second at most, 0: no limit"),
        "batch_max_messages": _share_setting("push.batch.max.messages", "records per POST"),
    }, required=("name", "topic", "endpoint")),
    "CreatedSubscription": _object({"name": _STR, "topics": _STRING_LIST, "endpoint": _STR,
                                    "secret": {**_STR, "description": "the signing secret: shown only now"}}),
    "ConnectorTask": _object({
        "task": _INT, "state": _enum_of(TaskState), "owner": {**_INT, "description": "the broker running it"},
        "updated_ms": _INT, "records_total": _INT, "records_per_second": _NUMBER,
        "lag_records": {**_INT, "description": "records still to copy (-1: unknown, a source)"},
        "lag_seconds": _NUMBER, "errors_total": _INT, "outages_total": _INT, "outage_seconds": _NUMBER,
        "in_outage": _BOOLEAN, "last_error": _NULLABLE_STR, "last_error_ms": _INT}),
    "ConnectorSummary": _object({
        "name": _STR, "type": _STR, "state": _enum_of(TargetState), "tasks": _INT, "running_tasks": _INT,
        "failed_tasks": _INT, "lag_records": {**_NULLABLE_INT, "description": "summed over tasks (null: unknown)"},
        "lag_seconds": {**_NUMBER, "description": "the oldest record not yet copied, over all tasks"},
        "errors_total": _INT}),
    "Connector": _object({
        "name": _STR, "type": _STR, "state": _enum_of(TargetState),
        "config": {**_STRING_MAP, "description": "credentials masked"}, "tasks": array_of("ConnectorTask"),
        "lag_records": _NULLABLE_INT, "lag_seconds": _NUMBER}),
    "NewConnector": _object({
        "name": {**_STR, "minLength": 1, "maxLength": connector_name_length_max, "pattern": "^[A-Za-z0-9._-]+$"},
        "config": {"type": "object", "maxProperties": connector_config_entries_max,
                   "additionalProperties": {**_STR, "maxLength": connector_config_value_bytes_max},
                   "description": "the connector's settings (docs/connectors.md), type included"},
    }),
    "ConnectorState": _object({"state": {**_enum_of(TargetState), "description": "paused: stop the tasks, keep "
                                                                                 "their progress; running: resume"}}),
})
