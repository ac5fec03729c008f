"""Push subscriptions against a real broker and a real HTTP endpoint (a twisted.web server in this test).

The endpoint checks every request's HMAC signature itself (hashlib, not the broker's helper) and
misbehaves on purpose: it answers 500 to a record's first attempt, hangs past the ack deadline,
drops the connection, answers slowly, and always fails one poison record. Every other record is
acknowledged (a 2xx answered) exactly once, the retries back off within their bounds, the poison
record lands in the dead-letter topic with its origin, and a subscription whose endpoint never
answers delays nobody else.
"""

from __future__ import annotations

import hashlib
import hmac
import pathlib
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from mqbroker.client import Consumer
from mqbroker.client.share_admin import ShareGroupAdmin
from mqbroker.records import dead_letters
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.share_support import create_topic, produce

SECRET = "test-signing-secret"
ACK_DEADLINE_MS = 1_000
BACKOFF_INITIAL_MS = 200
BACKOFF_MAX_MS = 800
ATTEMPTS_MAX = 5
#: Scheduling slack on top of a backoff bound: the broker's pump, the POST and this reactor on a loaded machine.
SLACK_S = 1.5


@pytest.fixture
def broker(tmp_path: pathlib.Path) -> Iterator[BrokerProcess]:
    """A single broker, killed at the end."""
    process = BrokerProcess(data_dir=tmp_path / "data")
    process.start()
    yield process
    process.kill()


class Endpoint(Resource):
    """Answers POSTs by the record's value: ``ok``, ``flaky`` (500 first), ``hang`` (no answer first),
    ``close`` (connection dropped first), ``slow`` (answers after 300 ms), ``poison`` (always 500)."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        #: (offset, attempt, value, monotonic time, status or None) of every request.
        self.requests: list[tuple[int, int, bytes, float, int | None]] = []
        self.bad_signatures: list[int] = []
        self.hanging: list[Request] = []

    def render_POST(self, request: Request) -> Any:  # noqa: N802 (twisted.web's name)
        body = request.content.read()
        timestamp = request.getHeader("X-MQ-Timestamp") or ""
        expected = "v1=" + hmac.new(SECRET.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
        offset = int(request.getHeader("X-MQ-Offset") or -1)
        attempt = int(request.getHeader("X-MQ-Attempt") or 0)
        if not hmac.compare_digest(expected, request.getHeader("X-MQ-Signature") or ""):
            self.bad_signatures.append(offset)
            request.setResponseCode(401)
            return b""
        kind = body.split(b"-")[0]
        now = time.monotonic()
        first = attempt == 1
        if kind == b"hang" and first:
            self.requests.append((offset, attempt, body, now, None))
            self.hanging.append(request)
            request.notifyFinish().addBoth(lambda _: self.hanging.remove(request))  # the broker gave up on it
            return NOT_DONE_YET
        if kind == b"close" and first:
            self.requests.append((offset, attempt, body, now, None))
            request.transport.abortConnection()
            return NOT_DONE_YET
        if kind == b"slow":
            self.requests.append((offset, attempt, body, now, 200))
            deferLater(reactor, 0.3, lambda: (request.finish() if not request.finished else None))
            return NOT_DONE_YET
        status = 500 if kind == b"poison" or (kind == b"flaky" and first) else 200  # ok, okay, and retries
        self.requests.append((offset, attempt, body, now, status))
        request.setResponseCode(status)
        return b"ok" if status == 200 else b"try again"


class Stuck(Resource):
    """An endpoint that never answers (the broker gives up on each request at the ack deadline)."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.received = 0
        self.open = 0
        self.open_max = 0

    def render_POST(self, request: Request) -> Any:  # noqa: N802
        self.received += 1
        self.open += 1
        self.open_max = max(self.open_max, self.open)
        request.notifyFinish().addBoth(self._closed)
        return NOT_DONE_YET

    def _closed(self, _: Any) -> None:
        self.open -= 1


async def _serve(resource: Resource) -> Any:
    return await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(Site(resource))


def _subscribe(bootstrap: str, name: str, topic: str, port: int, **options: Any) -> str:
    with ShareGroupAdmin(bootstrap) as admin:
        return admin.create_subscription(name, topic, endpoint=f"http://127.0.0.1:{port}/push", secret=SECRET,
                                         start="earliest", ack_deadline_ms=ACK_DEADLINE_MS, **options)


def _dead_letters(bootstrap: str, topic: str, count: int) -> list[Any]:
    with Consumer(bootstrap, topics=[topic], auto_offset_reset="earliest") as reader:
        letters: list[Any] = []
        deadline = time.monotonic() + 20
        while len(letters) < count and time.monotonic() < deadline:
            letters += reader.poll(0.5)
        return letters


@pytest_twisted.ensureDeferred
async def test_push_delivers_each_record_once_through_failures_and_dead_letters_the_poison(
    broker: BrokerProcess,
) -> None:
    endpoint, stuck = Endpoint(), Stuck()
    port = await _serve(endpoint)
    stuck_port = await _serve(stuck)
    try:
        await deferToThread(create_topic, broker.bootstrap, "payments", 1)
        await deferToThread(create_topic, broker.bootstrap, "payments.dlq", 1)
        await deferToThread(_subscribe, broker.bootstrap, "stuck-push", "payments", stuck_port.getHost().port,
                            max_outstanding=4)
        await deferToThread(_subscribe_with_backoff, broker.bootstrap, port.getHost().port)
        values = [b"%s-%d" % (kind, n) for n in range(40) for kind in (b"ok", b"flaky", b"okay", b"slow")]
        values[10:10] = [b"hang-0", b"close-0", b"poison-0", b"hang-1", b"close-1"]
        await deferToThread(produce, broker.bootstrap, "payments", values)

        def answered_ok() -> Counter[bytes]:
            return Counter(value for _, _, value, _, status in endpoint.requests if status == 200)

        deadline = time.monotonic() + 60
        while set(answered_ok()) != set(values) - {b"poison-0"} or not _poison_done(endpoint):
            assert time.monotonic() < deadline, (sorted(set(values) - set(answered_ok())), endpoint.requests[-5:])
            await deferLater(reactor, 0.1, lambda: None)
        await deferLater(reactor, 1.0, lambda: None)  # anything delivered twice would show by now

        assert endpoint.bad_signatures == []
        assert max(answered_ok().values()) == 1, "a record was acknowledged (answered 2xx) twice"
        attempts: dict[bytes, list[tuple[int, float]]] = defaultdict(list)
        for _, attempt, value, at, _ in endpoint.requests:
            attempts[value].append((attempt, at))
        for value in (b"hang-0", b"close-0", b"flaky-3", b"hang-1"):
            assert [attempt for attempt, _ in attempts[value]] == [1, 2], value
        hang_gap = attempts[b"hang-0"][1][1] - attempts[b"hang-0"][0][1]
        assert hang_gap >= ACK_DEADLINE_MS / 1000 * 0.9  # retried only once the deadline passed
        poison = attempts[b"poison-0"]
        assert [attempt for attempt, _ in poison] == list(range(1, ATTEMPTS_MAX + 1))
        gaps = [later - earlier for (_, earlier), (_, later) in zip(poison, poison[1:])]
        for number, gap in enumerate(gaps, start=1):  # full jitter: uniform in [0, min(max, initial * 2^(n-1))]
            assert gap <= min(BACKOFF_MAX_MS, BACKOFF_INITIAL_MS * 2 ** (number - 1)) / 1000 + SLACK_S, gaps
        assert sum(gaps) > 0.05, gaps  # the retries waited (four draws all under ~12 ms: p < 1e-7)

        letters = await deferToThread(_dead_letters, broker.bootstrap, "payments.dlq", 1)
        assert [letter.value for letter in letters] == [b"poison-0"]
        headers = dict(letters[0].headers)
        assert (headers[dead_letters.HEADER_TOPIC], headers[dead_letters.HEADER_ATTEMPTS],
                headers[dead_letters.HEADER_REASON], headers[dead_letters.HEADER_GROUP]) == (
            b"payments", str(ATTEMPTS_MAX).encode(), b"delivery_limit", b"payments-push")
        assert b"HTTP 500" in headers[dead_letters.HEADER_ERROR]
        # The stuck subscription kept at most its four requests open, retried them, and held up nobody.
        assert stuck.received > 4 and stuck.open_max == 4
        described = await deferToThread(_describe, broker.bootstrap, "payments-push")
        assert described.partitions[0].lag == 0 and described.dead_lettered == 1
        assert described.configs["push.secret"] == "********"
    finally:
        for request in list(endpoint.hanging):
            request.finish()
        await port.stopListening()
        await stuck_port.stopListening()


def _subscribe_with_backoff(bootstrap: str, port: int) -> None:
    with ShareGroupAdmin(bootstrap) as admin:
        admin.create_subscription("payments-push", "payments", endpoint=f"http://127.0.0.1:{port}/push", secret=SECRET,
                                  start="earliest", ack_deadline_ms=ACK_DEADLINE_MS, max_outstanding=8,
                                  max_delivery_attempts=ATTEMPTS_MAX, dead_letter_topic="payments.dlq")
        admin.alter("payments-push", set_configs={"push.backoff.initial.ms": str(BACKOFF_INITIAL_MS),
                                                  "push.backoff.max.ms": str(BACKOFF_MAX_MS)})


def _describe(bootstrap: str, group: str) -> Any:
    with ShareGroupAdmin(bootstrap) as admin:
        return admin.describe(group)


def _poison_done(endpoint: Endpoint) -> bool:
    return sum(1 for _, _, value, _, _ in endpoint.requests if value == b"poison-0") >= ATTEMPTS_MAX
