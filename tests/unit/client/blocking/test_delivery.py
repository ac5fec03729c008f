"""Where and how often the blocking producer's delivery callbacks run: on the I/O thread or in poll()."""

from __future__ import annotations

import logging
import threading

import pytest

from mqbroker.client.blocking.delivery import IMMEDIATE, POLL, Deliveries


def _on_thread(name: str, work: object) -> None:
    thread = threading.Thread(target=work, name=name)  # type: ignore[arg-type]
    thread.start()
    thread.join(10)


def test_immediate_callbacks_run_once_on_the_thread_that_completes_the_batch() -> None:
    deliveries = Deliveries(IMMEDIATE)
    delivery = deliveries.new_batch()
    ran: list[str] = []
    deliveries.add(delivery, lambda: ran.append(threading.current_thread().name))
    assert ran == []
    _on_thread("io", lambda: deliveries.completed(delivery))
    assert ran == ["io"] and delivery.event.is_set()
    deliveries.add(delivery, lambda: ran.append(threading.current_thread().name))  # already done: at once, here
    assert ran == ["io", threading.current_thread().name]
    assert deliveries.run_queued() == 0


def test_poll_callbacks_wait_for_run_queued_and_run_in_the_polling_thread() -> None:
    deliveries = Deliveries(POLL)
    delivery = deliveries.new_batch()
    ran: list[str] = []
    deliveries.add(delivery, lambda: ran.append(threading.current_thread().name))
    _on_thread("io", lambda: deliveries.completed(delivery))
    assert ran == [] and deliveries.queued == 1
    deliveries.add(delivery, lambda: ran.append(threading.current_thread().name))  # done already: queued too
    polled: list[int] = []
    _on_thread("application", lambda: polled.append(deliveries.run_queued()))
    assert polled == [2] and ran == ["application", "application"]
    assert deliveries.run_queued() == 0


def test_run_queued_waits_up_to_its_timeout_for_a_callback() -> None:
    deliveries = Deliveries(POLL)
    delivery = deliveries.new_batch()
    deliveries.add(delivery, lambda: None)
    timer = threading.Timer(0.05, deliveries.completed, args=(delivery,))
    timer.start()
    assert deliveries.run_queued(timeout=10) == 1
    timer.join()
    assert deliveries.run_queued(timeout=0.01) == 0


def test_a_failing_poll_callback_propagates_and_the_ones_after_it_stay_queued() -> None:
    deliveries = Deliveries(POLL)
    delivery = deliveries.new_batch()
    ran: list[int] = []

    def fail() -> None:
        raise ValueError("application bug")

    deliveries.add(delivery, fail)
    deliveries.add(delivery, lambda: ran.append(2))
    deliveries.completed(delivery)
    with pytest.raises(ValueError):
        deliveries.run_queued()
    assert ran == [] and deliveries.run_queued() == 1 and ran == [2]


def test_a_failing_immediate_callback_is_logged_and_the_others_still_run(caplog: pytest.LogCaptureFixture) -> None:
    deliveries = Deliveries(IMMEDIATE)
    delivery = deliveries.new_batch()
    ran: list[int] = []
    deliveries.add(delivery, lambda: 1 / 0)  # type: ignore[arg-type,func-returns-value]
    deliveries.add(delivery, lambda: ran.append(2))
    with caplog.at_level(logging.ERROR, logger="mqbroker.client.blocking.delivery"):
        deliveries.completed(delivery)
    assert ran == [2] and "delivery callback raised" in caplog.text


def test_callbacks_added_while_batches_complete_each_run_exactly_once() -> None:
    """A callback added as its batch completes on another thread is neither lost nor run twice."""
    deliveries = Deliveries(IMMEDIATE)
    batches = [deliveries.new_batch() for _ in range(2000)]
    counts = [0] * len(batches)
    lock = threading.Lock()

    def count(index: int) -> None:
        with lock:
            counts[index] += 1

    completer = threading.Thread(target=lambda: [deliveries.completed(batch) for batch in batches])
    completer.start()
    for index, batch in enumerate(batches):
        deliveries.add(batch, lambda index=index: count(index))
    completer.join(10)
    assert counts == [1] * len(batches)


def test_an_unknown_mode_is_refused_naming_the_modes() -> None:
    with pytest.raises(ValueError, match="immediate, poll"):
        Deliveries("sometimes")
