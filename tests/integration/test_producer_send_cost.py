"""What one ``Producer.send`` costs the sending thread, counted deterministically: calls per record (issue 24).

Records go to a known topic and into an open batch (a long linger and a large batch: no batch opens or closes
among the counted sends). ``sys.setprofile`` counts, in the sending thread only, every Python call and every call
of a C function (a dict look-up, the clock, the record's encoding); the producer's I/O thread is not counted.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType

import pytest

from mqbroker.client import Admin, Producer
from tests.integration.brokerprocess import BrokerProcess

#: A keyless record: 27 calls (12 of them Python) before its encoding went to C (``BatchRecords``), its future was
#: made without Python code (``RecordSlot``), the partition count and sticky partition were looked up without a call
#: and the clock was read inline (53f32bd).
KEYLESS_SEND_CALLS_MAX = 9
#: A keyed record with a header: 47 calls (14 Python) before.
KEYED_SEND_CALLS_MAX = 10
#: Of those, Python calls: ``send`` itself and ``ProducerCore.append`` (and the key's hash for a keyed one).
KEYLESS_SEND_PYTHON_CALLS_MAX = 2
KEYED_SEND_PYTHON_CALLS_MAX = 3
COUNTED_SENDS = 2_000


def _calls_per_send(send: Callable[[], object]) -> tuple[float, float]:
    """(all calls, Python calls) per call of ``send``, a lambda around one ``Producer.send``, the lambda left out."""
    counts = {"call": 0, "c_call": 0}

    def profile(frame: FrameType, event: str, argument: object) -> None:
        if event in counts and argument is not sys.setprofile:  # (the call that ends the count)
            counts[event] += 1

    sys.setprofile(profile)
    try:
        for _ in range(COUNTED_SENDS):
            send()
    finally:
        sys.setprofile(None)
    python = counts["call"] - COUNTED_SENDS
    return (python + counts["c_call"]) / COUNTED_SENDS, python / COUNTED_SENDS


@pytest.mark.parametrize("keyed", [False, True], ids=["keyless", "keyed-with-header"])
def test_a_send_stays_within_its_call_budget(shared_broker: BrokerProcess, keyed: bool) -> None:
    topic = f"send-cost-{'keyed' if keyed else 'keyless'}"
    with Admin(shared_broker.bootstrap) as admin:
        admin.create_topics([topic], partitions=3)
    value = b"v" * 100
    key, headers = (b"user-1", [("h", b"v")]) if keyed else (None, None)
    with Producer(shared_broker.bootstrap, acks=1, linger_ms=60_000, batch_size=1_000_000) as producer:
        send = producer.send
        for _ in range(10):
            send(topic, value, key, headers)  # the topic's metadata is known, its batch open
        calls, python = _calls_per_send(lambda: send(topic, value, key, headers))
        producer.flush()
        counts = producer.delivery_counts()
    assert (counts.acknowledged, counts.failed) == (10 + COUNTED_SENDS, 0)
    assert calls <= (KEYED_SEND_CALLS_MAX if keyed else KEYLESS_SEND_CALLS_MAX)
    assert python <= (KEYED_SEND_PYTHON_CALLS_MAX if keyed else KEYLESS_SEND_PYTHON_CALLS_MAX)
