"""The producer core: batching, linger, sequences, retries, in-flight bounds, delivery outcomes."""

import random

import pytest

from mqbroker.client import producer
from mqbroker.client.backoff import Backoff
from mqbroker.client.batch_records import BatchRecordsPython
from mqbroker.client.producer import ProducerCore
from mqbroker.client.producer_batch import ProducePlan
from mqbroker.client.producer_config import ProducerConfig
from mqbroker.errors import ErrorCode, NotLeaderError, TopicAuthorizationError
from mqbroker.protocols.native.codec import ErrorResponse
from mqbroker.protocols.native.messages import Acks, ProducePartitionResult, ProduceResponse, ProduceTopicResult
from mqbroker.records.decoder import decode_records
from mqbroker.records.header import read_header


@pytest.fixture(autouse=True, params=["compiled", "reference"])
def records_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs with the compiled ``BatchRecords`` and with its reference, the fallback without a compiler."""
    if request.param == "reference":
        monkeypatch.setattr(producer, "BatchRecords", BatchRecordsPython)
    return request.param


def _core(**settings: object) -> ProducerCore:
    config = ProducerConfig(**{"backoff": Backoff(initial_ms=10, max_ms=100), **settings})
    core = ProducerCore(config, random.Random(0))
    if config.enable_idempotence:
        core.set_producer_identity(producer_id=7, producer_epoch=0)
    return core


def _leader_one(topic: str, partition: int) -> int:
    return 1


def _reply(plan: ProducePlan, code: int = 0, base_offset: int = 0) -> ProduceResponse:
    results: dict[str, list[ProducePartitionResult]] = {}
    for batch in plan.batches:
        results.setdefault(batch.topic, []).append(
            ProducePartitionResult(partition_index=batch.partition, error_code=code, base_offset=base_offset)
        )
    return ProduceResponse(
        topics=tuple(ProduceTopicResult(name=name, partitions=tuple(parts)) for name, parts in results.items())
    )


def test_batches_are_encoded_by_the_records_kind_under_test(records_kind: str) -> None:
    batch, _ = _core().append("events", 0, 1, None, b"v", None, now_ms=0)
    assert isinstance(batch.builder, BatchRecordsPython) == (records_kind == "reference")


def test_records_wait_for_linger_then_travel_in_one_batch_with_offsets_per_record() -> None:
    core = _core(linger_ms=5)
    for number in range(3):
        core.append("events", 0, 1000 + number, None, b"value-%d" % number, None, now_ms=0)
    assert core.drain(4, _leader_one) == []
    (plan,) = core.drain(5, _leader_one)
    (topic,) = plan.request().topics
    decoded = decode_records(topic.partitions[0].records)
    assert [record.value for record in decoded] == [b"value-0", b"value-1", b"value-2"]
    (batch,) = core.plan_completed(plan, _reply(plan, base_offset=40), now_ms=6)
    assert [batch.metadata(index, 1000 + index).offset for index in range(3)] == [40, 41, 42]
    assert not core.has_pending


def test_idempotent_batches_carry_producer_id_and_consecutive_sequences() -> None:
    core = _core(linger_ms=0)
    core.append("events", 0, 1, None, b"a", None, now_ms=0)
    core.append("events", 0, 1, None, b"b", None, now_ms=0)
    (first,) = core.drain(0, _leader_one)
    core.append("events", 0, 1, None, b"c", None, now_ms=0)
    (second,) = core.drain(0, _leader_one)
    headers = [read_header(plan.batches[0].payload) for plan in (first, second)]
    assert [(header.producer_id, header.base_sequence) for header in headers] == [(7, 0), (7, 2)]


def test_full_batch_closes_without_waiting_for_linger() -> None:
    core = _core(linger_ms=60_000, batch_size=1000)
    for _ in range(20):
        core.append("events", 0, 1, None, b"x" * 100, None, now_ms=0)
    plans = core.drain(0, _leader_one)
    assert len(plans) == 1 and plans[0].batches[0].record_count < 20


@pytest.mark.parametrize("value_bytes", [1, 100, 999, 5000])
def test_batches_never_grow_past_batch_size(value_bytes: int) -> None:
    """A broker refuses batches over max.message.bytes, so batch_size must be a hard bound."""
    core = _core(linger_ms=60_000, batch_size=4096, enable_idempotence=False, max_in_flight=1000)
    for index in range(200):
        core.append("events", 0, index, b"key", b"v" * value_bytes, [("h", b"1")], now_ms=0)
    core.flush()
    batches = []
    while plans := core.drain(0, _leader_one):
        for plan in plans:
            batches += [batch.payload for batch in plan.batches]
            core.plan_completed(plan, _reply(plan), 0)
    assert sum(read_header(batch).records_count for batch in batches) == 200
    if value_bytes < 4096:
        assert max(len(batch) for batch in batches) <= 4096
    else:  # a record larger than batch_size travels alone
        assert {read_header(batch).records_count for batch in batches} == {1}


def test_a_batch_waiting_only_for_an_in_flight_slot_sets_no_deadline() -> None:
    """The I/O loop must sleep until a reply frees a slot, not poll with a zero timeout."""
    core = _core(linger_ms=0, max_in_flight=1, enable_idempotence=False)
    core.append("events", 0, 1, None, b"first", None, now_ms=0)
    (first_plan,) = core.drain(0, _leader_one)
    core.append("events", 0, 2, None, b"second", None, now_ms=1)
    assert core.drain(1, _leader_one) == []  # the one slot is taken
    deadline = core.next_deadline_ms(1)
    assert deadline is None or deadline > 1
    core.plan_completed(first_plan, _reply(first_plan), 2)
    (second_plan,) = core.drain(2, _leader_one)
    assert second_plan.batches[0].record_count == 1


def test_retriable_error_resends_the_same_bytes_after_backoff_and_marks_metadata_stale() -> None:
    core = _core(linger_ms=0)
    core.append("events", 0, 1, None, b"a", None, now_ms=0)
    (plan,) = core.drain(0, _leader_one)
    payload = plan.batches[0].payload
    assert core.plan_completed(plan, _reply(plan, code=ErrorCode.NOT_LEADER_OR_FOLLOWER), now_ms=1) == []
    assert core.stale_topics == {"events"}
    assert core.drain(2, _leader_one) == []
    (retry,) = core.drain(200, _leader_one)
    assert retry.batches[0].payload == payload


def test_fatal_error_fails_the_batch_with_its_typed_error() -> None:
    core = _core(linger_ms=0)
    core.append("events", 0, 1, None, b"a", None, now_ms=0)
    (plan,) = core.drain(0, _leader_one)
    (batch,) = core.plan_completed(plan, _reply(plan, code=ErrorCode.TOPIC_AUTHORIZATION_FAILED), now_ms=1)
    with pytest.raises(TopicAuthorizationError):
        batch.metadata(0, 1)


def test_delivery_counts_add_up_the_records_of_finished_batches_only() -> None:
    core = _core(linger_ms=0)
    for value in (b"a", b"b", b"c"):
        core.append("events", 0, 1, None, value, None, now_ms=0)
    core.append("denied", 0, 1, None, b"d", None, now_ms=0)
    plans = core.drain(0, _leader_one)
    assert (core.delivered.acknowledged, core.delivered.failed) == (0, 0)  # in flight: in neither count
    (plan,) = plans
    response = ProduceResponse(topics=(
        ProduceTopicResult(name="events", partitions=(ProducePartitionResult(partition_index=0, error_code=0),)),
        ProduceTopicResult(name="denied", partitions=(
            ProducePartitionResult(partition_index=0, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED),)),
    ))
    core.plan_completed(plan, response, now_ms=1)
    assert (core.delivered.acknowledged, core.delivered.failed) == (3, 1)
    assert isinstance(core.delivered.first_error, TopicAuthorizationError)


def test_whole_request_error_is_retried_when_retriable() -> None:
    core = _core(linger_ms=0)
    core.append("events", 0, 1, None, b"a", None, now_ms=0)
    (plan,) = core.drain(0, _leader_one)
    response = ErrorResponse(error_code=ErrorCode.BROKER_SHUTTING_DOWN, error_message="bye")
    assert core.plan_completed(plan, response, now_ms=1) == []
    assert core.has_pending


def test_in_flight_requests_per_connection_are_bounded() -> None:
    core = _core(linger_ms=0, max_in_flight=2)
    plans = []
    for partition in range(3):
        core.append("events", partition, 1, None, b"a", None, now_ms=0)
        plans += core.drain(0, lambda topic, partition: 1)
    assert len(plans) == 2 and core.in_flight(1) == 2
    core.plan_completed(plans[0], _reply(plans[0]), now_ms=1)
    assert len(core.drain(1, _leader_one)) == 1


def test_acks_zero_completes_on_send_without_offsets() -> None:
    core = _core(linger_ms=0, acks=Acks.NONE, enable_idempotence=False)
    core.append("events", 0, 5, None, b"a", None, now_ms=0)
    (plan,) = core.drain(0, _leader_one)
    (batch,) = core.plan_completed(plan, None, now_ms=0)
    assert batch.metadata(0, 5).offset == -1


def test_sequence_gap_behind_a_retried_batch_is_retried_in_order() -> None:
    core = _core(linger_ms=0)
    core.append("events", 0, 1, None, b"a", None, now_ms=0)
    (first,) = core.drain(0, _leader_one)
    core.append("events", 0, 1, None, b"b", None, now_ms=0)
    (second,) = core.drain(0, _leader_one)
    core.plan_completed(first, _reply(first, code=ErrorCode.REQUEST_TIMED_OUT), now_ms=1)
    assert core.plan_completed(second, _reply(second, code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER), now_ms=1) == []
    sequences = []
    for now_ms in range(2, 500):
        for plan in core.drain(now_ms, _leader_one):
            sequences += [batch.base_sequence for batch in plan.batches]
            core.plan_completed(plan, _reply(plan), now_ms=now_ms)
    assert sequences == [0, 1]


def test_batch_whose_leader_failed_goes_at_once_to_a_new_leader_polling_metadata_meanwhile() -> None:
    core = _core(linger_ms=0, backoff=Backoff(initial_ms=1000, max_ms=1000))
    core.append("events", 0, 1, None, b"a", None, now_ms=0)
    (plan,) = core.drain(0, _leader_one)
    assert core.plan_failed(plan, NotLeaderError("connection lost"), now_ms=1) == []
    core.stale_topics.clear()  # the driver refreshed: the metadata still names broker 1
    assert core.drain(2, _leader_one) == [] and core.stale_topics == {"events"}
    core.stale_topics.clear()
    assert core.drain(50, _leader_one) == [] and core.stale_topics == set()  # polled at most every 100 ms
    assert core.next_deadline_ms(50) == 102
    assert core.drain(102, lambda topic, partition: -1) == [] and core.stale_topics == {"events"}
    (retry,) = core.drain(150, lambda topic, partition: 2)  # well before the 1 s backoff
    assert retry.node_id == 2


def test_backoff_after_other_errors_is_not_cut_short_by_a_leader_change() -> None:
    core = _core(linger_ms=0, backoff=Backoff(initial_ms=1000, max_ms=1000))
    core.append("events", 0, 1, None, b"a", None, now_ms=0)
    (plan,) = core.drain(0, _leader_one)
    assert core.plan_completed(plan, _reply(plan, code=ErrorCode.NOT_ENOUGH_REPLICAS), now_ms=1) == []
    assert core.drain(150, lambda topic, partition: 2) == []
    assert core.stale_topics == set()


def test_lost_connection_retries_and_old_batches_expire() -> None:
    core = _core(linger_ms=0, delivery_timeout_ms=1000)
    core.append("events", 0, 1, None, b"a", None, now_ms=0)
    (plan,) = core.drain(0, _leader_one)
    assert core.plan_failed(plan, NotLeaderError("connection lost"), now_ms=1) == []
    (expired,) = core.expire(now_ms=1000)
    assert expired.error is not None and expired.error.code == ErrorCode.REQUEST_TIMED_OUT


def test_batch_keeps_growing_past_linger_while_an_earlier_one_waits_for_an_in_flight_slot() -> None:
    core = _core(linger_ms=1, max_in_flight=1)
    core.append("events", 0, 1, None, b"a", None, now_ms=0)
    (first,) = core.drain(1, _leader_one)
    core.append("events", 0, 1, None, b"b", None, now_ms=1)
    assert core.drain(2, _leader_one) == []  # closed, but the one request allowed is out
    for now_ms in range(2, 10):
        core.append("events", 0, 1, None, b"c", None, now_ms=now_ms)
        assert core.drain(now_ms, _leader_one) == []
    core.plan_completed(first, _reply(first), now_ms=10)
    (second,) = core.drain(10, _leader_one)
    assert second.batches[0].record_count == 1
    core.plan_completed(second, _reply(second), now_ms=11)
    (third,) = core.drain(11, _leader_one)
    assert third.batches[0].record_count == 8  # one batch, not eight requests


def test_pending_records_count_open_queued_and_in_flight_records_until_they_finish() -> None:
    core = _core(linger_ms=0, max_in_flight=1)
    core.append("events", 0, 1, None, b"a", None, now_ms=0)
    core.append("events", 0, 1, None, b"b", None, now_ms=0)
    (first,) = core.drain(0, _leader_one)  # in flight: 2 records
    core.append("events", 0, 1, None, b"c", None, now_ms=0)
    assert core.drain(0, _leader_one) == []  # queued behind the one request allowed: 1 record
    core.append("logs", 0, 1, None, b"d", None, now_ms=0)  # open: not drained yet
    assert core.pending_records == 4
    core.plan_completed(first, _reply(first), now_ms=1)
    assert core.pending_records == 2


def test_failing_pending_batches_fails_each_unfinished_batch_once_and_leaves_nothing_pending() -> None:
    core = _core(linger_ms=60_000, max_in_flight=1)
    core.append("events", 0, 1, None, b"in flight", None, now_ms=0)
    core.flush()
    (in_flight,) = core.drain(0, _leader_one)
    core.append("events", 0, 1, None, b"queued", None, now_ms=0)
    core.flush()
    assert core.drain(0, _leader_one) == []
    core.append("events", 1, 1, None, b"open", None, now_ms=0)
    error = TopicAuthorizationError("closing")
    failed = core.fail_pending(error)
    assert sorted(batch.partition for batch in failed) == [0, 0, 1]
    assert all(batch.done and batch.error is error for batch in failed)
    assert not core.has_pending and core.pending_records == 0 and core.queued_bytes == 0
    assert core.fail_pending(error) == []
    assert in_flight.batches[0] in failed


def test_a_transactional_partition_waits_at_its_gate_and_travels_transactional_once_added() -> None:
    core = _core(linger_ms=0, transactional_id="tx")
    core.gated.add(("events", 0))
    core.append("events", 0, 1, None, b"held", None, now_ms=0)
    core.append("events", 1, 1, None, b"free", None, now_ms=0)
    (plan,) = core.drain(0, _leader_one)
    assert [batch.partition for batch in plan.batches] == [1]
    assert plan.request().transactional_id == "tx" and read_header(plan.batches[0].payload).is_transactional
    core.gated.clear()
    (later,) = core.drain(1, _leader_one)
    assert [batch.partition for batch in later.batches] == [0]


def test_a_refused_gate_fails_its_batches_and_records_the_failure() -> None:
    core = _core(linger_ms=0, transactional_id="tx")
    core.gated.add(("events", 0))
    core.append("events", 0, 1, None, b"held", None, now_ms=0)
    refused = TopicAuthorizationError("not allowed")
    (batch,) = core.fail_gated({("events", 0)}, refused)
    assert batch.error is refused and core.failure is refused
    assert not core.gated and not core.has_pending


def test_gated_partitions_are_added_together_once_a_batch_gathered_or_is_ready() -> None:
    """A transaction's partitions written to in quick succession go in one AddPartitionsToTxn."""
    from mqbroker.client.producer import ADD_PARTITIONS_GATHER_MS

    core = _core(linger_ms=5, transactional_id="tx")
    core.gated |= {("events", 0), ("events", 1)}
    core.append("events", 0, 1, None, b"a", None, now_ms=10)
    core.append("events", 1, 1, None, b"b", None, now_ms=10)
    assert not core.gates_due(10)
    assert core.next_deadline_ms(10) == 10 + ADD_PARTITIONS_GATHER_MS  # the I/O loop wakes for it
    assert core.gates_due(10 + ADD_PARTITIONS_GATHER_MS)
    core.flush()
    assert core.gates_due(10)  # a flush (commit) adds at once
    eager = _core(linger_ms=0, transactional_id="tx")
    eager.gated.add(("events", 0))
    eager.append("events", 0, 1, None, b"a", None, now_ms=10)
    assert eager.gates_due(10)


def test_an_added_partition_sends_its_open_batch_at_once() -> None:
    """The addition took the place of linger_ms: the records travel while the application writes more."""
    core = _core(linger_ms=5, transactional_id="tx")
    core.gated.add(("events", 0))
    core.append("events", 0, 1, None, b"a", None, now_ms=10)
    assert core.drain(11, _leader_one) == []
    core.open_gates({("events", 0)})
    (plan,) = core.drain(11, _leader_one)  # before linger_ms passed
    assert [batch.partition for batch in plan.batches] == [0] and not core.gated


def test_append_values_fills_a_batch_closes_it_and_goes_on_in_a_new_one() -> None:
    core = _core(linger_ms=5, batch_size=1_000)
    full: list[tuple[str, int]] = []
    core.on_batch_full = lambda topic, partition: full.append((topic, partition))
    values = [b"v%03d" % number for number in range(300)]
    spans = []
    position = 0
    while position < len(values):
        batch, first, added = core.append_values("events", 0, 1000, values, position, now_ms=0)
        spans.append((batch, first, added))
        position += added
    assert len(spans) > 1 and len(full) == len(spans) - 1  # every batch but the last filled up
    assert all(batch.builder.size_bytes <= 1_000 for batch, _, _ in spans)
    assert [batch.record_count for batch, _, _ in spans] == [added for _, _, added in spans]
    plans = core.drain(5, _leader_one)
    sent = [record.value for plan in plans for batch in plan.batches for record in decode_records(batch.payload)]
    while core.has_pending and len(sent) < len(values):
        for plan in plans:
            core.plan_completed(plan, _reply(plan), now_ms=6)
        plans = core.drain(6, _leader_one)
        sent += [record.value for plan in plans for batch in plan.batches for record in decode_records(batch.payload)]
    assert sent == values


def test_append_values_continues_a_partly_filled_batch() -> None:
    core = _core(linger_ms=5)
    core.append("events", 0, 1000, None, b"single", None, now_ms=0)
    batch, first, added = core.append_values("events", 0, 1000, [b"a", b"b"], 0, now_ms=0)
    assert (first, added, batch.record_count) == (1, 2, 3)


def test_a_flush_with_nothing_open_leaves_the_next_record_to_its_linger() -> None:
    """A flush that found every batch closed must not send the next transaction's first record alone at once."""
    core = _core(linger_ms=5)
    core.flush()
    core.append("events", 0, 1, None, b"a", None, now_ms=10)
    assert core.drain(10, _leader_one) == []
    (plan,) = core.drain(15, _leader_one)
    assert [batch.record_count for batch in plan.batches] == [1]


def test_version_2_transactional_produces_ask_the_leader_to_add_their_partition() -> None:
    core = _core(linger_ms=0, transactional_id="tx")
    core.append("events", 0, 1, None, b"a", None, now_ms=0)
    (plan,) = core.drain(0, _leader_one)
    assert plan.request().add_to_transaction is False  # version 1: AddPartitionsToTxn did it
    core.adds_to_transaction = True
    core.append("events", 0, 1, None, b"b", None, now_ms=1)
    (plan,) = core.drain(1, _leader_one)
    assert plan.request().add_to_transaction is True


@pytest.mark.parametrize("append", [
    lambda core: core.append("events", 0, 1, None, "text, not bytes", None, now_ms=0),
    lambda core: core.append("events", 0, 1, None, b"v", [(b"key not str", b"v")], now_ms=0),
    lambda core: core.append_values("events", 0, 1, [None], 0, now_ms=0),
], ids=["value-not-bytes", "header-key-not-str", "none-in-send-many"])
def test_a_record_that_cannot_be_encoded_is_refused_and_leaves_no_empty_batch_open(append: object) -> None:
    """Before, the batch opened for it stayed open, empty: its build at linger failed in the I/O thread, which died."""
    core = _core(linger_ms=0)
    with pytest.raises((TypeError, AttributeError)):
        append(core)  # type: ignore[operator]
    assert not core.has_pending and core.drain(0, _leader_one) == []
    core.append("events", 0, 1, None, b"v", None, now_ms=0)
    (plan,) = core.drain(0, _leader_one)
    assert [record.value for record in decode_records(plan.batches[0].builder.build())] == [b"v"]
