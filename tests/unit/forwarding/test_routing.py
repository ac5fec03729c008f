"""The pure parts of front-end routing: routes, splitting a fetch by leader, merging the answers, wire forms."""

from __future__ import annotations

import pytest

from mqbroker import errors
from mqbroker.forwarding import wire as forwarded
from mqbroker.forwarding.routes import (
    answered_enough,
    failed_results,
    merge_results,
    route_of,
    split_positions,
)
from mqbroker.model import FetchPosition, FetchRequest, FetchResult
from mqbroker.protocols.native import messages as m
from mqbroker.records.builder import BatchBuilder

LEADERS = {("a", 0): 1, ("a", 1): 2, ("b", 0): 3, ("b", 1): 1, ("c", 0): -1}


def _position(topic: str, partition: int, offset: int = 0) -> FetchPosition:
    return FetchPosition(topic=topic, partition=partition, offset=offset, max_bytes=1024)


def _batch(count: int) -> bytes:
    builder = BatchBuilder()
    for index in range(count):
        builder.append(1_000, b"k", b"v%d" % index, [])
    return builder.build()


@pytest.mark.parametrize(("leader_id", "expected"), [(1, None), (2, 2), (-1, None), (None, None)])
def test_only_a_partition_led_by_another_broker_is_routed_away(leader_id: int | None, expected: int | None) -> None:
    assert route_of(leader_id, node_id=1) == expected


def test_positions_split_per_leader_keep_request_order() -> None:
    positions = [_position("a", 0), _position("a", 1), _position("b", 0), _position("b", 1), _position("c", 0)]
    groups = split_positions(positions, lambda p: route_of(LEADERS[(p.topic, p.partition)], 1))
    assert groups == {None: [0, 3, 4], 2: [1], 3: [2]}


def test_merged_results_follow_the_request_order_and_unanswered_routes_read_empty() -> None:
    positions = [_position("a", 0), _position("a", 1), _position("b", 0), _position("b", 1)]
    groups = {None: [0, 3], 2: [1], 3: [2]}
    local = [FetchResult(topic="a", partition=0, records=b"x"), FetchResult(topic="b", partition=1, records=b"y")]
    remote = [FetchResult(topic="a", partition=1, records=b"z", high_watermark=9)]
    merged = merge_results(positions, groups, {None: local, 2: remote})
    assert [(r.topic, r.partition, r.records) for r in merged] == [("a", 0, b"x"), ("a", 1, b"z"), ("b", 0, b""),
                                                                    ("b", 1, b"y")]
    assert merged[2].error is None and merged[2].high_watermark == -1


def test_a_split_fetch_answers_early_on_enough_bytes_or_an_error() -> None:
    empty = [FetchResult(topic="a", partition=0)]
    some = [FetchResult(topic="a", partition=1, records=b"abc")]
    failed = failed_results([_position("a", 2)], errors.NotLeaderError("moved"))
    assert not answered_enough([empty], min_bytes=1)
    assert answered_enough([empty, some], min_bytes=3)
    assert not answered_enough([some], min_bytes=4)
    assert answered_enough([empty, failed], min_bytes=1_000)
    assert isinstance(failed[0].error, errors.NotLeaderError)


def test_a_forwarded_produce_reports_the_last_offset_of_every_batch_sent() -> None:
    records = _batch(3) + _batch(2)
    response = m.ProduceResponse(topics=(m.ProduceTopicResult(name="t", partitions=(
        m.ProducePartitionResult(partition_index=4, base_offset=10, log_start_offset=0),)),))
    result = forwarded.produce_result(response, "t", 4, records)
    assert (result.base_offset, result.last_offset) == (10, 14)


def test_an_unanswered_acks_0_produce_reads_as_offset_minus_one() -> None:
    result = forwarded.produce_result(None, "t", 0, _batch(1))
    assert (result.base_offset, result.last_offset) == (-1, -1)


def test_the_leaders_error_code_comes_back_as_the_typed_error() -> None:
    response = m.ProduceResponse(topics=(m.ProduceTopicResult(name="t", partitions=(
        m.ProducePartitionResult(partition_index=0, error_code=errors.ErrorCode.NOT_LEADER_OR_FOLLOWER),)),))
    with pytest.raises(errors.NotLeaderError):
        forwarded.produce_result(response, "t", 0, _batch(1))


def test_forwarded_fetch_results_are_matched_back_to_positions_by_partition() -> None:
    positions = [_position("a", 1, 5), _position("b", 0, 7), _position("a", 0, 3)]
    request = forwarded.fetch_request(FetchRequest(positions=tuple(positions), wait_ms_max=500, response_bytes_max=4096))
    assert request.replica_id == -1 and request.max_wait_ms == 500
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in request.topics] == [("a", [1, 0]), ("b", [0])]
    response = m.FetchResponse(topics=(
        m.FetchTopicResult(name="a", partitions=(
            m.FetchPartitionResult(partition_index=0, records=b"r0", high_watermark=4),
            m.FetchPartitionResult(partition_index=1, error_code=errors.ErrorCode.OFFSET_OUT_OF_RANGE))),
    ))
    results = forwarded.fetch_results(response, positions)
    assert isinstance(results[0].error, errors.OffsetOutOfRangeError)
    assert isinstance(results[1].error, errors.UnknownServerError)
    assert (results[2].records, results[2].high_watermark, results[2].error) == (b"r0", 4, None)


def test_list_offsets_and_delete_records_round_trip_through_their_wire_forms() -> None:
    request = forwarded.list_offsets_request("t", 2, -2)
    assert request.topics[0].partitions[0].timestamp == -2
    found = forwarded.list_offset_result(m.ListOffsetsResponse(topics=(m.ListOffsetsTopicResult(name="t", partitions=(
        m.ListOffsetsPartitionResult(partition_index=2, offset=42),)),)), "t", 2)
    assert found.offset == 42
    low = forwarded.delete_records_result(m.DeleteRecordsResponse(topics=(m.DeleteRecordsTopicResult(
        name="t", partitions=(m.DeleteRecordsPartitionResult(partition_index=2, low_watermark=17),)),)), "t", 2)
    assert low == 17
