"""AMQP definitions across a cluster: each broker's virtual host tails ``__amqp_metadata`` and applies
the exchanges, queues and bindings other brokers' virtual hosts declared or deleted (its own records carry its
``amqp.vhost`` header and are skipped: it applied them already); in a cluster the transient ones are stored too
(``transient.py``).

A broker asked about a queue or exchange it does not know reads the topic to its end first
(``caught_up``), so a declaration answered with declare-ok anywhere is in force for every later
method on any broker. Publishes are routed causally too: each waits for a round of ``fence``
(``definitions_fence.py``) that brings this broker up to the topic's end as of its arrival.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.logger import Logger

from mqbroker import errors, limits
from mqbroker.model import LATEST_TIMESTAMP, FetchPosition, FetchRequest
from mqbroker.protocols.amqp.definitions_fence import DefinitionsFence
from mqbroker.protocols.amqp.queues import REMOTE_OWNER
from mqbroker.protocols.amqp.routing import Binding, Exchange
from mqbroker.protocols.amqp.spec import AmqpError
from mqbroker.protocols.amqp.stored import METADATA_TOPIC, QueueDeclaration, decode_binding_key, decode_declaration
from mqbroker.records.readable import next_offset_after, readable_records
from mqbroker.records.record import Record

if TYPE_CHECKING:
    from mqbroker.protocols.amqp.vhost import VirtualHost

#: The header naming the virtual host that wrote a metadata record.
VHOST_HEADER = "amqp.vhost"
_RETRY_DELAY_S = 1.0


class DefinitionsFollower:
    """Tails ``__amqp_metadata`` from ``position`` and applies other brokers' declarations to ``vhost``."""

    log = Logger()

    def __init__(self, vhost: VirtualHost, position: int) -> None:
        self.vhost = vhost
        self.position = position
        self.stopped = False
        self._waiters: list[tuple[int, Deferred[None]]] = []
        #: Holds each publish until the declarations made before it arrived are applied here.
        self.fence = DefinitionsFence(self.caught_up, vhost.reactor)

    async def run(self) -> None:
        """Long-poll until stopped."""
        vhost = self.vhost
        while not self.stopped:
            position = FetchPosition(topic=METADATA_TOPIC, partition=0, offset=self.position,
                                     max_bytes=limits.amqp_replay_fetch_bytes_max)
            request = FetchRequest(positions=(position,), wait_ms_max=limits.mqtt_log_fetch_wait_ms_max,
                                   response_bytes_max=limits.amqp_replay_fetch_bytes_max)
            try:
                [result] = await vhost.broker.fetch(vhost.principal, request)
                if result.error is not None:
                    raise result.error
            except errors.BrokerError as error:
                self.log.warn("AMQP definitions follower failed: {error}", error=error)
                await deferLater(vhost.reactor, _RETRY_DELAY_S)
                continue
            for record in readable_records(result.records, self.position, topic=METADATA_TOPIC, partition=0,
                                           skipped=lambda batch: vhost.skip_unreadable("AMQP definitions", batch)):
                if _written_by(record) != vhost.instance and record.key is not None:
                    self._apply(record)
            self.position = next_offset_after(result.records, self.position)
            self._wake()

    async def caught_up(self) -> None:
        """Return once every declaration written before the call has been applied."""
        end = (await self.vhost.broker.list_offset(self.vhost.principal, METADATA_TOPIC, 0, LATEST_TIMESTAMP)).offset
        if self.position < end:
            waiter: Deferred[None] = Deferred()
            self._waiters.append((end, waiter))
            await waiter

    def _wake(self) -> None:
        ready = [waiter for offset, waiter in self._waiters if offset <= self.position]
        self._waiters = [(offset, waiter) for offset, waiter in self._waiters if offset > self.position]
        for waiter in ready:
            waiter.callback(None)

    def _apply(self, record: Record) -> None:
        key = record.key
        assert key is not None
        try:
            if record.value is None:
                self._remove(key)
                return
            declared = decode_declaration(key, record.value)
        except AmqpError as error:
            self.log.warn("AMQP definitions follower skipped the record at {offset}: {error}",
                          offset=record.offset, error=error.reply_text)
            return
        self._add(declared)

    def _add(self, declared: Exchange | QueueDeclaration | Binding) -> None:
        vhost = self.vhost
        try:
            if isinstance(declared, Exchange):
                vhost.router.declare_exchange(declared)
                vhost.router.replace_exchange(declared)  # declared here too: the stored home holds
                vhost.persisted_exchanges[declared.name] = declared
            elif isinstance(declared, QueueDeclaration):
                if declared.name not in vhost.queues:
                    vhost.add_queue(declared, owner=None)
                    vhost.learned_queues.add(declared.name)
            else:
                vhost.router.bind(declared)
                vhost.persisted_bindings.add(declared)
        except AmqpError as error:  # e.g. an exchange redeclared with another type there and here at once
            self.log.warn("AMQP definition from another broker not applied: {error}", error=error.reply_text)

    def _remove(self, key: bytes) -> None:
        vhost = self.vhost
        kind, name = key[:2], key[2:].decode("utf-8", "surrogateescape")
        if kind == b"e:":
            if name in vhost.router.exchanges:
                vhost.router.delete_exchange(name)
            vhost.persisted_exchanges.pop(name, None)
        elif kind == b"q:":
            queue = vhost.queues.get(name)
            if queue is not None and (queue.owner is None or queue.owner == REMOTE_OWNER):
                vhost.drop_queue(queue)
            vhost.learned_queues.discard(name)
        elif kind == b"b:":
            binding = decode_binding_key(key)
            vhost.router.unbind(binding)
            vhost.persisted_bindings.discard(binding)


def _written_by(record: Record) -> bytes | None:
    return next((value for name, value in record.headers if name == VHOST_HEADER), None)
