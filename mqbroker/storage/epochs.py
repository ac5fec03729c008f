"""The leader-epoch cache of one partition: which leader epoch started at which offset (KIP-101).

Every batch carries the epoch of the leader that appended it; this cache remembers the first
offset of each epoch so a leader can tell a follower where their logs diverge (the end of the
follower's epoch in the leader's log) without reading the log. It is small and changes only
when leadership does; it is written atomically to ``leader-epoch-checkpoint`` (Kafka's text
layout: version, count, ``<epoch> <start offset>`` lines) before any batch it describes.

Two changes wait in memory for the next write instead (`begin`, `forget_from`): a leadership's
epoch that has written nothing yet, and the entries a recovered log end cut off. Both concern
only offsets at or past the log end, and opening a log drops every entry starting there, so a
crash loses nothing by not having them on disk; the append that writes past the end persists them
first. A broker taking up thousands of leaderships at start-up thus writes no checkpoint at all
rather than three fsyncs per partition (cf. KAFKA-15046).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

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


class LeaderEpochCache:
    """Epoch → start offset, epochs and start offsets strictly increasing; persisted on every change."""

    def __init__(self, path: str, entries: list[EpochEntry]) -> None:
        self.path = path
        self._entries = entries
        self._unpersisted = False

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
        """Record that ``epoch`` starts at ``start_offset``; True when that was news (and was persisted).

        An epoch not newer than the latest is ignored: batches of an epoch come after its start.
        """
        if not self._add(epoch, start_offset):
            return False
        self._persist()
        return True

    def begin(self, epoch: int, start_offset: int) -> None:
        """A leadership's ``epoch`` starts at the log end ``start_offset``: in memory until a batch is appended."""
        if self._add(epoch, start_offset):
            self._unpersisted = True

    def persist_pending(self) -> None:
        """Write what `begin` and `forget_from` kept in memory (before a batch past the log end is written)."""
        if self._unpersisted:
            self._persist()

    def _add(self, epoch: int, start_offset: int) -> bool:
        if epoch <= self.latest_epoch or epoch == UNDEFINED_EPOCH:
            return False
        assert not self._entries or start_offset >= self._entries[-1].start_offset, (epoch, start_offset, self._entries)
        if self._entries and self._entries[-1].start_offset == start_offset:
            self._entries.pop()  # the older epoch wrote nothing: the newer one replaces it
        self._entries.append(EpochEntry(epoch=epoch, start_offset=start_offset))
        return True

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

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after ``end_offset`` (the log was cut there), on disk at once."""
        if self.forget_from(end_offset):
            self._persist()

    def forget_from(self, end_offset: int) -> bool:
        """Forget epochs that start at or after the log end ``end_offset`` in memory only; True if any were."""
        kept = [entry for entry in self._entries if entry.start_offset < end_offset]
        if len(kept) == len(self._entries):
            return False
        self._entries = kept
        self._unpersisted = True
        return True

    def _persist(self) -> None:
        lines = [str(EPOCH_CHECKPOINT_VERSION), str(len(self._entries))]
        lines += [f"{entry.epoch} {entry.start_offset}" for entry in self._entries]
        checkpoint.write_atomically(self.path, ("\n".join(lines) + "\n").encode())
        self._unpersisted = False


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
