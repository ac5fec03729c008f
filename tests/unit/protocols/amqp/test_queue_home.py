"""A classic queue is served through its home broker only: others answer 405 naming it and where to reach it."""

from __future__ import annotations

import pytest
from twisted.internet.defer import Deferred, succeed

from mqbroker.model import BrokerEndpoint, ClusterMetadata
from mqbroker.protocols.amqp import spec
from mqbroker.protocols.amqp.queue_home import check_served_here, home_refusal
from mqbroker.protocols.amqp.spec import AmqpError, ReplyCode

CONSUME = spec.BasicConsume(queue="q")


def test_the_refusal_names_the_home_broker_and_its_amqp_address() -> None:
    endpoint = BrokerEndpoint(node_id=2, host="10.0.0.2", port=9393, listeners={"amqp_port": 5673})
    refusal = home_refusal("q", 2, endpoint, CONSUME)
    assert refusal.reply_code is ReplyCode.RESOURCE_LOCKED
    assert (refusal.class_id, refusal.method_id) == (60, 20)
    assert "served by broker 2 (AMQP at 10.0.0.2:5673)" in refusal.reply_text
    assert "not in the cluster now" in home_refusal("q", 2, None, CONSUME).reply_text


class Metadata:
    """A broker whose metadata lists brokers 1 and 2."""

    def metadata(self, principal: object, topics: object, allow_auto_create: bool) -> Deferred[ClusterMetadata]:
        return succeed(ClusterMetadata(cluster_id="c", controller_id=1, topics=(), brokers=tuple(
            BrokerEndpoint(node_id=node, host="127.0.0.1", port=9393, listeners={"amqp_port": 5670 + node})
            for node in (1, 2))))


@pytest.mark.parametrize(("home", "node_id"), [(None, 1), (1, 1), (2, None)])
def test_the_home_broker_and_queues_without_a_home_are_served(home: int | None, node_id: int | None) -> None:
    checked = Deferred.fromCoroutine(check_served_here(Metadata(), None, "q", home, node_id, CONSUME))  # type: ignore[arg-type]
    assert checked.result is None


def test_another_broker_refuses() -> None:
    checked = Deferred.fromCoroutine(check_served_here(Metadata(), None, "q", 2, 1, CONSUME))  # type: ignore[arg-type]
    failure = checked.result
    checked.addErrback(lambda _: None)
    assert isinstance(failure.value, AmqpError) and "127.0.0.1:5672" in failure.value.reply_text
