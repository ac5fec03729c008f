"""One connection's action lists, carried out in order (``server.py``).

A list headed by a blocking ``StoreSession`` waits, with every list queued behind it, until the session's state is
durable (``SessionWrites``: persist before send). A list handed over while another runs (the PUBACKs of an append
that completed at once, a delivery to the same session) runs after it in the same pass, and the connection's
socket is written once the pass ends. Nearly every list comes when nothing waits: it runs at once, without a pass
over the queue, which a paced message pays several times per wake of the reactor.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from mqbroker.protocols.mqtt.actions import Action, StoreSession
from mqbroker.protocols.mqtt.session_writes import SessionWrites


class ActionQueue:
    """Runs a connection's action lists in order with ``execute``, then ``flush``es its socket."""

    __slots__ = ("_writes", "_execute", "_flush", "_queue", "_executing")

    def __init__(self, writes: SessionWrites, execute: Callable[[list[Action]], None],
                 flush: Callable[[], None]) -> None:
        self._writes = writes
        self._execute = execute
        self._flush = flush
        self._queue: deque[list[Action]] = deque()
        self._executing = False

    def run(self, actions: list[Action]) -> None:
        """Carry ``actions`` out after what is queued (at once if nothing is)."""
        if self._executing:
            if actions:
                self._queue.append(actions)
            return
        if not self._queue:
            if not actions:
                self._flush()
                return
            head = actions[0]
            if self._writes.held is None and (type(head) is not StoreSession or not head.blocking):
                self._executing = True
                try:
                    self._execute(actions)
                    if self._queue:  # what it handed over meanwhile
                        self._drain_queue()
                finally:
                    self._executing = False
                self._flush()
                return
        if actions:
            self._queue.append(actions)
        self.drain()

    def run_held(self, held: list[list[Action]] | None) -> None:
        """The blocking write that held ``held`` is durable: carry them out, then what queued behind them."""
        if held:
            self._executing = True
            try:
                for actions in held:
                    self._execute(actions)
            finally:
                self._executing = False
        self._writes.store_later_if_changed()
        self.drain()

    def drain(self) -> None:
        """Carry out what is queued and may go now; write the socket."""
        self._executing = True
        try:
            self._drain_queue()
        finally:
            self._executing = False
        self._flush()

    def _drain_queue(self) -> None:
        writes, queue = self._writes, self._queue
        while queue and writes.held is None:
            for actions in queue:  # a loop, not a call per list: the PUBACKs of an append that completed at once
                head = actions[0]
                if type(head) is StoreSession and head.blocking:
                    break  # a list that must wait for the session's state to be durable
            else:
                self._execute(queue.popleft())
                continue
            if writes.writing:
                return  # a non-blocking write is in flight: the blocking one follows it (``run_held``)
            held = list(queue)
            queue.clear()
            writes.hold(held)
