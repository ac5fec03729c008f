"""Configuration admin: DescribeConfigs, AlterConfigs and IncrementalAlterConfigs, of topics and brokers.

A topic key's value comes from the first layer that sets it (``TopicConfigLayers``), and its
source says which: the topic's override (DYNAMIC_TOPIC_CONFIG), this broker's dynamic default
(DYNAMIC_BROKER_CONFIG), the cluster's (DYNAMIC_DEFAULT_BROKER_CONFIG), the broker's static
``log.`` default (STATIC_BROKER_CONFIG) or the built-in one (DEFAULT_CONFIG); with
``include_synonyms`` every layer that sets it is listed, as Kafka does. A broker resource (name
"": the cluster-wide defaults, else a broker id) takes dynamic changes of the topic defaults only,
under Kafka's broker names (``log.retention.ms``, ``message.max.bytes``, ``min.insync.replicas``,
...); the controller stores them in the cluster metadata. Its other settings are static.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mqbroker import errors
from mqbroker.core.topic_config import ConfigLayer, TopicConfigLayers
from mqbroker.protocols.deferreds import settle
from mqbroker.protocols.kafka.broker_calls import topic_config_keys
from mqbroker.protocols.kafka.config_catalog import ConfigSource, broker_key, config_type
from mqbroker.protocols.kafka.error_codes import kafka_error
from mqbroker.protocols.kafka.handlers.context import RequestContext
from mqbroker.protocols.kafka.messages import admin as m

#: Kafka's ConfigResource types.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
#: IncrementalAlterConfigs operations.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
#: The config source Kafka reports for each layer.
SOURCE_OF_LAYER = {ConfigLayer.TOPIC: ConfigSource.DYNAMIC_TOPIC, ConfigLayer.DYNAMIC_BROKER: ConfigSource.DYNAMIC_BROKER,
                   ConfigLayer.DYNAMIC_DEFAULT: ConfigSource.DYNAMIC_DEFAULT,
                   ConfigLayer.STATIC_BROKER: ConfigSource.STATIC_BROKER, ConfigLayer.BUILT_IN: ConfigSource.DEFAULT}


def _entry(key: str, name: str, values: Sequence[tuple[ConfigLayer, str]], synonyms: bool) -> m.DescribeConfigsResourceResult:
    """A key as described under ``name`` (its topic or broker name), from its values by layer, highest first."""
    layer, value = values[0]
    listed = tuple(m.DescribeConfigsSynonym(name=key if each == ConfigLayer.TOPIC else broker_key(key), value=text,
                                            source=SOURCE_OF_LAYER[each]) for each, text in values) if synonyms else ()
    return m.DescribeConfigsResourceResult(name=name, value=value, read_only=False,
                                           config_source=SOURCE_OF_LAYER[layer], is_sensitive=False,
                                           synonyms=listed, config_type=config_type(key))


def _topic_entries(layers: TopicConfigLayers, synonyms: bool) -> list[m.DescribeConfigsResourceResult]:
    return [_entry(key, key, values, synonyms) for key, values in sorted(layers.sources().items())]


def _broker_entries(context: RequestContext, name: str, layers: TopicConfigLayers,
                    synonyms: bool) -> list[m.DescribeConfigsResourceResult]:
    """The cluster's dynamic defaults (name ""), or this broker's settings with its topic defaults as they resolve."""
    if not name:
        return [_entry(key, broker_key(key), [(ConfigLayer.DYNAMIC_DEFAULT, value)], synonyms)
                for key, value in sorted(layers.dynamic_default.items())]
    entries = {key: m.DescribeConfigsResourceResult(name=key, value=entry.value, read_only=True,
                                                    config_source=entry.source, is_sensitive=False, synonyms=(),
                                                    config_type=entry.type)
               for key, entry in context.broker_configs.items()}
    for key, values in layers.sources().items():
        entries[broker_key(key)] = _entry(key, broker_key(key), [each for each in values if each[0] != ConfigLayer.TOPIC],
                                          synonyms)
    return [entries[key] for key in sorted(entries)]


def _not_this_broker(context: RequestContext, name: str) -> errors.BrokerError | None:
    """A broker resource described names this broker, or (empty) the cluster-wide dynamic defaults."""
    if name in ("", str(context.node_id)):
        return None
    return errors.InvalidRequestError(f"broker {name!r} is described by that broker itself; this is broker "
                                      f"{context.node_id} (send the request to the broker it names)")


def _not_served(resource_type: int) -> errors.BrokerError | None:
    if resource_type in (RESOURCE_TOPIC, RESOURCE_BROKER):
        return None
    return errors.InvalidRequestError(f"only topic and broker configurations (resource types 2 and 4) are served, "
                                      f"not type {resource_type}")


async def handle_describe_configs(context: RequestContext, request: m.DescribeConfigsRequest) -> m.DescribeConfigsResponse:
    """Topics' configurations key by key with their sources, this broker's settings, the cluster's dynamic defaults."""
    results = []
    for resource in request.resources:
        wanted = set(resource.configuration_keys) if resource.configuration_keys is not None else None
        entries: list[m.DescribeConfigsResourceResult] = []
        error = _not_served(resource.resource_type)
        if error is None and resource.resource_type == RESOURCE_BROKER:
            error = _not_this_broker(context, resource.resource_name)
        if error is None:
            topic = resource.resource_name if resource.resource_type == RESOURCE_TOPIC else None
            layers, error = await settle(context.calls.describe_config_layers(topic))
            if layers is not None and topic is not None:
                entries = _topic_entries(layers, request.include_synonyms)
            elif layers is not None:
                entries = _broker_entries(context, resource.resource_name, layers, request.include_synonyms)
        code, message = kafka_error(error)
        results.append(m.DescribeConfigsResult(error_code=code, error_message=message,
                                               resource_type=resource.resource_type,
                                               resource_name=resource.resource_name,
                                               configs=tuple(entry for entry in entries
                                                             if wanted is None or entry.name in wanted)))
    return m.DescribeConfigsResponse(throttle_time_ms=0, results=tuple(results))


def _broker_id(name: str) -> int | None:
    """The broker a broker resource names (None: "", the cluster-wide defaults); INVALID_REQUEST if not an id."""
    if not name:
        return None
    if not (name.isascii() and name.isdigit()):
        raise errors.InvalidRequestError(f"broker resource {name!r} is not a broker id (or \"\" for the cluster-wide "
                                         "defaults, kafka-configs --entity-default)")
    return int(name)


def _topic_keys(names: Sequence[str], *, deleting: bool = False) -> dict[str, str]:
    """{broker name: topic key} for broker config names; a name that is not a topic default cannot change at run
    time (INVALID_REQUEST), except that deleting it changes nothing (``kafka-reassign-partitions`` clears throttles)."""
    by_broker_name = {broker_key(key): key for key in topic_config_keys()}
    static = [name for name in names if name not in by_broker_name]
    if static and not deleting:
        raise errors.InvalidRequestError(
            f"cannot update these broker configs dynamically: {', '.join(sorted(static))}; only the topic defaults "
            f"can ({', '.join(sorted(by_broker_name))}); set the others in the broker's configuration and restart it")
    return {name: by_broker_name[name] for name in names if name in by_broker_name}


async def _alter_broker(context: RequestContext, name: str, set_configs: Mapping[str, str],
                        delete_configs: Sequence[str], validate_only: bool) -> None:
    """Change dynamic topic defaults of the cluster or of this broker (as Kafka: a broker's own are changed through
    it; clients send them there), given under their broker names."""
    broker_id = _broker_id(name)
    if broker_id is not None and broker_id != context.node_id:
        raise errors.InvalidRequestError(f"broker {broker_id}'s configs are changed through broker {broker_id} itself; "
                                         f"this is broker {context.node_id} (send the request to the broker it names)")
    keys = _topic_keys(list(set_configs))
    deleted = _topic_keys(delete_configs, deleting=True)
    await context.calls.alter_broker_configs(broker_id, {keys[key]: value for key, value in set_configs.items()},
                                             list(deleted.values()), validate_only)


async def handle_alter_configs(context: RequestContext, request: m.AlterConfigsRequest) -> m.AlterConfigsResponse:
    """Replace resources' whole configurations: the keys named are set, every other override is reset."""
    results = []
    for resource in request.resources:
        error = _not_served(resource.resource_type)
        if error is None:
            wanted = {config.name: config.value for config in resource.configs if config.value is not None}
            try:
                if resource.resource_type == RESOURCE_BROKER:
                    reset = [broker_key(key) for key in topic_config_keys() if broker_key(key) not in wanted]
                    await _alter_broker(context, resource.resource_name, wanted, reset, request.validate_only)
                else:
                    layers = await context.calls.describe_config_layers(resource.resource_name)
                    if not request.validate_only:
                        reset = [key for key in layers.topic if key not in wanted]
                        await context.calls.alter_configs(resource.resource_name, wanted, reset)
            except errors.BrokerError as refused:
                error = refused
        results.append(_altered(resource.resource_type, resource.resource_name, error))
    return m.AlterConfigsResponse(throttle_time_ms=0, responses=tuple(results))


def _altered(resource_type: int, name: str, error: BaseException | None) -> m.AlterConfigsResourceResponse:
    code, message = kafka_error(error)
    return m.AlterConfigsResourceResponse(error_code=code, error_message=message, resource_type=resource_type,
                                          resource_name=name)


def _list_value(current: str | None) -> list[str]:
    return [item for item in (current or "").split(",") if item]


def _changes(resource: m.IncrementalAlterConfigsResource,
             current: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The keys to set and to reset, from ``current`` values (for appending to and subtracting from lists)."""
    set_configs: dict[str, str] = {}
    delete_configs: list[str] = []
    for change in resource.configs:
        if change.config_operation == SET:
            set_configs[change.name] = change.value or ""
        elif change.config_operation == DELETE:
            delete_configs.append(change.name)
        elif change.config_operation in (APPEND, SUBTRACT):
            items = _list_value(set_configs.get(change.name, current.get(change.name)))
            given = _list_value(change.value)
            items = items + [i for i in given if i not in items] if change.config_operation == APPEND \
                else [i for i in items if i not in given]
            set_configs[change.name] = ",".join(items)
        else:
            raise errors.InvalidRequestError(f"config operation {change.config_operation} is unknown")
    return set_configs, delete_configs


async def _alter_incrementally(context: RequestContext, resource: m.IncrementalAlterConfigsResource,
                               validate_only: bool) -> None:
    """Apply one resource's key changes (a topic's overrides, or dynamic broker defaults)."""
    if resource.resource_type == RESOURCE_BROKER:
        current: dict[str, str] = {}
        if any(change.config_operation in (APPEND, SUBTRACT) for change in resource.configs):
            layers = await context.calls.describe_config_layers(None)
            current = {broker_key(key): value for key, value in layers.effective().items()}
        set_configs, delete_configs = _changes(resource, current)
        await _alter_broker(context, resource.resource_name, set_configs, delete_configs, validate_only)
        return
    layers = await context.calls.describe_config_layers(resource.resource_name)
    set_configs, delete_configs = _changes(resource, layers.effective())
    if not validate_only:
        await context.calls.alter_configs(resource.resource_name, set_configs, delete_configs)


async def handle_incremental_alter_configs(context: RequestContext,
                                           request: m.IncrementalAlterConfigsRequest) -> m.IncrementalAlterConfigsResponse:
    """Set, reset, append to or subtract from some keys of topics' configurations or of dynamic broker defaults."""
    results = []
    for resource in request.resources:
        error = _not_served(resource.resource_type)
        if error is None:
            try:
                await _alter_incrementally(context, resource, request.validate_only)
            except errors.BrokerError as refused:
                error = refused
        results.append(_altered(resource.resource_type, resource.resource_name, error))
    return m.IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=tuple(results))
