"""SUBSCRIBE and UNSUBSCRIBE: one reason code per filter, 3.1.1's single failure code, authorization per filter."""

from __future__ import annotations

from mqbroker.protocols.mqtt.actions import AddSubscription, Close, Send
from mqbroker.protocols.mqtt.codec import encode
from mqbroker.protocols.mqtt.packets import (
    SUBACK_FAILURE_3_1_1,
    ReasonCode,
    SubAck,
    Subscribe,
    SubscriptionRequest,
    UnsubAck,
    Unsubscribe,
)
from tests.unit.protocols.mqtt.test_flows import connected_session


def _answer(actions: list[object]) -> object:
    (send,) = [action for action in actions if isinstance(action, Send)]
    return send.packet


def test_each_filter_gets_its_own_code_and_a_refused_one_changes_nothing() -> None:
    session = connected_session()
    session.authorize_filter = lambda topic_filter: not topic_filter.startswith("secret")
    requests = (SubscriptionRequest(topic_filter="a/#", qos=2), SubscriptionRequest(topic_filter="secret/x", qos=1),
                SubscriptionRequest(topic_filter="a/#/b", qos=0))
    actions = session.receive_data(encode(Subscribe(packet_id=1, subscriptions=requests), 5), 0)
    suback = _answer(actions)
    assert isinstance(suback, SubAck)
    assert suback.reason_codes == (2, ReasonCode.NOT_AUTHORIZED, ReasonCode.TOPIC_FILTER_INVALID)
    assert [a.subscription.topic_filter for a in actions if isinstance(a, AddSubscription)] == ["a/#"]
    assert session.session is not None and list(session.session.subscriptions) == ["a/#"]


def test_a_3_1_1_client_gets_the_single_failure_code() -> None:
    session = connected_session(4)
    session.authorize_filter = lambda topic_filter: False
    request = Subscribe(packet_id=1, subscriptions=(SubscriptionRequest(topic_filter="a", qos=1),))
    suback = _answer(session.receive_data(encode(request, 4), 0))
    assert isinstance(suback, SubAck) and suback.reason_codes == (SUBACK_FAILURE_3_1_1,)


def test_no_local_on_a_shared_subscription_is_a_protocol_error() -> None:
    session = connected_session()
    request = Subscribe(packet_id=1, subscriptions=(SubscriptionRequest(topic_filter="$share/g/a", no_local=True),))
    actions = session.receive_data(encode(request, 5), 0)
    assert isinstance(actions[-1], Close)


def test_unsubscribing_an_unknown_filter_says_no_subscription_existed() -> None:
    session = connected_session()
    session.receive_data(encode(Subscribe(packet_id=1, subscriptions=(SubscriptionRequest(topic_filter="a"),)), 5), 0)
    unsuback = _answer(session.receive_data(encode(Unsubscribe(packet_id=2, topic_filters=("a", "b")), 5), 0))
    assert isinstance(unsuback, UnsubAck)
    assert unsuback.reason_codes == (ReasonCode.SUCCESS, ReasonCode.NO_SUBSCRIPTION_EXISTED)
