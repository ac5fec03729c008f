# -*- test-case-name: tests.unit.records.test_isolation -*-
"""read_committed on the reader's side: drop the batches of aborted transactions and the markers.

A read_committed fetch returns whole batches up to the last stable offset plus the aborted
transactions that overlap them, each as (producer id, first offset). As in Kafka's consumer, a
reader walks the batches in order: once a batch reaches an aborted transaction's first offset
that producer's transactional batches are dropped, until its ABORT marker ends the transaction.
Control batches are never shown to applications. The work is per batch (its header), never per
record: the client's consumer and every reader inside the broker use this.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

from mqbroker.records.header import BatchHeader, iter_batches
from mqbroker.records.markers import ControlType, read_control

#: An aborted transaction as a fetch lists it: (producer id, first offset).
AbortedRange = tuple[int, int]


class ReadCommittedFilter:
    """Decides, batch by batch in log order, which batches of one partition's fetch an application may see."""

    __slots__ = ("_pending", "_aborted_producers")

    def __init__(self, aborted: Iterable[AbortedRange]) -> None:
        self._pending: deque[AbortedRange] = deque(sorted(aborted, key=lambda item: item[1]))
        self._aborted_producers: set[int] = set()

    def keep(self, buffer: bytes | bytearray | memoryview, position: int, header: BatchHeader) -> bool:
        """True when the batch at ``position`` holds committed (or non-transactional) data records."""
        pending = self._pending
        while pending and pending[0][1] <= header.last_offset:
            self._aborted_producers.add(pending.popleft()[0])
        if header.is_control:
            if header.producer_id in self._aborted_producers:
                if read_control(buffer, position, header).control_type is ControlType.ABORT:
                    self._aborted_producers.discard(header.producer_id)
            return False
        return not (header.is_transactional and header.producer_id in self._aborted_producers)


def committed_batches(
    buffer: bytes | bytearray | memoryview, aborted: Iterable[AbortedRange] | None
) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of the batches an application may see: no markers, nothing aborted.

    ``aborted`` None (a read_uncommitted fetch) still drops the control batches. CRCs are not
    checked here; ``CorruptRecordError`` for broken framing.
    """
    keeper = ReadCommittedFilter(aborted or ())
    for position, header in iter_batches(buffer, check=False):
        if keeper.keep(buffer, position, header):
            yield position, header


def committed_records(buffer: bytes | memoryview, aborted: Iterable[AbortedRange] | None) -> bytes | memoryview:
    """``buffer`` without its control batches and aborted batches (itself when nothing is dropped)."""
    kept = list(committed_batches(buffer, aborted))
    size = len(buffer)
    if not kept or (kept[0][0] == 0 and sum(header.size_bytes for _, header in kept) == size):
        return buffer if kept else b""
    view = memoryview(buffer)
    return b"".join(view[position : position + header.size_bytes] for position, header in kept)
