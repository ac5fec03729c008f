"""Queue states are written in batches after a short delay; at shutdown, pending ones are written at once; a
restarted virtual host deletes its non-durable queues."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from mqbroker.protocols.amqp import spec
from mqbroker.protocols.amqp.routing import Binding
from mqbroker.protocols.amqp.stored import QUEUE_STATE_TOPIC, QueueDeclaration, queue_topic
from mqbroker.protocols.amqp.queue_snapshots import STATE_WRITE_DELAY_S
from mqbroker.protocols.amqp.vhost import VirtualHost
from tests.fake_broker import FakeBroker


def _host_with_changed_queue() -> tuple[VirtualHost, FakeBroker, Clock]:
    broker, clock = FakeBroker(), Clock()
    host = VirtualHost(broker, clock)
    assert host.started.started
    queue = host.add_queue(QueueDeclaration(name="work"), owner=None)
    host.state_changed(queue)  # e.g. an ack
    return host, broker, clock


def _produced_topics(broker: FakeBroker) -> list[str]:
    return [topic for _, topic, *_ in broker.calls_of("produce")]


def test_a_changed_queue_state_is_written_after_the_delay() -> None:
    host, broker, clock = _host_with_changed_queue()
    assert QUEUE_STATE_TOPIC not in _produced_topics(broker)
    clock.advance(STATE_WRITE_DELAY_S)
    assert _produced_topics(broker).count(QUEUE_STATE_TOPIC) == 1


def test_at_shutdown_pending_states_are_written_at_once_and_not_again() -> None:
    host, broker, clock = _host_with_changed_queue()
    written = host.snapshots.write_changed_states()
    assert written.called
    assert _produced_topics(broker).count(QUEUE_STATE_TOPIC) == 1
    clock.advance(STATE_WRITE_DELAY_S * 10)  # the delayed write was cancelled
    assert _produced_topics(broker).count(QUEUE_STATE_TOPIC) == 1
    assert host.snapshots.write_changed_states().called  # nothing pending: done at once


def test_queue_and_exchange_names_must_be_printable() -> None:
    """A name is checked whole: 'jobs\\n' is refused with 406 and nothing is created or stored."""
    broker = FakeBroker()
    host = VirtualHost(broker, Clock())
    for declared in (host.declare_queue(spec.QueueDeclare(queue="jobs\n"), session_id=1),
                     host.declare_exchange(spec.ExchangeDeclare(exchange="logs\x00", type="fanout"))):
        failure = Deferred.fromCoroutine(declared)
        errors: list[Any] = []
        failure.addErrback(errors.append)
        [error] = errors
        assert error.value.reply_code == spec.ReplyCode.PRECONDITION_FAILED and "control" in error.value.reply_text
    assert "jobs\n" not in host.queues and "logs\x00" not in host.router.exchanges
    assert _produced_topics(broker) == []


def _run(work: Any) -> Any:
    results: list[Any] = []
    Deferred.fromCoroutine(work).addBoth(results.append)
    [result] = results
    if hasattr(result, "raiseException"):
        result.raiseException()
    return result


def test_a_restarted_broker_deletes_its_non_durable_queues_with_their_bindings_before_it_serves() -> None:
    """As RabbitMQ deletes a node's non-durable queues when it restarts: the queue, its binding, its log topic and
    its stored state are gone once the restarted virtual host has started; durable ones stay bound."""
    broker, clock = FakeBroker(), Clock()
    first = VirtualHost(broker, clock, node_id=1)
    _run(first.declare_exchange(spec.ExchangeDeclare(exchange="orders", type="direct", durable=True)))
    for name, durable in (("scratch", False), ("work", True)):
        _run(first.declare_queue(spec.QueueDeclare(queue=name, durable=durable), session_id=1))
        _run(first.change_binding(Binding(source="orders", destination=name, routing_key="eu"), bind=True))
    assert sorted(first.router.route("orders", "eu", None)) == ["scratch", "work"]
    restarted = VirtualHost(broker, clock, node_id=1)
    assert restarted.started.started
    assert "scratch" not in restarted.queues and "work" in restarted.queues
    assert sorted(restarted.router.route("orders", "eu", None)) == ["work"]
    assert [name for _, name in broker.calls_of("delete_topic")] == [queue_topic("scratch")]
    again = VirtualHost(broker, clock, node_id=1)  # the deletion was stored: nothing of it is replayed
    assert sorted(again.queues) == ["work"] and sorted(again.router.route("orders", "eu", None)) == ["work"]
