"""The runs of a share partition's region, pure: offsets ``first..last`` in one state, kept in offset order
in a list beside a list of their first offsets (for bisect), split and merged in place."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

from mqbroker.shares.partition_values import NO_OWNER, RecordState


class Run:
    """Offsets ``first..last`` in one state (mutable: runs split and merge)."""

    __slots__ = ("first", "last", "state", "delivery_count", "owner", "deadline_ms", "deliver_at_ms")

    def __init__(self, first: int, last: int, state: RecordState, delivery_count: int = 0, owner: str = NO_OWNER,
                 deadline_ms: int = 0, deliver_at_ms: int = 0) -> None:
        self.first = first
        self.last = last
        self.state = state
        self.delivery_count = delivery_count
        self.owner = owner
        #: ACQUIRED: when the lease ends; AVAILABLE: not before (0: at once).
        self.deadline_ms = deadline_ms
        #: A due record's original deliver-at time (kept for its delay entry).
        self.deliver_at_ms = deliver_at_ms

    def copy_from(self, first: int) -> Run:
        """This run's state for offsets ``first..last``."""
        return Run(first, self.last, self.state, self.delivery_count, self.owner, self.deadline_ms, self.deliver_at_ms)

    def mergeable(self, other: Run) -> bool:
        """Whether ``other``, right after this run, may join it."""
        if self.state is not other.state or self.state is RecordState.DEAD_LETTERING:
            return False
        return self.state is RecordState.DONE or (
            self.delivery_count == other.delivery_count and self.owner == other.owner
            and self.deadline_ms == other.deadline_ms)

    def __repr__(self) -> str:
        return f"Run({self.first}..{self.last} {self.state.value} n={self.delivery_count} {self.owner!r})"


def split_at(runs: list[Run], firsts: list[int], index: int, offset: int) -> None:
    """Make a run start at ``offset`` (inside the run before ``index``)."""
    run = runs[index - 1]
    assert run.first < offset <= run.last, (run, offset)
    tail = run.copy_from(offset)
    run.last = offset - 1
    runs.insert(index, tail)
    firsts.insert(index, offset)


def split_range(runs: list[Run], firsts: list[int], low: int, high: int) -> tuple[int, int]:
    """Split runs so that ``low..high`` (inside the region) is exactly ``runs[start:end]``."""
    start = bisect.bisect_right(firsts, low) - 1
    if runs[start].first < low:
        split_at(runs, firsts, start + 1, low)
        start += 1
    end = bisect.bisect_right(firsts, high)
    if runs[end - 1].last > high:
        split_at(runs, firsts, end, high + 1)
    return start, end


def coalesce(runs: list[Run], firsts: list[int], low: int, high: int) -> None:
    """Merge equal neighbours among ``runs[low - 1 : high + 1]``."""
    index = max(1, low)
    stop = min(high + 1, len(runs))
    while index < stop:
        before, run = runs[index - 1], runs[index]
        if before.mergeable(run):
            before.last = run.last
            del runs[index]
            del firsts[index]
            stop -= 1
        else:
            index += 1


def gaps(first: int, last: int, holes: Iterable[int]) -> Iterator[tuple[int, int]]:
    """The ranges of ``first..last`` between the sorted offsets ``holes``."""
    position = first
    for hole in holes:
        if hole > position:
            yield position, hole - 1
        position = hole + 1
    if position <= last:
        yield position, last
