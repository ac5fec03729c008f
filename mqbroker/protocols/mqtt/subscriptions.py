"""SUBSCRIBE and UNSUBSCRIBE of an open MQTT session (pure): what is granted, refused and removed.

``MqttSession`` hands each SUBSCRIBE and UNSUBSCRIBE here once the session is open. The
subscriptions change in its ``SessionState``; the adapter learns of them through
``AddSubscription`` / ``RemoveSubscription`` actions (it keeps the listener's routing trie), and
the client gets its SUBACK or UNSUBACK through the session's ``Outbox``.
"""

from __future__ import annotations

from collections.abc import Callable

from mqbroker.protocols.mqtt.actions import AddSubscription, RemoveSubscription
from mqbroker.protocols.mqtt.connect import SessionConfig
from mqbroker.protocols.mqtt.errors import MqttProtocolError, protocol_error
from mqbroker.protocols.mqtt.flows import Outbox
from mqbroker.protocols.mqtt.packets import (
    PROTOCOL_LEVEL_5,
    SUBACK_FAILURE_3_1_1,
    ReasonCode,
    RetainHandling,
    SubAck,
    Subscribe,
    SubscriptionRequest,
    UnsubAck,
    Unsubscribe,
)
from mqbroker.protocols.mqtt.state import SessionState, Subscription
from mqbroker.protocols.mqtt.topics import has_wildcards, parse_subscription_filter


def subscribe(
    request: Subscribe, *, state: SessionState, config: SessionConfig, client_id: str, outbox: Outbox,
    authorize_filter: Callable[[str], bool],
) -> None:
    """Grant or refuse each filter of a SUBSCRIBE (one reason code each), then SUBACK."""
    identifiers = request.properties.subscription_identifiers
    if identifiers and not config.subscription_identifier_available:
        raise MqttProtocolError(
            ReasonCode.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED, "subscription identifiers are not available"
        )
    identifier = identifiers[0] if identifiers else None
    codes = tuple(
        _subscribe_one(one, identifier, state=state, config=config, client_id=client_id, outbox=outbox,
                       authorize_filter=authorize_filter)
        for one in request.subscriptions
    )
    if outbox.protocol_level != PROTOCOL_LEVEL_5:
        codes = tuple(SUBACK_FAILURE_3_1_1 if code >= 0x80 else code for code in codes)
    outbox.send(SubAck(packet_id=request.packet_id, reason_codes=codes))


def _subscribe_one(
    request: SubscriptionRequest, identifier: int | None, *, state: SessionState, config: SessionConfig,
    client_id: str, outbox: Outbox, authorize_filter: Callable[[str], bool],
) -> int:
    try:
        parsed = parse_subscription_filter(request.topic_filter)
    except MqttProtocolError as error:
        return error.reason_code
    if parsed.share_group is not None:
        if request.no_local:
            raise protocol_error("no-local on a shared subscription [MQTT-3.8.3-4]")
        if not config.shared_subscription_available:
            return ReasonCode.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED
    if has_wildcards(parsed.topic_filter) and not config.wildcard_subscription_available:
        return ReasonCode.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED
    if not authorize_filter(parsed.topic_filter):
        return ReasonCode.NOT_AUTHORIZED
    granted = min(request.qos, config.maximum_qos)
    is_new = request.topic_filter not in state.subscriptions
    subscription = Subscription(
        topic_filter=request.topic_filter, share_group=parsed.share_group, qos=granted,
        no_local=request.no_local, retain_as_published=request.retain_as_published,
        retain_handling=request.retain_handling, subscription_identifier=identifier,
    )
    state.subscriptions[request.topic_filter] = subscription  # replaces [MQTT-3.8.4-3]
    outbox.dirty = True
    send_retained = parsed.share_group is None and (  # none for shared subscriptions (§4.8.2)
        request.retain_handling is RetainHandling.SEND_ON_SUBSCRIBE
        or (request.retain_handling is RetainHandling.SEND_IF_NEW_SUBSCRIPTION and is_new)
    )
    outbox.actions.append(AddSubscription(client_id=client_id, subscription=subscription, send_retained=send_retained))
    return granted


def unsubscribe(request: Unsubscribe, *, state: SessionState, client_id: str, outbox: Outbox) -> None:
    """Remove each filter of an UNSUBSCRIBE (one reason code each), then UNSUBACK."""
    codes = []
    for topic_filter in request.topic_filters:
        try:
            parse_subscription_filter(topic_filter)
        except MqttProtocolError as error:
            codes.append(int(error.reason_code))
            continue
        if state.subscriptions.pop(topic_filter, None) is None:
            codes.append(ReasonCode.NO_SUBSCRIPTION_EXISTED)
            continue
        outbox.dirty = True
        outbox.actions.append(RemoveSubscription(client_id=client_id, topic_filter=topic_filter))
        codes.append(ReasonCode.SUCCESS)
    outbox.send(UnsubAck(packet_id=request.packet_id, reason_codes=tuple(codes)))
