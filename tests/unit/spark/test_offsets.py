"""Spark JSON offsets, option parsing and range planning."""

from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker_spark.offsets import OffsetRange, OffsetsFormatError, from_json, limit_end, parse_option, plan_ranges, to_json

offsets_strategy = st.dictionaries(
    st.text(min_size=1, max_size=8), st.dictionaries(st.integers(0, 50), st.integers(0, 10**12), max_size=5), max_size=4
)


@given(offsets_strategy)
def test_offsets_survive_the_json_round_trip_spark_makes(offsets: dict[str, dict[int, int]]) -> None:
    assert from_json(json.loads(json.dumps(to_json(offsets)))) == offsets


@settings(max_examples=100)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)))
def test_garbage_offsets_raise_only_the_typed_error(value: object) -> None:
    try:
        from_json(value)
    except OffsetsFormatError:
        pass


def test_offset_options_accept_earliest_latest_and_json_with_special_offsets() -> None:
    assert parse_option(" Earliest ") == "earliest"
    assert parse_option("latest") == "latest"
    assert parse_option('{"t": {"0": -2, "1": 17}}') == {"t": {0: -2, 1: 17}}
    with pytest.raises(OffsetsFormatError, match="neither"):
        parse_option("first")
    with pytest.raises(OffsetsFormatError, match="below -2"):
        parse_option('{"t": {"0": -3}}')


def test_large_ranges_split_and_new_partitions_start_at_zero() -> None:
    ranges = plan_ranges({"t": {0: 5}}, {"t": {0: 30, 1: 4}, "u": {0: 0}}, records_per_range_max=10)
    assert [(r.topic, r.partition, r.start, r.end) for r in ranges] == [
        ("t", 0, 5, 15), ("t", 0, 15, 25), ("t", 0, 25, 30), ("t", 1, 0, 4),
    ]


def test_ranges_pickle_for_the_workers() -> None:
    offset_range = OffsetRange(topic="t", partition=3, start=1, end=9)
    assert pickle.loads(pickle.dumps(offset_range)) == offset_range


def test_read_limit_is_shared_in_proportion_and_every_backlog_progresses() -> None:
    end = limit_end({"t": {0: 0, 1: 0, 2: 10}}, {"t": {0: 900, 1: 100, 2: 10}}, records_max=100)
    assert end == {"t": {0: 90, 1: 10, 2: 10}}
    assert limit_end({"t": {0: 0}}, {"t": {0: 5}}, records_max=100) == {"t": {0: 5}}
    assert limit_end({"t": {0: 0, 1: 0}}, {"t": {0: 1000, 1: 1}}, records_max=10) == {"t": {0: 9, 1: 1}}
