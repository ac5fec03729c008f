# -*- test-case-name: tests.unit.storage.test_retention -*-
"""Retention: how many of a log's oldest segments retention.ms and retention.bytes let go, and when the files of
segments let go are removed (file.delete.delay.ms).

Whole segments only, oldest first, never the active one (the last); a segment holding an offset
at or above ``max_offset`` (the broker passes its high watermark) stays, so retention never
removes data consumers have not been allowed to see.
"""

from __future__ import annotations

from collections.abc import Sequence

from mqbroker.storage import fs
from mqbroker.storage.config import LogConfig
from mqbroker.storage.segment import Segment


def expired_segment_count(segments: Sequence[Segment], config: LogConfig, now_ms: int, max_offset: int | None) -> int:
    """How many leading ``segments`` are older than retention.ms or beyond retention.bytes."""
    total_bytes = sum(segment.size_bytes for segment in segments)
    count = 0
    for segment, following in zip(segments, segments[1:]):
        if max_offset is not None and following.base_offset > max_offset:
            break  # offsets up to the next segment's base may lie in this one (compaction leaves gaps)
        too_old = config.retention_ms >= 0 and segment.max_timestamp < now_ms - config.retention_ms
        too_big = config.retention_bytes >= 0 and total_bytes - segment.size_bytes >= config.retention_bytes
        if not (too_old or too_big):
            break
        total_bytes -= segment.size_bytes
        count += 1
    return count


class RetiredFiles:
    """Files of segments a log let go, renamed ``.deleted``, until file.delete.delay.ms has passed (as Kafka keeps them).

    Segments let go without a clock reading (DeleteRecords) are timed from the next ``sweep``. Not thread-safe: the
    log calls it under its lock.
    """

    def __init__(self) -> None:
        #: (paths, when they were let go; None: not timed yet), oldest first.
        self._retired: list[tuple[list[str], int | None]] = []

    def retire(self, segments: Sequence[Segment], now_ms: int | None) -> None:
        """Close and rename ``segments``' files; they are removed by a ``sweep`` ``delay_ms`` after ``now_ms``."""
        for segment in segments:
            self._retired.append((segment.retire(), now_ms))

    def sweep(self, now_ms: int, delay_ms: int) -> int:
        """Remove the files retired at least ``delay_ms`` before ``now_ms``; return how many segments' files went."""
        kept: list[tuple[list[str], int | None]] = []
        removed = 0
        for paths, retired_ms in self._retired:
            if retired_ms is not None and retired_ms + delay_ms <= now_ms:
                for path in paths:
                    fs.unlink(path)
                removed += 1
            else:
                kept.append((paths, now_ms if retired_ms is None else retired_ms))
        self._retired = kept
        return removed

    def remove_all(self) -> None:
        """Remove every retired file now (the log is closing)."""
        for paths, _ in self._retired:
            for path in paths:
                fs.unlink(path)
        self._retired = []
