"""The publish gate of a reject-publish share queue, driven by a clock: a round per reactor turn once nothing
admitted is in flight, the oldest that fit appended as one batch, the rest rejected (and dead-lettered for -dlx)."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock

from mqbroker import errors, limits
from mqbroker.protocols.amqp.appender import BatchStored
from mqbroker.protocols.amqp.codec import BasicProperties, encode_properties
from mqbroker.protocols.amqp.queue_arguments import QueuePolicy
from mqbroker.protocols.amqp.share_admission import PublishGate


class FakeAppender:
    """Collects appended bodies; one BatchStored per turn, settled by the test."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.batches: list[BatchStored] = []

    def append(self, timestamp_ms: int, exchange: str, routing_key: str, properties_raw: bytes, body: bytes,
               expiration: str | None, extra_headers: Any = ()) -> BatchStored:
        if not self.batches or self.batches[-1].outcome is not None:
            self.batches.append(BatchStored())
        self.bodies.append(body)
        return self.batches[-1]

    def drained(self) -> Deferred[None]:
        return succeed(None)


class FakeHost:
    def __init__(self) -> None:
        self.reactor = Clock()
        self.dead: list[tuple[str, bytes, str]] = []

    def now_ms(self) -> int:
        return int(self.reactor.seconds() * 1000)

    def republish_dead(self, queue: str, policy: QueuePolicy, message: Any, reason: Any) -> list[BatchStored]:
        self.dead.append((queue, message.payload.body, reason.value))
        return []


def _gate(overflow: str, max_length: int, counts: list[Any]) -> tuple[PublishGate, FakeHost, FakeAppender, list]:
    host, appender, asked = FakeHost(), FakeAppender(), []
    policy = QueuePolicy.from_arguments({"x-queue-type": "share", "x-overflow": overflow, "x-max-length": max_length,
                                         "x-dead-letter-exchange": "dlx"})

    async def count_ready() -> int:
        asked.append(True)
        answer = counts.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return await answer if isinstance(answer, Deferred) else answer

    return PublishGate(host, "q", policy, appender, count_ready), host, appender, asked  # type: ignore[arg-type]


def _publish(gate: PublishGate, body: bytes, properties_raw: bytes = b"\x00\x00") -> BatchStored:
    return gate.append(0, "", "q", properties_raw, body, None)


def test_a_round_appends_the_oldest_that_fit_and_rejects_the_rest() -> None:
    gate, host, appender, asked = _gate("reject-publish", 3, [1])
    rounds = [_publish(gate, body) for body in (b"a", b"b", b"c")]
    assert len(set(map(id, rounds))) == 1 and rounds[0].size == 3  # one round for the turn
    host.reactor.advance(0)
    assert appender.bodies == [b"a", b"b"] and rounds[0].admitted == 2 and rounds[0].outcome is None
    appender.batches[-1].settle(True)
    assert rounds[0].outcome is True and host.dead == []  # reject-publish: no dead letters


def test_publishes_during_a_round_or_while_admitted_ones_land_wait_for_the_next_round() -> None:
    pending: Deferred[int] = Deferred()
    gate, host, appender, asked = _gate("reject-publish", 5, [pending, 2])
    first = _publish(gate, b"a")
    host.reactor.advance(0)
    later = _publish(gate, b"b")  # joins the open round: it is judged with it
    assert later is first
    pending.callback(0)
    assert appender.bodies == [b"a", b"b"]
    third = _publish(gate, b"c")
    host.reactor.advance(0)
    assert len(asked) == 1  # a and b are not in the log yet: the next count waits for them
    appender.batches[-1].settle(True)
    assert len(asked) == 2 and third.admitted == 1 and appender.bodies == [b"a", b"b", b"c"]


def test_reject_publish_dlx_dead_letters_the_rejected_unless_they_died_here_before() -> None:
    gate, host, appender, _ = _gate("reject-publish-dlx", 1, [0])
    cycled = encode_properties(BasicProperties(headers={"x-death": [{"queue": "q", "reason": "maxlen", "count": 1}]}))
    judged = _publish(gate, b"kept")
    _publish(gate, b"dead")
    _publish(gate, b"cycled", cycled)
    host.reactor.advance(0)
    assert appender.bodies == [b"kept"] and host.dead == [("q", b"dead", "maxlen")]
    appender.batches[-1].settle(True)
    assert judged.admitted == 1 and judged.outcome is True


def test_a_count_that_fails_is_asked_again_through_a_failover() -> None:
    moving = errors.CoordinatorNotAvailableError("moving")
    gate, host, appender, asked = _gate("reject-publish", 4, [moving, moving, 0])
    judged = _publish(gate, b"a")
    host.reactor.advance(0)
    host.reactor.pump([limits.amqp_admission_retry_ms / 1000] * 2)
    assert len(asked) == 3 and judged.admitted == 1 and appender.bodies == [b"a"]


def test_a_count_that_keeps_failing_rejects_the_round_without_dead_letters_and_the_next_round_asks_again() -> None:
    failures: list[Any] = [errors.CoordinatorNotAvailableError("gone")] * 100
    gate, host, appender, asked = _gate("reject-publish-dlx", 4, failures)
    failed = _publish(gate, b"a")
    host.reactor.advance(0)
    while failed.outcome is None:
        host.reactor.advance(limits.amqp_admission_retry_ms / 1000)
    assert host.reactor.seconds() * 1000 >= limits.reroute_ms_max - 1  # asked again for that long
    assert failed.admitted == 0 and appender.bodies == [] and host.dead == []
    failures[:] = [0]
    retried = _publish(gate, b"b")
    host.reactor.advance(0)
    assert retried.admitted == 1 and appender.bodies == [b"b"]


def test_drained_waits_for_the_verdict_and_abandon_rejects_what_waits() -> None:
    gate, host, appender, _ = _gate("reject-publish", 4, [0])
    judged = _publish(gate, b"a")
    drained = Deferred.fromCoroutine(gate.drained())
    host.reactor.advance(0)
    assert not drained.called
    appender.batches[-1].settle(True)
    assert drained.called
    waiting = _publish(gate, b"b")
    gate.abandon()
    assert waiting.admitted == 0 and waiting.outcome is True and judged.admitted == 1
