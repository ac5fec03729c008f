"""Where a classic queue is consumed in a cluster: through the broker it was declared through (its home), only.

A classic queue keeps its per-message state (deliveries, acknowledgements) in the AMQP front end of the broker
serving it, so two brokers serving one queue at once could each deliver a message. RabbitMQ puts a classic queue on
one node (the declaring client's, by default) and reaches it from the others through the cluster; here publishes
reach it from every broker (they append to its replicated log), and basic.consume, basic.get and queue.purge
through another broker are refused with 405 RESOURCE_LOCKED naming the home broker and its AMQP address. A share
queue (a durable queue declared without ``x-queue-type``) is what to use to consume through any broker.
"""

from __future__ import annotations

from mqbroker import errors
from mqbroker.interfaces import IBroker
from mqbroker.model import BrokerEndpoint, Principal
from mqbroker.protocols.amqp.spec import AmqpError, Method, ReplyCode


def home_refusal(queue: str, home: int, endpoint: BrokerEndpoint | None, method: Method) -> AmqpError:
    """The 405 for using classic queue ``queue`` through a broker other than its ``home`` (``endpoint``: where the
    home broker is, None when the cluster does not list it now)."""
    if endpoint is None:
        where = f"broker {home}, which is not in the cluster now (its messages are kept for when it is back)"
    else:
        port = endpoint.listeners.get("amqp_port")
        where = f"broker {home} (AMQP at {endpoint.host}:{port})" if port else f"broker {home}"
    return AmqpError(ReplyCode.RESOURCE_LOCKED,
                     f"queue '{queue}' is a classic queue served by {where}: consume, get or purge it through that "
                     "broker; a share queue (durable, declared without x-queue-type) is served through every broker",
                     class_id=method.CLASS_ID, method_id=method.METHOD_ID)


async def check_served_here(broker: IBroker, principal: Principal, queue: str, home: int | None,
                            node_id: int | None, method: Method) -> None:
    """Raise ``home_refusal`` unless this broker (``node_id``) is classic queue ``queue``'s ``home`` (None: declared
    before queues had one, or on a front end that does not know its node: served anywhere, as before)."""
    if home is None or node_id is None or home == node_id:
        return
    try:
        brokers = (await broker.metadata(principal, (), False)).brokers
    except errors.BrokerError:
        brokers = ()
    raise home_refusal(queue, home, next((endpoint for endpoint in brokers if endpoint.node_id == home), None),
                       method)
