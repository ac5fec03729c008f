"""Pure routing decisions for front ends in a cluster: which broker serves a partition, how a fetch
spanning several leaders splits into one fetch per broker, and how their answers merge back.

A route is ``None`` for this broker (it leads the partition, or nobody does and its own answer —
unknown topic, NOT_LEADER_OR_FOLLOWER, a refusal — is the right one), else the leader's node id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from mqbroker.model import FetchPosition, FetchResult

Route = int | None
#: The leader of (topic, partition) in the local metadata image: None for an unknown partition, -1 for none.
LeaderOf = Callable[[str, int], "int | None"]


def route_of(leader_id: int | None, node_id: int) -> Route:
    """Where a partition led by ``leader_id`` is served, seen from broker ``node_id``."""
    if leader_id is None or leader_id < 0 or leader_id == node_id:
        return None
    return leader_id


def split_positions(positions: Sequence[FetchPosition], route: Callable[[FetchPosition], Route]) -> dict[Route, list[int]]:
    """The indices of ``positions`` per route, each list in request order."""
    groups: dict[Route, list[int]] = {}
    for index, position in enumerate(positions):
        groups.setdefault(route(position), []).append(index)
    return groups


def merge_results(
    positions: Sequence[FetchPosition], groups: Mapping[Route, Sequence[int]],
    answered: Mapping[Route, Sequence[FetchResult]],
) -> list[FetchResult]:
    """One result per position, in request order; a route that has not answered yet reads as empty."""
    merged: list[FetchResult | None] = [None] * len(positions)
    for route, indices in groups.items():
        results = answered.get(route)
        assert results is None or len(results) == len(indices), "one result per position of a route"
        for slot, index in enumerate(indices):
            position = positions[index]
            merged[index] = (results[slot] if results is not None
                             else FetchResult(topic=position.topic, partition=position.partition))
    assert all(result is not None for result in merged), "every position belongs to one route"
    return merged  # type: ignore[return-value]


def answered_enough(answers: Iterable[Sequence[FetchResult]], min_bytes: int) -> bool:
    """A split fetch may answer now: an error to report, or at least ``min_bytes`` (at least 1) arrived."""
    available = 0
    for results in answers:
        for result in results:
            if result.error is not None:
                return True
            available += len(result.records)
    return available >= max(min_bytes, 1)


def failed_results(positions: Sequence[FetchPosition], error: Exception) -> list[FetchResult]:
    """The same error for every position of a route whose broker could not be asked."""
    return [FetchResult(topic=position.topic, partition=position.partition, error=error) for position in positions]
