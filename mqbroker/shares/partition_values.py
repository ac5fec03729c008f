"""The values a share partition's state machine takes and gives, pure: record states, acquired ranges, dead
letters, scheduled records, due entries, and the views ``describe`` and tests read."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

#: Member name the snapshot and describe use for records no member holds.
NO_OWNER = ""


class RecordState(enum.Enum):
    """Where one offset of the region is in its life."""

    AVAILABLE = "available"
    ACQUIRED = "acquired"
    DEAD_LETTERING = "dead_lettering"
    DONE = "done"


class DeathReason(enum.Enum):
    """Why a record went to the dead-letter topic (RabbitMQ's x-death reasons where they match)."""

    REJECTED = "rejected"
    DELIVERY_LIMIT = "delivery_limit"
    MAXLEN = "maxlen"


@dataclasses.dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Records leased to a member by one acquisition: ``first..last``, each delivered ``delivery_count`` times."""

    first: int
    last: int
    delivery_count: int


@dataclasses.dataclass(frozen=True, slots=True)
class DeadLetter:
    """Records to copy to the dead-letter topic, then report with ``dead_lettered(first, last)``."""

    first: int
    last: int
    reason: DeathReason
    delivery_count: int
    last_error: str


@dataclasses.dataclass(frozen=True, slots=True)
class Scheduled:
    """A record held back until ``deliver_at_ms``: store it in the delay index (durably, with the snapshot)."""

    offset: int
    deliver_at_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class DueEntry:
    """A due record's delay entry: rewritten when its delivery count changes, removed (None) once it is done."""

    offset: int
    deliver_at_ms: int
    delivery_count: int


@dataclasses.dataclass(frozen=True, slots=True)
class RunView:
    """One run as it is now (``due``: a due record outside the region)."""

    first: int
    last: int
    state: RecordState
    delivery_count: int
    owner: str
    deadline_ms: int
    due: bool


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PartitionStats:
    """What ``share-groups describe`` shows of one partition."""

    start_offset: int
    end_offset: int
    available: int
    acquired: int
    dead_lettering: int
    due: int
    #: Records delivered at least once and not done, by delivery count.
    delivery_counts: Mapping[int, int]
