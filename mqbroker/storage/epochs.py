"""The leader-epoch cache of one partition: which leader epoch started at which offset (KIP-101).

Every batch carries the epoch of the leader that appended it; this cache remembers the first
offset of each epoch so a leader can tell a follower where their logs diverge (the end of the
follower's epoch in the leader's log) without reading the log. It is small and changes only
when leadership does; it is written atomically to ``leader-epoch-checkpoint`` (Kafka's text
layout: version, count, ``<epoch> <start offset>`` lines).

Changes wait in memory (`assign`, `forget_from`) until `pending` hands them to a writer
off the append path: the partition log persists them when the log manager checkpoints (in a
thread), before a recovery point passes them, and at close. A crash loses nothing by not having
them on disk: the log never reports a recovery point past the first offset a change concerns
(`unpersisted_from`), and recovery rebuilds the cache from the batches past the recovery point
(each carries its leader epoch), as Kafka does; a leadership's first append thus costs no fsync
on the reactor (KAFKA-15046 made the same choice for a broker taking up thousands of leaderships).
A leadership's epoch (`begin`) is not even pending until its first batch is appended (`appended`):
a broker taking up 10,000 leaderships writes no checkpoint for those that write nothing.
Truncation is the exception: the log writes what it forgot at once, since the cut may lie below a
recovery point already written (and so do appends below such a point).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import NamedTuple

from mqbroker.storage import checkpoint
from mqbroker.storage.errors import CorruptFileError

EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
EPOCH_CHECKPOINT_VERSION = 0
#: No epoch: a log whose batches were never stamped by a leader.
UNDEFINED_EPOCH = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochEntry:
    """Leader epoch ``epoch`` wrote its first batch at ``start_offset``."""

    epoch: int
    start_offset: int


class PendingCheckpoint(NamedTuple):
    """The cache's bytes as of change number ``version``, for `LeaderEpochCache.write`."""

    version: int
    data: bytes


class LeaderEpochCache:
    """Epoch → start offset, epochs and start offsets strictly increasing; changes persisted by `write`.

    Not thread-safe on its own: the partition log calls the in-memory methods under its lock and
    serializes `write` calls with a lock of their own.
    """

    def __init__(self, path: str, entries: list[EpochEntry]) -> None:
        self.path = path
        self._entries = entries
        #: Counts changes; the file on disk holds change number ``_written_version``.
        self._version = 0
        self._written_version = 0
        #: The lowest offset a change not yet on disk concerns (None: the file is up to date).
        self._unpersisted_from: int | None = None
        #: Where the epoch of a leadership that has appended nothing yet starts (None: no such epoch).
        self._begun_from: int | None = None

    @classmethod
    def load(cls, directory: str) -> LeaderEpochCache:
        """Read the cache of the partition in ``directory`` (empty when the file is missing)."""
        path = os.path.join(directory, EPOCH_CHECKPOINT_FILE)
        if not os.path.exists(path):
            return cls(path, [])
        with open(path, "rb") as file:
            return cls(path, _parse(path, file.read()))

    @property
    def entries(self) -> list[EpochEntry]:
        """The entries, oldest epoch first (a copy)."""
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The newest epoch known, or ``UNDEFINED_EPOCH``."""
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (in memory); True when that was news.

        An epoch not newer than the latest is ignored: batches of an epoch come after its start.
        """
        if not self._add(epoch, start_offset):
            return False
        self._changed(start_offset)
        return True

    def begin(self, epoch: int, start_offset: int) -> None:
        """A leadership's ``epoch`` starts at the log end ``start_offset``: pending only once it appends (`appended`)."""
        if self._add(epoch, start_offset):
            self._begun_from = start_offset

    def appended(self) -> None:
        """A batch was appended: the epoch of a leadership that had appended nothing is now pending."""
        if self._begun_from is not None:
            self._changed(self._begun_from)
            self._begun_from = None

    @property
    def unpersisted_from(self) -> int | None:
        """The lowest offset a change not yet written concerns (None: the file holds every change)."""
        return self._unpersisted_from

    def pending(self) -> PendingCheckpoint | None:
        """What `write` must put on disk, or None when the file holds every change."""
        if self._unpersisted_from is None:
            return None
        lines = [str(EPOCH_CHECKPOINT_VERSION), str(len(self._entries))]
        lines += [f"{entry.epoch} {entry.start_offset}" for entry in self._entries]
        return PendingCheckpoint(self._version, ("\n".join(lines) + "\n").encode())

    def write(self, pending: PendingCheckpoint) -> None:
        """Write ``pending`` atomically and durably, unless a later version was written meanwhile.

        May run outside the caller's lock; the caller serializes writes and then calls `written`.
        """
        if pending.version > self._written_version:
            checkpoint.write_atomically(self.path, pending.data)
            self._written_version = pending.version

    def written(self, pending: PendingCheckpoint) -> None:
        """``pending`` is on disk: if nothing changed since it was taken, the file is up to date."""
        if pending.version == self._version:
            self._unpersisted_from = None

    def _add(self, epoch: int, start_offset: int) -> bool:
        if epoch <= self.latest_epoch or epoch == UNDEFINED_EPOCH:
            return False
        assert not self._entries or start_offset >= self._entries[-1].start_offset, (epoch, start_offset, self._entries)
        if self._entries and self._entries[-1].start_offset == start_offset:
            self._entries.pop()  # the older epoch wrote nothing: the newer one replaces it
        self._entries.append(EpochEntry(epoch=epoch, start_offset=start_offset))
        return True

    def _changed(self, offset: int) -> None:
        self._version += 1
        self._unpersisted_from = offset if self._unpersisted_from is None else min(self._unpersisted_from, offset)

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest known epoch <= ``epoch``, the offset where it ends in this log).

        The end of an epoch is the start of the next known epoch, or the log end for the latest.
        When no known epoch is <= ``epoch`` the answer is (UNDEFINED_EPOCH, start of the first epoch).
        """
        found = UNDEFINED_EPOCH
        end_offset = self._entries[0].start_offset if self._entries else log_end_offset
        for slot, entry in enumerate(self._entries):
            if entry.epoch > epoch:
                break
            found = entry.epoch
            end_offset = self._entries[slot + 1].start_offset if slot + 1 < len(self._entries) else log_end_offset
        return found, end_offset

    def persist(self) -> None:
        """Write every change now (`pending`, `write` and `written` in one, for a caller serializing writes)."""
        pending = self.pending()
        if pending is not None:
            self.write(pending)
            self.written(pending)

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after ``end_offset`` (the log was cut there), on disk at once."""
        self.forget_from(end_offset)
        self.persist()

    def forget_from(self, end_offset: int) -> bool:
        """Forget epochs that start at or after the log end ``end_offset`` in memory only; True if any were."""
        kept = [entry for entry in self._entries if entry.start_offset < end_offset]
        if len(kept) == len(self._entries):
            return False
        self._entries = kept
        if self._begun_from is not None and self._begun_from >= end_offset:
            self._begun_from = None
        self._changed(end_offset)
        return True


def _parse(path: str, data: bytes) -> list[EpochEntry]:
    try:
        lines = data.decode("utf-8").splitlines()
        version, count = int(lines[0]), int(lines[1])
        entries = []
        for line in lines[2:]:
            epoch, start_offset = line.split(" ")
            entries.append(EpochEntry(epoch=int(epoch), start_offset=int(start_offset)))
    except (IndexError, ValueError) as error:  # UnicodeDecodeError is a ValueError
        raise CorruptFileError(f"leader epoch checkpoint {path} is malformed: {error}") from None
    if version != EPOCH_CHECKPOINT_VERSION or count != len(entries):
        raise CorruptFileError(f"leader epoch checkpoint {path} has version {version} and {count} entries")
    return entries
