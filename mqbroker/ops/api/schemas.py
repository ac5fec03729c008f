"""The JSON schemas of the admin API's bodies (OpenAPI 3.1 components, JSON Schema 2020-12).

Routes refer to them with ``ref("Name")``; the same schemas validate requests at run time and
describe responses in ``/api/openapi.json`` (the integration tests validate every response too).
"""

from __future__ import annotations

import enum
from typing import Any

from mqbroker.limits import partitions_per_topic_max, topic_name_length_max, username_length_max
from mqbroker.model import Operation, ResourceType
from mqbroker.security.acl import AllOperations, PatternType, Permission


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
    "AmqpExchange": _object({"name": _STR, "type": _STR, "durable": {"type": "boolean"},
                             "auto_delete": {"type": "boolean"}, "internal": {"type": "boolean"}}),
    "AmqpQueue": _object({"name": _STR, "type": _STR, "durable": {"type": "boolean"},
                          "exclusive": {"type": "boolean"}, "auto_delete": {"type": "boolean"},
                          "messages": {**_NULLABLE_INT, "description": "ready plus unacknowledged (null: a stream)"},
                          "unacknowledged": _NULLABLE_INT, "consumers": _INT, "topic": _STR}),
    "AmqpBinding": _object({"source": _STR, "destination": _STR, "destination_type": {"enum": ["queue", "exchange"]},
                            "routing_key": _STR}),
}
