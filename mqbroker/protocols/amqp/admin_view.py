"""What the admin API shows of the AMQP front end: vhost ``/``'s exchanges, queues and bindings.

Read from this broker's ``VirtualHost`` (every broker replays the declarations in
``__amqp_metadata`` at start); deleting a queue goes through the same ``delete_queue`` that
``queue.delete`` uses. Plain values out, so the admin API needs nothing from this package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mqbroker.protocols.amqp.queues import ClassicQueue
from mqbroker.protocols.amqp.share_queue import ShareQueue


@dataclass(frozen=True, slots=True, kw_only=True)
class ExchangeView:
    """A declared exchange."""

    name: str
    type: str
    durable: bool
    auto_delete: bool
    internal: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueView:
    """A declared queue: classic (messages ready plus unacknowledged), share (its share group's ready messages)
    or a stream (messages in its log)."""

    name: str
    type: str
    durable: bool
    exclusive: bool
    auto_delete: bool
    messages: int | None
    unacknowledged: int | None
    consumers: int
    topic: str


@dataclass(frozen=True, slots=True, kw_only=True)
class BindingView:
    """A binding from an exchange to a queue or another exchange."""

    source: str
    destination: str
    destination_type: str
    routing_key: str


class AmqpAdminView:
    """The admin API's window on one ``VirtualHost``."""

    def __init__(self, vhost: Any) -> None:
        self._vhost = vhost

    def exchanges(self) -> list[ExchangeView]:
        """Every declared exchange, by name (the default exchange is implicit, not listed)."""
        return [ExchangeView(name=exchange.name, type=exchange.type.value, durable=exchange.durable,
                             auto_delete=exchange.auto_delete, internal=exchange.internal)
                for _, exchange in sorted(self._vhost.router.exchanges.items())]

    async def queues(self) -> list[QueueView]:
        """Every queue, by name (a share queue's messages are its share group's ready ones)."""
        views = []
        for name, queue in sorted(self._vhost.queues.items()):
            classic = isinstance(queue, ClassicQueue)
            unacknowledged = queue.state.leased_count if classic else None
            kind = "classic" if classic else "share" if isinstance(queue, ShareQueue) else "stream"
            messages = await queue.ready_count()
            views.append(QueueView(
                name=name, type=kind, durable=queue.declaration.durable,
                exclusive=queue.owner is not None, auto_delete=queue.declaration.auto_delete,
                messages=messages + (unacknowledged or 0), unacknowledged=unacknowledged,
                consumers=len(queue.consumers), topic=queue.topic))
        return views

    def bindings(self) -> list[BindingView]:
        """Every binding, by source, destination and key."""
        views = [BindingView(source=binding.source, destination=binding.destination,
                             destination_type=binding.destination_kind.value, routing_key=binding.routing_key)
                 for binding in self._vhost.router.bindings]
        return sorted(views, key=lambda view: (view.source, view.destination, view.routing_key))

    def has_queue(self, name: str) -> bool:
        """Whether queue ``name`` is declared."""
        return name in self._vhost.queues

    def queue_in_use(self, name: str) -> bool:
        """Whether queue ``name`` has consumers."""
        return bool(self._vhost.queues[name].consumers)

    async def delete_queue(self, name: str) -> int:
        """Delete a queue (its consumers are cancelled, its log topic dropped); the messages it held."""
        return await self._vhost.delete_queue(name)
