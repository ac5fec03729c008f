"""Confirmed publishes that share their batches are settled as one run; a run spread over batches waits for all."""

from __future__ import annotations

from mqbroker.protocols.amqp.appender import BatchStored
from mqbroker.protocols.amqp.confirm_runs import ConfirmRuns


class Settled:
    """Records what the runs settle, whether through the connection or through the callback."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int, bool]] = []

    def publish_settled_range(self, channel: int, first: int, last: int, *, stored: bool) -> None:
        self.calls.append((channel, first, last, stored))

    def confirmed(self, channel: int, first: int, last: int, stored: bool) -> None:
        self.calls.append((channel, first, last, stored))


def test_consecutive_publishes_into_one_batch_are_settled_as_one_run() -> None:
    settled, batch = Settled(), BatchStored()
    runs = ConfirmRuns(settled, settled.confirmed)  # type: ignore[arg-type]
    for sequence in (1, 2, 3):
        runs.add(1, sequence, [batch])
    runs.seal()
    assert settled.calls == []
    batch.settle(True)
    assert settled.calls == [(1, 1, 3, True)]


def test_another_batch_or_channel_starts_a_new_run() -> None:
    settled, first, second = Settled(), BatchStored(), BatchStored()
    runs = ConfirmRuns(settled, settled.confirmed)  # type: ignore[arg-type]
    runs.add(1, 1, [first])
    runs.add(1, 2, [second])
    runs.add(2, 1, [second])
    runs.seal()
    second.settle(False)
    first.settle(True)
    assert settled.calls == [(1, 2, 2, False), (2, 1, 1, False), (1, 1, 1, True)]


def test_a_run_over_several_batches_is_stored_only_if_every_batch_is() -> None:
    settled, first, second = Settled(), BatchStored(), BatchStored()
    runs = ConfirmRuns(settled, settled.confirmed)  # type: ignore[arg-type]
    runs.add(1, 1, [first, second])
    runs.seal()
    first.settle(True)
    assert settled.calls == []
    second.settle(False)
    assert settled.calls == [(1, 1, 1, False)]


def test_an_unroutable_publish_is_confirmed_at_once() -> None:
    settled = Settled()
    runs = ConfirmRuns(settled, settled.confirmed)  # type: ignore[arg-type]
    runs.add(1, 1, [])
    runs.seal()
    assert settled.calls == [(1, 1, 1, True)]
