"""Admin API: the MQTT front end (clients, sessions, retained messages, mapping rules) and AMQP (exchanges,
queues, bindings).

Both come from the front ends' admin views on this broker; reading needs ``describe`` on the
cluster, changing ``alter``. A front end whose listener is off answers 404.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mqbroker import errors
from mqbroker.limits import http_retained_listing_max
from mqbroker.model import Operation
from mqbroker.ops.api.operations import FrontEndMissing
from mqbroker.ops.api.record_routes import text_of
from mqbroker.ops.api.routing import ApiCall, ApiError, Route, path_parameter, query_parameter
from mqbroker.ops.api.schemas import array_of, ref

MQTT_TAG = "mqtt"
AMQP_TAG = "amqp"


def _view(call: ApiCall, name: str, operation: Operation = Operation.DESCRIBE) -> Any:
    try:
        return call.operations.front_end(name, call.principal, operation)
    except FrontEndMissing as missing:
        raise ApiError(404, "FRONT_END_OFF", str(missing)) from None


def _plain(values: list[Any]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(value) for value in values]


async def mqtt_clients(call: ApiCall) -> list[dict[str, Any]]:
    """MQTT clients connected to this broker."""
    return _plain(_view(call, "mqtt").clients())


async def mqtt_sessions(call: ApiCall) -> list[dict[str, Any]]:
    """MQTT sessions: connected clients' and stored ones."""
    return _plain(_view(call, "mqtt").sessions())


async def delete_mqtt_session(call: ApiCall) -> None:
    """Delete the stored session of a client that is not connected."""
    view, client_id = _view(call, "mqtt", Operation.ALTER), call.path["client_id"]
    if view.is_connected(client_id):
        raise ApiError(409, "CLIENT_CONNECTED", f"client {client_id!r} is connected; its session ends with it")
    if not view.delete_session(client_id):
        raise errors.ResourceNotFoundError(f"no stored MQTT session for client {client_id!r}")


async def mqtt_retained(call: ApiCall) -> list[dict[str, Any]]:
    """Retained messages matching a topic filter."""
    limit = call.query.get("limit", http_retained_listing_max)
    found = _view(call, "mqtt").retained(call.query.get("filter", "#"), limit)
    return [{"topic": message.topic, "qos": message.qos, "payload": text_of(message.payload),
             "created_ms": message.created_ms} for message in found]


async def clear_mqtt_retained(call: ApiCall) -> None:
    """Clear the retained message of one topic."""
    topic = call.query["topic"]
    if not _view(call, "mqtt", Operation.ALTER).clear_retained(topic):
        raise errors.ResourceNotFoundError(f"no retained message on MQTT topic {topic!r}")


async def mqtt_mapping_rules(call: ApiCall) -> dict[str, Any]:
    """The MQTT mapping rules this broker applies."""
    return dict(_view(call, "mqtt").mapping_rules())


async def replace_mqtt_mapping_rules(call: ApiCall) -> dict[str, Any]:
    """Put new MQTT mapping rules in force on every broker (stored in the cluster metadata)."""
    return dict(await _view(call, "mqtt", Operation.ALTER).replace_mapping_rules(call.body["rules"]))


async def reset_mqtt_mapping_rules(call: ApiCall) -> dict[str, Any]:
    """Bring the configured MQTT mapping rules back on every broker."""
    return dict(await _view(call, "mqtt", Operation.ALTER).reset_mapping_rules())


async def amqp_exchanges(call: ApiCall) -> list[dict[str, Any]]:
    """Exchanges of vhost /."""
    return _plain(_view(call, "amqp").exchanges())


async def amqp_queues(call: ApiCall) -> list[dict[str, Any]]:
    """Queues of vhost /."""
    return _plain(await _view(call, "amqp").queues())


async def amqp_bindings(call: ApiCall) -> list[dict[str, Any]]:
    """Bindings of vhost /."""
    return _plain(_view(call, "amqp").bindings())


async def delete_amqp_queue(call: ApiCall) -> None:
    """Delete a queue (``if_unused``: only without consumers; ``if_empty``: only without messages)."""
    view, name = _view(call, "amqp", Operation.ALTER), call.path["queue"]
    if not view.has_queue(name):
        raise errors.ResourceNotFoundError(f"no AMQP queue {name!r} in vhost /")
    if call.query.get("if_unused", False) and view.queue_in_use(name):
        raise ApiError(409, "QUEUE_IN_USE", f"queue {name!r} has consumers")
    if call.query.get("if_empty", False):
        (queue,) = [queue for queue in await view.queues() if queue.name == name]
        if queue.messages:
            raise ApiError(409, "QUEUE_NOT_EMPTY", f"queue {name!r} holds {queue.messages} message(s)")
    await view.delete_queue(name)


_MQTT_ERRORS = (404,)

ROUTES = (
    Route(method="GET", path="/api/v1/mqtt/clients", operation_id="listMqttClients", tag=MQTT_TAG,
          handler=mqtt_clients, summary="MQTT clients connected to this broker", response=array_of("MqttClient"),
          error_statuses=_MQTT_ERRORS),
    Route(method="GET", path="/api/v1/mqtt/sessions", operation_id="listMqttSessions", tag=MQTT_TAG,
          handler=mqtt_sessions, summary="MQTT sessions, connected and stored", response=array_of("MqttSession"),
          error_statuses=_MQTT_ERRORS),
    Route(method="DELETE", path="/api/v1/mqtt/sessions/{client_id}", operation_id="deleteMqttSession", tag=MQTT_TAG,
          handler=delete_mqtt_session, summary="Delete the stored session of a disconnected client",
          parameters=(path_parameter("client_id", "the MQTT client id"),), error_statuses=(404, 409)),
    Route(method="GET", path="/api/v1/mqtt/retained", operation_id="listMqttRetained", tag=MQTT_TAG,
          handler=mqtt_retained, summary="Retained MQTT messages", response=array_of("MqttRetained"),
          error_statuses=_MQTT_ERRORS,
          parameters=(query_parameter("filter", "an MQTT topic filter (default #)", {"type": "string", "minLength": 1}),
                      query_parameter("limit", f"most messages returned (default {http_retained_listing_max})",
                                      {"type": "integer", "minimum": 1, "maximum": http_retained_listing_max}))),
    Route(method="DELETE", path="/api/v1/mqtt/retained", operation_id="clearMqttRetained", tag=MQTT_TAG,
          handler=clear_mqtt_retained, summary="Clear the retained message of a topic", error_statuses=(404,),
          parameters=(query_parameter("topic", "the MQTT topic name", {"type": "string", "minLength": 1},
                                      required=True),)),
    Route(method="GET", path="/api/v1/mqtt/mapping-rules", operation_id="getMqttMappingRules", tag=MQTT_TAG,
          handler=mqtt_mapping_rules, summary="The MQTT topic filter -> log topic rules this broker applies",
          response=ref("MqttMappingRules"), error_statuses=_MQTT_ERRORS),
    Route(method="PUT", path="/api/v1/mqtt/mapping-rules", operation_id="replaceMqttMappingRules", tag=MQTT_TAG,
          handler=replace_mqtt_mapping_rules, summary="Replace the MQTT mapping rules on every broker",
          body=ref("NewMqttMappingRules"), response=ref("MqttMappingRules"), error_statuses=_MQTT_ERRORS),
    Route(method="DELETE", path="/api/v1/mqtt/mapping-rules", operation_id="resetMqttMappingRules", tag=MQTT_TAG,
          handler=reset_mqtt_mapping_rules, summary="Bring the configured MQTT mapping rules back on every broker",
          response=ref("MqttMappingRules"), error_statuses=_MQTT_ERRORS),
    Route(method="GET", path="/api/v1/amqp/exchanges", operation_id="listAmqpExchanges", tag=AMQP_TAG,
          handler=amqp_exchanges, summary="AMQP exchanges", response=array_of("AmqpExchange"), error_statuses=(404,)),
    Route(method="GET", path="/api/v1/amqp/queues", operation_id="listAmqpQueues", tag=AMQP_TAG,
          handler=amqp_queues, summary="AMQP queues with message and consumer counts", response=array_of("AmqpQueue"),
          error_statuses=(404,)),
    Route(method="GET", path="/api/v1/amqp/bindings", operation_id="listAmqpBindings", tag=AMQP_TAG,
          handler=amqp_bindings, summary="AMQP bindings", response=array_of("AmqpBinding"), error_statuses=(404,)),
    Route(method="DELETE", path="/api/v1/amqp/queues/{queue}", operation_id="deleteAmqpQueue", tag=AMQP_TAG,
          handler=delete_amqp_queue, summary="Delete an AMQP queue and its messages", error_statuses=(404, 409),
          parameters=(path_parameter("queue", "the queue's name"),
                      query_parameter("if_unused", "only if it has no consumers", {"type": "boolean"}),
                      query_parameter("if_empty", "only if it holds no messages", {"type": "boolean"}))),
)
