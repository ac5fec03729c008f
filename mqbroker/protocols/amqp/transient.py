"""Transient AMQP definitions in a cluster: which of them ``__amqp_metadata`` holds, and which a restarted broker
deletes after its replay.

On a single broker, non-durable exchanges, exclusive queues and bindings to non-durable queues live in memory only
and are gone after a restart. In a cluster they are stored too, so that every broker routes by them (a Celery
broadcast published through one broker reaches the auto-delete queues consumed through the others); each carries
its **home**, the broker it was declared through (a binding: its queue's home). They go as they would on one broker:
an exclusive queue with its connection, an auto-delete queue with its last consumer, an auto-delete exchange with
its last binding, each deleted cluster-wide; and when their home restarts, it deletes the ones of its previous run
after its replay (``left_over``), with its non-durable queues (stored on every broker: RabbitMQ deletes a node's
non-durable queues when it restarts), except a non-durable exchange still bound to other brokers' transient queues
(a broadcast exchange other workers consume): its home moves to one of theirs. A home that never comes back leaves
them stored; delete them through any broker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mqbroker.protocols.amqp.routing import Binding, DestinationKind, Exchange
from mqbroker.protocols.amqp.stored import QueueDeclaration


def exchange_stored(exchange: Exchange) -> bool:
    """Whether ``__amqp_metadata`` holds ``exchange``: a durable one, or a transient one declared in a cluster."""
    return not exchange.name.startswith("amq.") and (exchange.durable or exchange.home is not None)


def bindings_stored(declaration: QueueDeclaration, exclusive_here: bool, clustered: bool) -> bool:
    """Whether the bindings to a queue are stored: a durable one's; in a cluster, every queue's (an exclusive one's
    only if its declaration says so); on a single broker, not a non-durable or exclusive queue's."""
    if declaration.exclusive:
        return True
    return not exclusive_here and (declaration.durable or clustered)


@dataclass(frozen=True, slots=True)
class LeftOver:
    """The transient definitions a restarted broker's previous run left in ``__amqp_metadata``."""

    #: Its exclusive and non-durable queues (their bindings go with them).
    queues: list[str]
    exchanges: list[str]
    #: Non-durable exchanges of the restarted broker still bound to other brokers' transient queues: their new home.
    rehomed: dict[str, int]


def left_over(node_id: int | None, queues: Mapping[str, QueueDeclaration], exchanges: Iterable[Exchange],
              bindings: Iterable[Binding]) -> LeftOver:
    """What broker ``node_id`` deletes after its replay: the exclusive and non-durable queues and the non-durable
    exchanges whose home it is; and the exchanges it keeps for other brokers' transient queues, with their new home
    (the lowest of those queues' homes). Queues without a home (declared before homes existed; share and stream
    queues, served by the whole cluster) stay."""
    if node_id is None:
        return LeftOver([], [], {})
    gone_queues = [name for name, queue in queues.items()
                   if (queue.exclusive or not queue.durable) and queue.home == node_id]
    others_homes: dict[str, set[int]] = {}  # exchange -> homes of other brokers' transient queues bound to it
    for binding in bindings:
        queue = _queue_of(binding, queues)
        if queue is not None and (not queue.durable or queue.exclusive) and queue.home not in (None, node_id):
            others_homes.setdefault(binding.source, set()).add(queue.home)
    mine = [exchange.name for exchange in exchanges if not exchange.durable and exchange.home == node_id]
    rehomed = {name: min(others_homes[name]) for name in mine if name in others_homes}
    return LeftOver(gone_queues, [name for name in mine if name not in rehomed], rehomed)


def _queue_of(binding: Binding, queues: Mapping[str, QueueDeclaration]) -> QueueDeclaration | None:
    return queues.get(binding.destination) if binding.destination_kind is DestinationKind.QUEUE else None
