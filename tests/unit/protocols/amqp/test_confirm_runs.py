"""Confirmed publishes that share their batches are settled as one run; a run spread over batches waits for all."""

from __future__ import annotations

from mqbroker.protocols.amqp.appender import AdmittedBatch, BatchStored
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


def _judged(size: int) -> AdmittedBatch:
    batch = AdmittedBatch()
    batch.size = size
    return batch


def test_a_run_through_an_admission_round_is_acked_as_far_as_the_round_took_it() -> None:
    settled, judged = Settled(), AdmittedBatch()
    runs = ConfirmRuns(settled, settled.confirmed)  # type: ignore[arg-type]
    for sequence in (1, 2, 3, 4, 5):
        judged.size += 1  # the gate counts each publish as it joins the round
        runs.add(1, sequence, [judged])
    runs.seal()
    judged.admitted = 3
    judged.settle(True)
    assert settled.calls == [(1, 1, 3, True), (1, 4, 5, False)]


def test_another_channels_publish_in_the_same_round_splits_the_run() -> None:
    settled, judged = Settled(), AdmittedBatch()
    runs = ConfirmRuns(settled, settled.confirmed)  # type: ignore[arg-type]
    for channel, sequence in ((1, 1), (2, 1), (1, 2), (1, 3)):
        judged.size += 1
        runs.add(channel, sequence, [judged])
    runs.seal()
    judged.admitted = 2  # round numbers 0 and 1 taken: channel 1's first and channel 2's
    judged.settle(True)
    assert sorted(settled.calls) == [(1, 1, 1, True), (1, 2, 3, False), (2, 1, 1, True)]


def test_a_publish_to_a_full_and_a_free_queue_is_nacked_and_one_both_took_is_acked() -> None:
    settled, judged, plain = Settled(), AdmittedBatch(), BatchStored()
    runs = ConfirmRuns(settled, settled.confirmed)  # type: ignore[arg-type]
    for sequence in (1, 2):
        judged.size += 1
        runs.add(1, sequence, [judged, plain])
    runs.seal()
    judged.admitted = 1
    judged.settle(True)
    assert settled.calls == []
    plain.settle(True)
    assert settled.calls == [(1, 1, 1, True), (1, 2, 2, False)]


def test_a_round_that_took_nothing_nacks_its_run_and_a_refused_append_nacks_what_it_took() -> None:
    settled, rejected, refused = Settled(), _judged(2), _judged(2)
    runs = ConfirmRuns(settled, settled.confirmed)  # type: ignore[arg-type]
    runs.add(1, 1, [rejected])
    runs.seal()
    runs.add(1, 2, [refused])
    runs.seal()
    rejected.settle(True)  # admitted 0: nothing was appended
    refused.admitted = 2
    refused.settle(False)
    assert settled.calls == [(1, 1, 1, False), (1, 2, 2, False)]


def test_a_range_of_publishes_appended_together_joins_the_open_run_and_is_settled_with_it() -> None:
    settled, batch = Settled(), BatchStored()
    runs = ConfirmRuns(settled, settled.confirmed)  # type: ignore[arg-type]
    runs.add(1, 1, [batch])
    runs.add(1, 2, [batch], 5)  # a run of four (vhost.store_run)
    runs.add(1, 6, [batch])
    runs.seal()
    batch.settle(True)
    assert settled.calls == [(1, 1, 6, True)]
