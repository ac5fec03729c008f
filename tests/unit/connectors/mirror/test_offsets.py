"""The mirror's offset map: exact translation, bounded memory, checkpoints that decode or raise the typed error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.connectors.mirror.offsets import POINTS_MAX, OffsetMap, decode_maps, encode_maps
from mqbroker.connectors.state import CorruptConnectorStateError


def test_a_copy_translates_offsets_exactly_across_a_skipped_marker() -> None:
    offset_map = OffsetMap(source_end=0, target_end=100)
    offset_map.copied(0, 100, 10, 110)  # source 0..9 at target 100..109
    offset_map.copied(11, 110, 20, 119)  # a transaction marker at source 10 was not copied
    assert [offset_map.translate(offset) for offset in (0, 9, 10, 11, 19)] == [100, 109, 110, 110, 118]
    assert offset_map.points == [(0, 100), (11, 110)], "a point only where the distance changes"
    assert offset_map.translate(20) == 119 and offset_map.translate(500) == 119, "not copied yet: the copy's end"


def test_an_offset_older_than_the_map_does_not_translate() -> None:
    offset_map = OffsetMap(source_end=50, target_end=0)
    offset_map.copied(50, 0, 60, 10)
    assert offset_map.translate(49) is None


def test_points_are_bounded_and_the_oldest_forgotten() -> None:
    offset_map = OffsetMap(source_end=0, target_end=0)
    for number in range(POINTS_MAX + 10):
        offset_map.copied(number * 2, number, number * 2 + 1, number + 1)
    assert len(offset_map.points) == POINTS_MAX and offset_map.translate(0) is None


def test_maps_round_trip_through_a_checkpoint() -> None:
    maps = {("a.b", 0): OffsetMap(source_end=10, target_end=110, points=[(0, 100), (5, 104)]),
            ("c", 3): OffsetMap(source_end=0, target_end=0)}
    assert decode_maps(encode_maps(maps)) == maps


@pytest.mark.parametrize("progress", [{}, {"partitions": []}, {"partitions": {"x": {}}},
                                      {"partitions": {"t/0": {"source": -1, "target": 0, "points": []}}},
                                      {"partitions": {"t/0": {"source": 1, "target": 0, "points": [[2, 0], [1, 0]]}}},
                                      {"partitions": {"t/0": {"source": True, "target": 0, "points": []}}}])
def test_malformed_checkpoints_are_corrupt(progress) -> None:
    with pytest.raises(CorruptConnectorStateError):
        decode_maps(progress)


json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8)),
                           lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8),
                                                                                              children, max_size=4),
                           max_leaves=25)


@given(st.dictionaries(st.text(max_size=10), json_values, max_size=3))
def test_garbage_checkpoints_raise_only_the_typed_error(progress) -> None:
    try:
        decode_maps(progress)
    except CorruptConnectorStateError:
        pass
