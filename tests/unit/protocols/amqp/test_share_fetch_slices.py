"""How an AMQP share queue's consumer asks its share group for records: a reopened prefetch window is refilled by
fetches of at most ``FETCH_SLICE_RECORDS`` records (answered together by one state write, so the client gets the
first slice while the broker decodes and sends the rest), never more in flight than the window and
``FETCHES_IN_FLIGHT_MAX`` allow, with the consumer's settlements on the first of them."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock

from mqbroker.protocols.amqp.actions import Outcome
from mqbroker.protocols.amqp.queues import Consumer
from mqbroker.protocols.amqp.share_consumers import FETCH_SLICE_RECORDS, FETCHES_IN_FLIGHT_MAX
from mqbroker.protocols.amqp.share_queue import ShareQueue
from mqbroker.protocols.amqp.stored import QueueDeclaration
from mqbroker.shares import messages as share


class FakeGroups:
    """The share-group calls a queue makes; fetches wait until the test answers them."""

    def __init__(self) -> None:
        self.fetches: list[tuple[share.ShareFetchRequest, Deferred[share.ShareFetchResponse]]] = []

    def create_share_group(self, *_: Any) -> Deferred[None]:
        return succeed(None)

    def share_group_heartbeat(self, _: Any, request: share.ShareHeartbeatRequest) -> Deferred[Any]:
        return succeed(share.ShareHeartbeatResponse(member_id="m", member_epoch=1, heartbeat_interval_ms=60_000,
                                                    assignment=()))

    def share_fetch(self, _: Any, request: share.ShareFetchRequest) -> Deferred[share.ShareFetchResponse]:
        answer: Deferred[share.ShareFetchResponse] = Deferred()
        self.fetches.append((request, answer))
        return answer


class FakeHost:
    def __init__(self) -> None:
        self.reactor = Clock()
        self.broker = FakeGroups()
        self.principal = None

    def now_ms(self) -> int:
        return int(self.reactor.seconds() * 1000)


class FakeSession:
    """A consumer's session with a prefetch window of ``window`` free deliveries."""

    session_id = 1

    def __init__(self, window: int) -> None:
        self.window = window

    def delivery_window(self, channel: int, tag: str) -> int:
        return self.window


def _consuming(window: int) -> tuple[ShareQueue, FakeHost, FakeSession]:
    host, session = FakeHost(), FakeSession(window)
    queue = ShareQueue(host, QueueDeclaration(name="q", arguments={"x-queue-type": "share"}), None)  # type: ignore[arg-type]
    queue.add_consumer(Consumer(session=session, channel=1, tag="c", no_ack=False))  # type: ignore[arg-type]
    return queue, host, session


def _sizes(host: FakeHost) -> list[int]:
    return [request.records_max for request, _ in host.broker.fetches]


def test_a_whole_window_is_asked_for_in_slices() -> None:
    _, host, _ = _consuming(1_000)
    assert _sizes(host) == [FETCH_SLICE_RECORDS] * (1_000 // FETCH_SLICE_RECORDS)


def test_a_window_not_a_multiple_of_the_slice_ends_with_a_smaller_fetch() -> None:
    _, host, _ = _consuming(FETCH_SLICE_RECORDS + 7)
    assert _sizes(host) == [FETCH_SLICE_RECORDS, 7]


def test_no_more_fetches_than_the_maximum_are_in_flight() -> None:
    _, host, _ = _consuming(FETCH_SLICE_RECORDS * (FETCHES_IN_FLIGHT_MAX + 3))
    assert _sizes(host) == [FETCH_SLICE_RECORDS] * FETCHES_IN_FLIGHT_MAX


def test_settlements_ride_on_the_first_slice_only() -> None:
    queue, host, session = _consuming(2 * FETCH_SLICE_RECORDS)
    queue._holders.update(dict.fromkeys(range(10), (1, 1, "c")))  # delivered earlier, unsettled
    session.window += FETCH_SLICE_RECORDS + 10
    host.broker.fetches.clear()
    queue.settle(list(range(10)), Outcome.ACK)  # fetches are in flight: the next ones start at the turn's end
    host.reactor.advance(0)
    [(first, _), (second, _)] = host.broker.fetches
    assert (first.records_max, second.records_max) == (FETCH_SLICE_RECORDS, 10)
    assert [(ack.first_offset, ack.last_offset) for ack in first.acknowledgements] == [(0, 9)]
    assert second.acknowledgements == ()


def test_after_an_empty_answer_the_window_is_asked_for_in_one_fetch() -> None:
    _, host, _ = _consuming(4 * FETCH_SLICE_RECORDS)
    for _, answer in list(host.broker.fetches):  # the long polls end with nothing leased
        answer.callback(share.ShareFetchResponse(partitions=(), acknowledgements=()))
    host.reactor.advance(0)
    assert _sizes(host)[4:] == [4 * FETCH_SLICE_RECORDS]
