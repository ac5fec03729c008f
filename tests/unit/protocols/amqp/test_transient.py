"""Which transient AMQP definitions are stored in a cluster, and which a restarted broker deletes after its replay."""

from __future__ import annotations

from mqbroker.protocols.amqp.routing import Binding, DestinationKind, Exchange, ExchangeType
from mqbroker.protocols.amqp.stored import QueueDeclaration
from mqbroker.protocols.amqp.transient import bindings_stored, exchange_stored, left_over

ME, OTHER = 1, 2


def test_durable_exchanges_and_transient_ones_with_a_home_are_stored_predeclared_ones_never() -> None:
    assert exchange_stored(Exchange(name="orders", type=ExchangeType.TOPIC))
    assert not exchange_stored(Exchange(name="pidbox", type=ExchangeType.FANOUT, durable=False))  # single broker
    assert exchange_stored(Exchange(name="pidbox", type=ExchangeType.FANOUT, durable=False, home=ME))  # cluster
    assert not exchange_stored(Exchange(name="amq.fanout", type=ExchangeType.FANOUT))


def test_bindings_to_non_durable_queues_are_stored_in_a_cluster_only() -> None:
    durable, transient = QueueDeclaration(name="d"), QueueDeclaration(name="t", durable=False, auto_delete=True)
    exclusive_in_cluster = QueueDeclaration(name="x", durable=False, exclusive=True, home=ME)
    assert bindings_stored(durable, exclusive_here=False, clustered=False)
    assert not bindings_stored(transient, exclusive_here=False, clustered=False)
    assert bindings_stored(transient, exclusive_here=False, clustered=True)
    assert bindings_stored(exclusive_in_cluster, exclusive_here=True, clustered=True)
    # an exclusive queue on a single broker lives in memory only, its bindings too
    assert not bindings_stored(QueueDeclaration(name="x", durable=False), exclusive_here=True, clustered=False)
    assert not bindings_stored(durable, exclusive_here=True, clustered=False)


def _bind(source: str, queue: str) -> Binding:
    return Binding(source=source, destination=queue)


def test_a_restarted_broker_deletes_its_own_exclusive_and_non_durable_queues_and_transient_exchanges() -> None:
    queues = {
        "reply": QueueDeclaration(name="reply", durable=False, exclusive=True, home=ME),
        "their-reply": QueueDeclaration(name="their-reply", durable=False, exclusive=True, home=OTHER),
        "pidbox.me": QueueDeclaration(name="pidbox.me", durable=False, auto_delete=True, home=ME),
        "pidbox.other": QueueDeclaration(name="pidbox.other", durable=False, auto_delete=True, home=OTHER),
        "scratch": QueueDeclaration(name="scratch", durable=False, home=ME),
        "work": QueueDeclaration(name="work", home=ME),
        "old": QueueDeclaration(name="old", durable=False),  # declared before queues had a home
    }
    exchanges = [Exchange(name="mine", type=ExchangeType.FANOUT, durable=False, home=ME),
                 Exchange(name="broadcast", type=ExchangeType.FANOUT, durable=False, home=ME),
                 Exchange(name="theirs", type=ExchangeType.FANOUT, durable=False, home=OTHER),
                 Exchange(name="orders", type=ExchangeType.DIRECT, home=None)]
    bindings = [_bind("theirs", "pidbox.me"), _bind("theirs", "pidbox.other"), _bind("orders", "work"),
                _bind("orders", "old"), _bind("mine", "work"), _bind("orders", "reply"),
                _bind("broadcast", "pidbox.me"), _bind("broadcast", "pidbox.other"), _bind("broadcast", "their-reply"),
                Binding(source="orders", destination="theirs", destination_kind=DestinationKind.EXCHANGE)]
    gone = left_over(ME, queues, exchanges, bindings)
    assert gone.queues == ["reply", "pidbox.me", "scratch"]  # as RabbitMQ deletes a restarted node's transient queues
    assert gone.exchanges == ["mine"]  # its bindings go with it
    assert gone.rehomed == {"broadcast": OTHER}  # other brokers' workers still consume it


def test_an_exchange_kept_for_several_other_brokers_moves_to_the_lowest_home() -> None:
    queues = {f"q{home}": QueueDeclaration(name=f"q{home}", durable=False, auto_delete=True, home=home)
              for home in (5, 3, ME)}
    queues["stays"] = QueueDeclaration(name="stays", home=4)  # durable: bound to a transient exchange, not kept for
    exchange = Exchange(name="broadcast", type=ExchangeType.FANOUT, durable=False, home=ME)
    gone = left_over(ME, queues, [exchange], [_bind("broadcast", name) for name in queues])
    assert (gone.queues, gone.exchanges, gone.rehomed) == ([f"q{ME}"], [], {"broadcast": 3})
    only_durable = left_over(ME, queues, [exchange], [_bind("broadcast", "stays")])
    assert (only_durable.exchanges, only_durable.rehomed) == (["broadcast"], {})


def test_queues_without_a_home_stay() -> None:
    """Share and stream queues are served by the whole cluster (no home), as are queues declared before homes."""
    queues = {"share": QueueDeclaration(name="share", durable=False, arguments={"x-queue-type": "share"}),
              "old": QueueDeclaration(name="old", durable=False)}
    assert left_over(ME, queues, [], []).queues == []


def test_a_broker_without_a_node_id_deletes_nothing() -> None:
    queues = {"reply": QueueDeclaration(name="reply", durable=False, exclusive=True, home=None)}
    assert left_over(None, queues, [], []) == left_over(ME, queues, [], [])
    assert left_over(None, queues, [], []).queues == []
