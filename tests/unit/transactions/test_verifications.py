"""Leaders' verifications waiting for their partitions: answered when they pass, fail otherwise, or expire."""

from __future__ import annotations

from mqbroker.errors import InvalidTxnStateError, ProducerFencedError
from mqbroker.groups.model import TopicPartition
from mqbroker.transactions.messages import AddPartitionsRequest
from mqbroker.transactions.verifications import WaitingVerifications

REQUEST = AddPartitionsRequest(transactional_id="t", producer_id=7, producer_epoch=0,
                               partitions=frozenset({TopicPartition("events", 0)}), verify_only=True)


def _not_listed(request: AddPartitionsRequest) -> None:
    raise InvalidTxnStateError("not listed yet")


def test_a_verification_waits_until_it_passes_or_its_deadline() -> None:
    waits = WaitingVerifications(wait_ms=100, per_id_max=2)
    assert waits.wait(REQUEST, "a", now_ms=0) and waits.wait(REQUEST, "b", now_ms=50)
    assert not waits.wait(REQUEST, "c", now_ms=50)  # the id has as many waiting as it may
    assert sorted(waits.deadlines_ms()) == [100, 150] and waits.ids() == ["t"]
    assert waits.recheck("t", 99, _not_listed) == []
    (expired,) = waits.recheck("t", 100, _not_listed)
    assert expired.request_key == "a" and isinstance(expired.error, InvalidTxnStateError)
    (passed,) = waits.recheck("t", 120, lambda request: None)
    assert passed.request_key == "b" and passed.error is None and waits.request_keys() == []


def test_a_fenced_producer_s_verification_fails_at_once_and_waiting_can_be_off() -> None:
    waits = WaitingVerifications(wait_ms=100, per_id_max=2)
    waits.wait(REQUEST, "a", now_ms=0)

    def fenced(request: AddPartitionsRequest) -> None:
        raise ProducerFencedError("fenced")

    (answer,) = waits.recheck("t", 1, fenced)
    assert isinstance(answer.error, ProducerFencedError)
    assert not WaitingVerifications(wait_ms=0, per_id_max=2).wait(REQUEST, "x", now_ms=0)
