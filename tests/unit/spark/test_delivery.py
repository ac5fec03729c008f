"""The sink's deterministic write plan: what makes retried tasks deduplicate at the broker."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from mqbroker_spark.delivery import BATCHES_PER_PRODUCER, PRODUCER_ID_BASE, plan_partition, plan_writes, producer_id_for, target_partition
from mqbroker_spark.options import OptionError, SinkOptions, SourceOptions

records_strategy = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=200),
        st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2).map(tuple),
    ),
    max_size=60,
)


@given(records_strategy, st.randoms(use_true_random=False))
def test_a_retry_with_rows_in_another_order_plans_identical_batches(records: list, rng: random.Random) -> None:
    shuffled = list(records)
    rng.shuffle(shuffled)
    assert plan_partition("q/1/0", "t", 0, records, 300) == plan_partition("q/1/0", "t", 0, shuffled, 300)


@given(records_strategy)
def test_batches_cover_every_record_once_with_consecutive_sequences_per_producer(records: list) -> None:
    planned = plan_partition("q/1/0", "t", 0, records, 300)
    assert sorted(map(repr, (record for batch in planned for record in batch.records))) == sorted(map(repr, records))
    by_producer: dict[int, list] = {}
    for batch in planned:
        assert batch.producer_id >= PRODUCER_ID_BASE
        by_producer.setdefault(batch.producer_id, []).append(batch)
    for batches in by_producer.values():
        assert len(batches) <= BATCHES_PER_PRODUCER
        expected = 0
        for batch in batches:
            assert batch.base_sequence == expected
            expected += len(batch.records)


def test_producer_ids_differ_per_batch_task_partition_and_chunk() -> None:
    ids = {
        producer_id_for(identity, topic, partition, chunk)
        for identity in ("q/1/0", "q/1/1", "q/2/0")
        for topic in ("a", "b")
        for partition in (0, 1)
        for chunk in (0, 1)
    }
    assert len(ids) == 24


def test_rows_without_partition_go_to_a_stable_partition() -> None:
    assert target_partition(b"device-1", b"x", 8) == target_partition(b"device-1", b"y", 8)
    assert target_partition(None, b"same", 8) == target_partition(None, b"same", 8)
    plan = plan_writes("q/0/0", {("t", 1): [(None, b"v", ())], ("s", 0): [(None, b"w", ())]}, 1000)
    assert [(batch.topic, batch.partition) for batch in plan] == [("s", 0), ("t", 1)]


def test_options_name_what_is_wrong() -> None:
    base = {"bootstrap": "127.0.0.1:9393"}
    try:
        SourceOptions.parse({**base, "subscribe": "a", "subscribePattern": "b.*"}, streaming=True)
    except OptionError as error:
        assert "exactly one" in str(error)
    else:
        raise AssertionError("subscribe and subscribePattern together must be refused")
    options = SourceOptions.parse({**base, "subscribePattern": "sensor-.*"}, streaming=True)
    assert options.wants("sensor-1") and not options.wants("xsensor-1") and options.starting == "latest"
    assert SourceOptions.parse({**base, "subscribe": "a, b"}, streaming=False).starting == "earliest"
    assert SourceOptions.parse({**base, "subscribe": "a"}, streaming=True).isolation_level == "read_committed"
    assert SourceOptions.parse({**base, "subscribe": "a", "isolationLevel": "READ_UNCOMMITTED"},
                               streaming=True).isolation_level == "read_uncommitted"
    for bad in ({"security.protocol": "SSL"}, {"maxOffsetsPerTrigger": "0"}, {"endingOffsets": "latest"},
                {"isolationLevel": "serializable"}):
        try:
            SourceOptions.parse({**base, "subscribe": "a", **bad}, streaming=True)
        except OptionError:
            continue
        raise AssertionError(f"{bad} must be refused")
    assert SinkOptions.parse({**base, "topic": "out"}).topic == "out"


def test_the_sink_writes_transactions_only_when_asked_and_checks_the_timeout() -> None:
    base = {"bootstrap": "localhost:9393", "topic": "out"}
    assert not SinkOptions.parse(base).transactional
    options = SinkOptions.parse({**base, "transactional": "TRUE", "transactionTimeoutMs": "5000"})
    assert options.transactional and options.transaction_timeout_ms == 5000
    for bad in ({"transactional": "yes"}, {"transactionTimeoutMs": "0"}):
        try:
            SinkOptions.parse({**base, **bad})
        except OptionError:
            continue
        raise AssertionError(f"{bad} must be refused")
