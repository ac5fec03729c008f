"""When a persistent session's state is written to ``__mqtt_sessions``, for one connection (``server.py``).

At most one write is in flight, and each writes the state as of its start. A blocking write (a
``StoreSession`` at the head of an action list) holds every action list queued behind it until it is
durable; a non-blocking change (losing it in a crash costs a redelivery only) is written within
``limits.mqtt_session_store_interval_ms`` of the last write while the actions run on. What must
follow the write in flight (the final state at disconnect or takeover) waits for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.python.failure import Failure

from mqbroker import limits
from mqbroker.protocols.mqtt.actions import Action


class SessionWrites:
    """One connection's session writes: ``write`` starts one (of the state as of now), ``written`` hears how it
    ended with the action lists it held, ``may_write`` says whether a timed write may still start."""

    def __init__(self, reactor: IReactorTime, now_ms: Callable[[], int], write: Callable[[], Deferred[Any]],
                 written: Callable[[list[list[Action]] | None, Failure | None], None],
                 may_write: Callable[[], bool]) -> None:
        self._reactor = reactor
        self._now_ms = now_ms
        self._write = write
        self._written = written
        self._may_write = may_write
        #: The action lists waiting for the blocking write in flight (None: none is).
        self.held: list[list[Action]] | None = None
        #: A write is in flight (at most one is), and what waits for it to end.
        self.writing = False
        self._after_write: list[Callable[[], None]] = []
        #: The state changed since the last write began (a non-blocking store), and the timer that writes it.
        self._unstored = False
        self._timer: IDelayedCall | None = None
        self._last_write_ms = 0

    def hold(self, lists: list[list[Action]]) -> None:
        """Write now, and run ``lists`` (headed by a blocking store) once it is durable (``written``)."""
        self.held = lists
        self._start()

    def store_later(self) -> None:
        """The state changed in a way a crash may lose at the cost of a redelivery: write it within
        ``limits.mqtt_session_store_interval_ms`` (sooner if a blocking write comes first)."""
        self._unstored = True
        if self._timer is None and not self.writing:
            delay_ms = max(0, self._last_write_ms + limits.mqtt_session_store_interval_ms - self._now_ms())
            self._timer = self._reactor.callLater(delay_ms / 1000.0, self._store_now)

    def store_later_if_changed(self) -> None:
        """After a write: what changed while it was in flight is written within the interval."""
        if self._unstored and self._may_write():
            self.store_later()

    def after_write(self, step: Callable[[], None]) -> None:
        """Run ``step`` once the write in flight has ended (at once if none is); no timed write starts any more."""
        self._cancel_timer()
        self._unstored = False
        if self.writing:  # the final record goes after the one in flight, never before it
            self._after_write.append(step)
        else:
            step()

    def _store_now(self) -> None:
        self._timer = None
        if self._unstored and not self.writing and self._may_write():
            self._start()

    def _start(self) -> None:
        assert not self.writing
        self._cancel_timer()
        self.writing, self._unstored, self._last_write_ms = True, False, self._now_ms()
        self._write().addBoth(self._ended)

    def _ended(self, result: Any) -> None:
        self.writing = False
        held, self.held = self.held, None
        after, self._after_write = self._after_write, []
        for step in after:
            step()
        self._written(held, result if isinstance(result, Failure) else None)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            if self._timer.active():
                self._timer.cancel()
            self._timer = None
