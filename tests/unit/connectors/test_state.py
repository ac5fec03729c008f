"""The __connectors record codec: every kind round-trips, and garbage raises only its typed error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.connector_model import TargetState, TaskMetrics, TaskState, TaskStatus
from mqbroker.connectors.state import (
    ClaimRecord,
    ConnectorRecord,
    CorruptConnectorStateError,
    KeyKind,
    ProgressRecord,
    StatusRecord,
    check_connector_name,
    claim_key,
    connector_key,
    connector_partition,
    decode_key,
    decode_positions,
    decode_value,
    encode_positions,
    encode_value,
    progress_key,
    status_key,
    task_partition,
)

INCARNATION = "0123456789abcdef0123456789abcdef"
STATUS = TaskStatus(state=TaskState.BACKOFF, owner_id=2, updated_ms=1_700_000_000_000, metrics=TaskMetrics(
    records_total=10, errors_total=1, lag_records=5, lag_seconds=1.5, records_per_second=100.0, outages_total=1,
    outage_seconds=2.25, in_outage=True, last_error="Redis is unreachable", last_error_ms=1_700_000_000_000))


@pytest.mark.parametrize("key, value", [
    (connector_key("sink-1"), ConnectorRecord(name="sink-1", incarnation=INCARNATION, target_state=TargetState.PAUSED,
                                              config={"type": "redis-sink", "topics": "a,b"})),
    (status_key("sink-1", 3), StatusRecord(incarnation=INCARNATION, status=STATUS)),
    (progress_key("sink-1", 0), ProgressRecord(incarnation=INCARNATION, progress={"positions": {"a/0": 7}})),
    (claim_key(5), ClaimRecord(node_id=3, leader_epoch=9)),
])
def test_every_record_kind_round_trips(key, value) -> None:
    decoded_key = decode_key(key.encode())
    assert decoded_key == key
    assert decode_value(decoded_key, encode_value(value)) == value


def test_keys_read_as_the_documented_text() -> None:
    assert connector_key("a.b_c-1").encode() == b"connector/a.b_c-1"
    assert status_key("x", 2).encode() == b"status/x/2"
    assert progress_key("x", 0).encode() == b"progress/x/0"
    assert claim_key(7).encode() == b"claim/7"


@pytest.mark.parametrize("key", [None, b"", b"connector/", b"connector/a/b", b"status/x", b"status/x/-1",
                                 b"status/x/1e3", b"claim/x", b"other/x", b"connector/na me", b"\xff\xfe",
                                 b"status/x/1234567890"])
def test_keys_it_did_not_write_are_corrupt(key) -> None:
    with pytest.raises(CorruptConnectorStateError):
        decode_key(key)


@pytest.mark.parametrize("value", [b"[]", b"{}", b"not json", b'{"incarnation": "short", "progress": {}}',
                                   b'{"incarnation": "' + INCARNATION.encode() + b'", "progress": []}',
                                   b"[" * 100_000, b"\xff"])
def test_values_it_did_not_write_are_corrupt(value) -> None:
    with pytest.raises(CorruptConnectorStateError):
        decode_value(progress_key("x", 0), value)


def test_a_status_with_a_boolean_for_a_count_is_corrupt() -> None:
    document = encode_value(StatusRecord(incarnation=INCARNATION, status=STATUS)).replace(b'"records_total":10',
                                                                                           b'"records_total":true')
    with pytest.raises(CorruptConnectorStateError, match="records_total"):
        decode_value(status_key("x", 0), document)


@given(st.binary(max_size=200))
def test_garbage_keys_raise_only_the_typed_error(data: bytes) -> None:
    try:
        decode_key(data)
    except CorruptConnectorStateError:
        pass


@given(st.sampled_from([connector_key("c"), status_key("c", 0), progress_key("c", 0), claim_key(0)]),
       st.one_of(st.binary(max_size=300),
                 st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20)),
                              lambda children: st.lists(children, max_size=4)
                              | st.dictionaries(st.text(max_size=12), children, max_size=6),
                              max_leaves=30).map(lambda document: __import__("json").dumps(document).encode())))
def test_garbage_values_raise_only_the_typed_error(key, data: bytes) -> None:
    try:
        decode_value(key, data)
    except CorruptConnectorStateError:
        pass


@given(st.dictionaries(st.text(max_size=20), st.one_of(st.integers(), st.text(max_size=5), st.none(), st.booleans()),
                       max_size=5) | st.integers() | st.text(max_size=10))
def test_garbage_positions_raise_only_the_typed_error(field) -> None:
    try:
        decode_positions(field)
    except CorruptConnectorStateError:
        pass


def test_positions_round_trip_with_topics_holding_dots_and_dashes() -> None:
    positions = {("a.b-c", 0): 5, ("x", 12): 0}
    assert decode_positions(encode_positions(positions)) == positions


def test_placement_is_stable_and_within_the_partitions() -> None:
    assert connector_partition("sink", 8) == connector_partition("sink", 8)
    assert {task_partition("sink", task, 8) for task in range(64)} <= set(range(8))
    assert len({task_partition("sink", task, 8) for task in range(64)}) > 1, "tasks spread over the partitions"


@pytest.mark.parametrize("name", ["", "a/b", "a b", "x" * 129, "é"])
def test_bad_connector_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError):
        check_connector_name(name)


def test_a_claim_key_kind() -> None:
    assert decode_key(b"claim/12").kind is KeyKind.CLAIM and decode_key(b"claim/12").partition == 12
