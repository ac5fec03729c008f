"""The blocking producer's I/O thread: drains the core, writes requests, reads replies, completes batches.

It owns non-blocking sockets to the partition leaders and waits in a selector for replies, the
next batch deadline, or a wake-up from ``send`` (a byte on a socket pair).
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections.abc import Callable

from mqbroker.client.blocking.cluster import BlockingCluster, wall_clock_ms
from mqbroker.client.blocking.delivery import BatchDelivery
from mqbroker.client.connection import BlockingConnection, BrokerUnavailableError
from mqbroker.client.producer import ProducerCore
from mqbroker.client.producer_batch import ProducerBatch, ProducePlan
from mqbroker.errors import BrokerError
from mqbroker.protocols.native.messages import Acks


class ProducerIO:
    """The producer's I/O thread: drains the core, writes requests, reads replies, fires futures."""

    def __init__(
        self, core: ProducerCore, cluster: BlockingCluster, lock: threading.Lock, changed: threading.Condition,
        open_gates: Callable[[], list[ProducerBatch]] | None = None,
    ) -> None:
        """``open_gates``: a transactional producer's AddPartitionsToTxn for the partitions whose batches wait
        (``core.gated``); returns the batches it failed (called without ``lock``, before a drain, once one of
        their batches is ready to go: a transaction's partitions go in one request, not one per send)."""
        self.core = core
        self._open_gates = open_gates
        self.cluster = cluster
        self.lock = lock
        self.changed = changed
        #: Records of batches the core finished and ``resolve`` has not yet completed (futures woken,
        #: callbacks run or queued); guarded by ``lock``. With the core's pending records, what ``flush`` waits for.
        self.resolving_records = 0
        self.error: BaseException | None = None
        self._selector = selectors.DefaultSelector()
        self._wake_reader, self._wake_writer = _socket_pair()
        self._selector.register(self._wake_reader, selectors.EVENT_READ, None)
        self._pending: dict[tuple[int, int], ProducePlan] = {}
        self._registered: dict[int, BlockingConnection] = {}
        self._running = True
        self._awake = False
        #: ``take_turn`` waits for a step: asked for (guarded by ``lock``), and steps that served such a wait.
        self._turn_wanted = False
        self._turns_served = 0

    def wake(self) -> None:
        """Make the I/O thread look at the core again now."""
        if not self._awake:
            self._awake = True
            self._wake_writer.send(b"\0")

    def take_turn(self, wait_s: float) -> None:
        """(The application's thread.) Let the I/O thread take a step now, and wait (up to ``wait_s``) until it has
        sent what was due: the application's thread gives up the interpreter meanwhile.

        CPython hands the interpreter to a waiting thread only every switch interval (5 ms, and a thread that
        releases it now and then resets that clock), so while the application keeps sending, this thread, woken
        or not, hardly runs: a transactional producer's first batches, which open the transaction at the
        partition leaders, would go only at the flush, in series with the rest of the transaction.
        """
        deadline = time.monotonic() + wait_s
        with self.lock:
            served = self._turns_served
            self._turn_wanted = True
            self.wake()
            while self._turns_served == served and self._running and self.error is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self.changed.wait(remaining)

    def stop(self) -> None:
        """End the loop (after the current iteration)."""
        self._running = False
        try:
            self._wake_writer.send(b"\0")
        except OSError:
            pass  # the loop has ended already (``error`` says why) and closed its sockets

    def run(self) -> None:
        """The loop: refresh metadata, drain, send, wait for replies or the next deadline."""
        try:
            while self._running:
                self._step()
        except BaseException as error:  # surfaced to flush() and close(); the thread must not die silently
            self.error = error
            with self.lock:
                self.changed.notify_all()
            raise
        finally:
            self._selector.close()
            self._wake_reader.close()
            self._wake_writer.close()

    def _step(self) -> None:
        now_ms = wall_clock_ms()
        core = self.core
        with self.lock:
            self._awake = False
            serving, self._turn_wanted = self._turn_wanted, False
            stale = set(core.stale_topics)
            finished = self.finishing(core.expire(now_ms))
            open_gates = self._open_gates if core.gated and core.gates_due(now_ms) else None
        if stale:
            self._refresh(stale)
        if open_gates is not None:
            failed = open_gates()
            with self.lock:
                finished += self.finishing(failed)
        with self.lock:
            plans = core.drain(now_ms, self.cluster.view.leader)
            deadline_ms = core.next_deadline_ms(now_ms)
        self.resolve(finished)
        for plan in plans:
            self._send(plan, now_ms)
        if serving:
            with self.lock:
                self._turns_served += 1
                self.changed.notify_all()
        timeout_s = None if deadline_ms is None else max(0.0, (deadline_ms - wall_clock_ms()) / 1000)
        if core.stale_topics:
            timeout_s = 0.05 if timeout_s is None else min(timeout_s, 0.05)
        for key, _ in self._selector.select(timeout_s):
            if key.data is None:
                self._wake_reader.recv(4096)
            else:
                self._receive(key.data)

    def _refresh(self, topics: set[str]) -> None:
        try:
            self.cluster.refresh(topics)
        except BrokerError:
            return  # retried on the next iteration, 50 ms later
        with self.lock:
            self.core.stale_topics -= topics - set(self.cluster.view.stale_topics)
            self.changed.notify_all()

    def _send(self, plan: ProducePlan, now_ms: int) -> None:
        try:
            connection = self._connection(plan.node_id)
            correlation_id = connection.send(plan.request())
        except BrokerUnavailableError as error:
            self._connection_lost(plan.node_id, error)
            with self.lock:
                finished = self.finishing(self.core.plan_failed(plan, error, now_ms))
            self.resolve(finished)
            return
        if plan.acks == Acks.NONE:
            with self.lock:
                finished = self.finishing(self.core.plan_completed(plan, None, now_ms))
            self.resolve(finished)
            return
        self._pending[plan.node_id, correlation_id] = plan

    def _connection(self, node_id: int) -> BlockingConnection:
        connection = self.cluster.connection(node_id)
        if node_id not in self._registered:
            connection.socket.settimeout(None)
            connection.socket.setblocking(False)
            self._selector.register(connection.socket, selectors.EVENT_READ, node_id)
            self._registered[node_id] = connection
        return connection

    def _receive(self, node_id: int) -> None:
        connection = self._registered[node_id]
        try:
            responses = connection.receive()
        except BlockingIOError:
            return
        except BrokerUnavailableError as error:
            self._connection_lost(node_id, error)
            return
        now_ms = wall_clock_ms()
        finished: list[ProducerBatch] = []
        with self.lock:
            for event in responses:
                plan = self._pending.pop((node_id, event.correlation_id))
                finished += self.finishing(self.core.plan_completed(plan, event.response, now_ms))
        self.resolve(finished)

    def _connection_lost(self, node_id: int, error: BrokerError) -> None:
        connection = self._registered.pop(node_id, None)
        if connection is not None:
            self._selector.unregister(connection.socket)
        self.cluster.drop(node_id)
        lost = [key for key in self._pending if key[0] == node_id]
        now_ms = wall_clock_ms()
        finished: list[ProducerBatch] = []
        with self.lock:
            for key in lost:
                finished += self.finishing(self.core.plan_failed(self._pending.pop(key), error, now_ms))
        self.resolve(finished)

    def finishing(self, finished: list[ProducerBatch]) -> list[ProducerBatch]:
        """Count the batches the core just finished as resolving (call under ``lock``); return them."""
        self.resolving_records += sum(batch.record_count for batch in finished)
        return finished

    def resolve(self, finished: list[ProducerBatch]) -> None:
        """Complete batches from ``finishing``: wake their futures, run or queue their callbacks, then count
        them resolved."""
        for batch in finished:
            waiter = batch.waiter
            assert isinstance(waiter, BatchDelivery)
            waiter.deliveries.completed(waiter)
        if finished:
            with self.lock:
                self.resolving_records -= sum(batch.record_count for batch in finished)
                self.changed.notify_all()


def _socket_pair() -> tuple[socket.socket, socket.socket]:
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    return reader, writer
