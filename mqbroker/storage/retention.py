# -*- test-case-name: tests.unit.storage.test_retention -*-
"""Retention: how many of a log's oldest segments retention.ms and retention.bytes let go.

Whole segments only, oldest first, never the active one (the last); a segment holding an offset
at or above ``max_offset`` (the broker passes its high watermark) stays, so retention never
removes data consumers have not been allowed to see.
"""

from __future__ import annotations

from collections.abc import Sequence

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
