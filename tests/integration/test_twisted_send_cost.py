"""What one ``TwistedProducer.send`` costs the reactor thread, counted deterministically: calls per record (issue 24).

Records go to a known topic and into an open batch (a long linger and a large batch). ``sys.setprofile`` counts every
Python call and every call of a C function: for the sends themselves, and for the flush that sends the batch and fires
every record's Deferred (its request and reply, shared by all the records, add well under a call per record).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.task import deferLater

from mqbroker.client import Admin, RecordMetadata
from mqbroker.client.twisted import TwistedProducer
from tests.integration.brokerprocess import BrokerProcess

#: A keyless record: 30 calls (20 of them Python) when each send ran a coroutine behind ``Deferred.fromCoroutine``
#: (40e86f7).
SEND_CALLS_MAX = 10
#: Of those, Python calls: ``send``, ``ProducerCore.append`` and the Deferred's ``__init__``.
SEND_PYTHON_CALLS_MAX = 3
#: Firing a record's Deferred when its batch is acknowledged (the flush's request and reply included): 24.2 calls
#: (11.1 Python) when each resumed its coroutine (40e86f7).
DELIVERY_CALLS_MAX = 8
DELIVERY_PYTHON_CALLS_MAX = 3
COUNTED_SENDS = 2_000


class _Counts:
    """Calls (Python and C) counted by ``sys.setprofile`` meanwhile, but for this module's own and the call that
    switches the count off."""

    def __init__(self) -> None:
        self.python = self.c = 0

    def _profile(self, frame: FrameType, event: str, argument: object) -> None:
        if event == "call":
            self.python += frame.f_code.co_filename != __file__
        elif event == "c_call" and argument is not sys.setprofile:
            self.c += 1

    def __enter__(self) -> _Counts:
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *_: object) -> None:
        sys.setprofile(None)


def _send_all(send: Callable[[], Deferred[Any]], count: int) -> list[Deferred[Any]]:
    return [send() for _ in range(count)]


@pytest_twisted.ensureDeferred
async def test_a_twisted_send_and_its_delivery_stay_within_their_call_budgets(shared_broker: BrokerProcess) -> None:
    topic = "twisted-send-cost"
    with Admin(shared_broker.bootstrap) as admin:
        admin.create_topics([topic], partitions=3)
    producer = TwistedProducer(reactor, shared_broker.bootstrap, acks=1, linger_ms=60_000, batch_size=1_000_000)
    value = b"v" * 100
    warming = gatherResults([producer.send(topic, value) for _ in range(10)])  # metadata and producer id known
    while not warming.called:  # (a flush does not wait for sends still waiting for metadata)
        await producer.flush()
        await deferLater(reactor, 0.01, lambda: None)
    producer.send(topic, value)  # the batch the counted records join is open
    with _Counts() as sends:
        sent = _send_all(lambda: producer.send(topic, value), COUNTED_SENDS)
    outcomes: list[RecordMetadata] = []
    for delivered in sent:
        delivered.addCallback(outcomes.append)
    with _Counts() as delivery:
        await producer.flush()
    await producer.close()
    assert len(outcomes) == COUNTED_SENDS
    assert [metadata.offset for metadata in outcomes] == list(range(outcomes[0].offset, outcomes[0].offset + COUNTED_SENDS))
    delivery.python -= COUNTED_SENDS  # ``outcomes.append`` is a C call: the test's own callbacks leave no Python
    delivery.c -= COUNTED_SENDS
    per_record = {name: round(calls / COUNTED_SENDS, 1) for name, calls in [
        ("send", sends.python + sends.c), ("send python", sends.python),
        ("delivery", delivery.python + delivery.c), ("delivery python", delivery.python)]}
    assert per_record["send"] <= SEND_CALLS_MAX, per_record
    assert per_record["send python"] <= SEND_PYTHON_CALLS_MAX, per_record
    assert per_record["delivery"] <= DELIVERY_CALLS_MAX, per_record
    assert per_record["delivery python"] <= DELIVERY_PYTHON_CALLS_MAX, per_record
