"""The broker API's value types: acks from the wire, fetch requests with named units."""

from __future__ import annotations

import pytest

from mqbroker import errors, limits
from mqbroker.model import Acks, FetchPosition, FetchRequest


@pytest.mark.parametrize("value, acks", [(0, Acks.NONE), (1, Acks.LEADER), (-1, Acks.ALL)])
def test_kafkas_acks_values_map_onto_the_enum_and_back(value: int, acks: Acks) -> None:
    assert Acks.from_wire(value) is acks and acks.value == value


@pytest.mark.parametrize("value", [2, -2, 100])
def test_acks_other_than_0_1_or_all_are_refused_with_a_typed_error(value: int) -> None:
    with pytest.raises(errors.InvalidRequiredAcksError, match=f"got {value}"):
        Acks.from_wire(value)


def test_a_fetch_request_answers_at_once_with_at_least_a_byte_up_to_the_response_bound_by_default() -> None:
    request = FetchRequest(positions=(FetchPosition(topic="t", partition=0, offset=0, max_bytes=100),))
    assert (request.wait_ms_max, request.response_bytes_min) == (0, 1)
    assert request.response_bytes_max == limits.fetch_response_bytes_max
