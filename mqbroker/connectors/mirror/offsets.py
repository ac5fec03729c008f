"""Where a source partition's offsets landed here: the mirror's offset map and its checkpoint form. Pure.

Batches are copied with their offset deltas, so a copied record's target offset is its source
offset plus a distance that changes only where the mirror skips something. The map keeps a
*point* (source offset, target offset) wherever that distance changes, the newest
``POINTS_MAX`` of them, and the ends of the copy: everything below ``source_end`` in the source
is below ``target_end`` here. A consumer group's committed source offset translates exactly
(from the last point at or below it), or to ``target_end`` if the copy has not reached it yet.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mqbroker.connectors.state import CorruptConnectorStateError

#: Distance changes remembered per partition (each costs two numbers in the checkpoint).
POINTS_MAX = 64


@dataclass(slots=True)
class OffsetMap:
    """One partition's copy: its ends and the points where the source-to-target distance changes."""

    source_end: int
    target_end: int
    points: list[tuple[int, int]] = field(default_factory=list)

    def copied(self, source_base: int, target_base: int, source_next: int, target_next: int) -> None:
        """A batch from ``source_base`` landed at ``target_base``; the copy now ends at ``source_next``/``target_next``."""
        if not self.points or self.points[-1][1] - self.points[-1][0] != target_base - source_base:
            self.points.append((source_base, target_base))
            del self.points[:-POINTS_MAX]
        self.source_end, self.target_end = source_next, target_next

    def translate(self, source_offset: int) -> int | None:
        """The target offset a consumer at ``source_offset`` resumes from (None: older than the map knows)."""
        if source_offset >= self.source_end:
            return self.target_end
        index = bisect.bisect_right(self.points, (source_offset, float("inf"))) - 1
        if index < 0:
            return None
        source, target = self.points[index]
        return min(source_offset - source + target, self.target_end)

    def to_progress(self) -> dict[str, Any]:
        """The checkpoint form."""
        return {"source": self.source_end, "target": self.target_end, "points": [list(point) for point in self.points]}


def encode_maps(maps: Mapping[tuple[str, int], OffsetMap]) -> dict[str, Any]:
    """A mirror task's checkpoint: ``{"partitions": {"<source topic>/<partition>": map}}``."""
    return {"partitions": {f"{topic}/{partition}": offset_map.to_progress()
                           for (topic, partition), offset_map in maps.items()}}


def decode_maps(progress: Mapping[str, Any]) -> dict[tuple[str, int], OffsetMap]:
    """``encode_maps``'s form back; ``CorruptConnectorStateError`` for anything else."""
    partitions = progress.get("partitions")
    if not isinstance(partitions, dict):
        raise CorruptConnectorStateError("a mirror checkpoint without its partitions")
    maps = {}
    for name, stored in partitions.items():
        topic, _, number = name.rpartition("/")
        if not topic or not number.isascii() or not number.isdigit() or len(number) > 9 or not isinstance(stored, dict):
            raise CorruptConnectorStateError(f"mirror checkpoint entry {name[:60]!r} is malformed")
        source, target, points = stored.get("source"), stored.get("target"), stored.get("points")
        if not (_offset(source) and _offset(target) and isinstance(points, list) and len(points) <= POINTS_MAX
                and all(isinstance(point, list) and len(point) == 2 and _offset(point[0]) and _offset(point[1])
                        for point in points)):
            raise CorruptConnectorStateError(f"mirror checkpoint entry {name[:60]!r} holds no offsets")
        ordered = [(point[0], point[1]) for point in points]
        if ordered != sorted(ordered):
            raise CorruptConnectorStateError(f"mirror checkpoint entry {name[:60]!r}: points out of order")
        maps[topic, int(number)] = OffsetMap(source_end=source, target_end=target, points=ordered)
    return maps


def _offset(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63
