"""When a transactional producer may send its commit behind its last records (``ProducerCore.sent_all_awaiting_only``):
only once every record is sent and all those still unacknowledged went to the coordinator's broker, whose order on
that connection the broker keeps; records on other brokers must be acknowledged first."""

from __future__ import annotations

import random

from mqbroker.client.producer import ProducerCore
from mqbroker.client.producer_batch import ProducePlan
from mqbroker.client.producer_config import ProducerConfig
from mqbroker.errors import NotLeaderError
from mqbroker.protocols.native.messages import ProducePartitionResult, ProduceResponse, ProduceTopicResult

COORDINATOR = 1


def _core() -> ProducerCore:
    core = ProducerCore(ProducerConfig(transactional_id="tx", linger_ms=5), random.Random(0))
    core.set_producer_identity(producer_id=7, producer_epoch=0)
    return core


def _leader(topic: str, partition: int) -> int:
    """Partition 0 is led by the coordinator's broker, partition 1 by another."""
    return COORDINATOR if partition == 0 else 2


def _answered(plan: ProducePlan) -> ProduceResponse:
    return ProduceResponse(topics=(ProduceTopicResult(name="t", partitions=tuple(
        ProducePartitionResult(partition_index=batch.partition, error_code=0, base_offset=0)
        for batch in plan.batches)),))


def test_the_commit_waits_for_records_on_other_brokers_and_for_every_record_to_be_sent() -> None:
    core = _core()
    for partition in (0, 1):
        core.append("t", partition, 1_000, None, b"v", None, now_ms=1_000)
    assert not core.sent_all_awaiting_only(COORDINATOR)  # open batches: not sent yet
    core.flush()
    plans = {plan.node_id: plan for plan in core.drain(1_000, _leader)}
    assert not core.sent_all_awaiting_only(COORDINATOR)  # partition 1's records, on broker 2, are unacknowledged
    core.plan_completed(plans[2], _answered(plans[2]), 1_001)
    assert core.sent_all_awaiting_only(COORDINATOR)  # only the coordinator's broker's records are in flight
    core.append("t", 0, 1_000, None, b"w", None, now_ms=1_001)
    assert not core.sent_all_awaiting_only(COORDINATOR)  # a record appended since is not sent


def test_a_retried_batch_holds_the_commit_until_it_is_sent_again() -> None:
    core = _core()
    core.append("t", 0, 1_000, None, b"v", None, now_ms=1_000)
    core.flush()
    (plan,) = core.drain(1_000, _leader)
    core.plan_failed(plan, NotLeaderError("the leader moved"), 1_001)
    assert not core.sent_all_awaiting_only(COORDINATOR)
