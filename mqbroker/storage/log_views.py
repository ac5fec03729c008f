"""What a partition log hands back: where an append landed, what a read found, what the cleaner may rewrite."""

from __future__ import annotations

from dataclasses import dataclass

from mqbroker.storage.segment import Segment
from mqbroker.storage.txn_index import AbortedTxn


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendResult:
    """Where an append landed; ``duplicate`` marks a producer retry answered with its original offsets."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanerView:
    """A consistent picture of what the cleaner may rewrite, taken under the log's lock."""

    #: The sealed segments, oldest first (the active segment is never cleaned).
    segments: list[Segment]
    #: Offsets below this were compacted by an earlier pass (the log start if higher).
    first_dirty_offset: int
    #: Producer id -> last offset of its latest batch: compaction keeps that batch, if only as a header.
    producer_last_offsets: dict[int, int]
    #: Offsets from here on belong to (or follow) an open transaction: compaction stops before them.
    stable_end_offset: int
    #: The aborted transactions of the whole log (their data is removed whatever its key; the marker of one
    #: with data in a sealed segment may already be in the active one).
    aborted: list[AbortedTxn]
    #: Changes when the log is truncated, so a pass that raced a truncation records nothing.
    generation: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadResult:
    """Whole batches read from the log plus the log's bounds at the time of the read."""

    records: bytes
    log_start_offset: int
    log_end_offset: int
