# -*- test-case-name: tests.unit.storage.test_txn_index -*-
"""The aborted-transaction index of a segment, `<base>.txnindex` (Kafka's ``TransactionIndex``).

One 34-byte entry per transaction whose ABORT marker lies in the segment, in marker order::

    version int16 (0)  producerId int64  firstOffset int64  lastOffset int64  lastStableOffset int64

``lastOffset`` is the marker's offset; ``lastStableOffset`` the partition's last stable offset
once the marker was written (the first offset of another producer's open transaction, else the
marker's offset plus one). A read_committed fetch lists the entries overlapping what it returns;
an entry whose ``lastStableOffset`` reaches the fetch's end proves no later one can overlap it.
The file is derived data: entries are appended with the marker and rebuilt by replaying the
log whenever the file may not match it (an unclean shutdown, a missing or malformed file).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from mqbroker.storage import fs
from mqbroker.storage.errors import CorruptFileError

TXN_INDEX_SUFFIX = ".txnindex"
ENTRY_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_BYTES = _ENTRY.size
assert ENTRY_BYTES == 34


@dataclass(frozen=True, slots=True, kw_only=True)
class AbortedTxn:
    """A transaction a producer aborted: its data lies in [first_offset, last_offset), its marker at last_offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode_entries(entries: list[AbortedTxn]) -> bytes:
    """The file image of ``entries``."""
    return b"".join(
        _ENTRY.pack(ENTRY_VERSION, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset) for e in entries
    )


def decode_entries(data: bytes, base_offset: int, end_offset: int) -> list[AbortedTxn]:
    """Entries of a `.txnindex` whose markers lie in [base_offset, end_offset); ``CorruptFileError`` otherwise."""
    if len(data) % ENTRY_BYTES:
        raise CorruptFileError(f"transaction index of {len(data)} bytes is not a whole number of entries")
    entries = []
    previous = base_offset - 1
    for version, producer_id, first, last, stable in _ENTRY.iter_unpack(data):
        if (version != ENTRY_VERSION or producer_id < 0 or not 0 <= first <= last or stable < 0
                or not previous < last < end_offset):
            raise CorruptFileError(
                f"transaction index entry (version {version}, producer {producer_id}, {first}..{last}) "
                f"does not fit a segment of offsets [{base_offset}, {end_offset})"
            )
        entries.append(AbortedTxn(producer_id=producer_id, first_offset=first, last_offset=last,
                                  last_stable_offset=stable))
        previous = last
    return entries


class TransactionIndex:
    """A segment's aborted transactions, in memory once loaded; new entries are appended to the file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None
        self._written_count = 0

    @property
    def loaded(self) -> bool:
        """True once the entries are in memory."""
        return self._entries is not None

    def exists(self) -> bool:
        """True if the file is there (a segment without it must have its entries rebuilt)."""
        return os.path.exists(self.path)

    def load(self, base_offset: int, end_offset: int) -> bool:
        """Read the file; False (and empty) if it is missing or does not fit offsets [base_offset, end_offset)."""
        try:
            with open(self.path, "rb") as file:
                entries = decode_entries(file.read(), base_offset, end_offset)
        except (FileNotFoundError, CorruptFileError):
            self._entries, self._written_count = [], 0
            return False
        self._entries, self._written_count = entries, len(entries)
        return True

    def reset(self) -> None:
        """Drop every entry, in memory and on disk (a new segment, or before a rebuild)."""
        self._entries, self._written_count = [], 0
        with fs.open_file(self.path, "wb"):
            pass

    def entries(self) -> list[AbortedTxn]:
        """The entries, oldest marker first."""
        assert self._entries is not None, "transaction index used before load"
        return self._entries

    def append(self, entry: AbortedTxn) -> None:
        """Add the entry of an ABORT marker appended after every marker already indexed."""
        assert self._entries is not None, "transaction index used before load"
        assert not self._entries or entry.last_offset > self._entries[-1].last_offset, "markers go backwards"
        self._entries.append(entry)

    def truncate_from(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset`` (the log was cut there)."""
        assert self._entries is not None, "transaction index used before load"
        keep = sum(1 for entry in self._entries if entry.last_offset < offset)
        if keep == len(self._entries):
            return
        del self._entries[keep:]
        if self._written_count > keep:
            os.truncate(self.path, keep * ENTRY_BYTES)
            self._written_count = keep

    def write_pending(self) -> bool:
        """Append the entries not yet in the file; True if the file changed."""
        if self._entries is None or self._written_count == len(self._entries):
            return False
        with fs.open_file(self.path, "ab") as file:
            file.write(encode_entries(self._entries[self._written_count :]))
        self._written_count = len(self._entries)
        return True

    def collect(self, start_offset: int, upper_offset: int, found: list[AbortedTxn]) -> bool:
        """Add to ``found`` the entries overlapping [start_offset, upper_offset); True once no later entry can."""
        assert self._entries is not None, "transaction index used before load"
        for entry in self._entries:
            if entry.last_offset >= start_offset and entry.first_offset < upper_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_offset:
                return True
        return False


class _IndexedSegment(Protocol):
    """What ``collect_aborted`` needs of a segment."""

    base_offset: int
    txn_index: TransactionIndex


def collect_aborted(segments: Sequence[_IndexedSegment], start_offset: int, upper_offset: int) -> list[AbortedTxn]:
    """The aborted transactions overlapping [start_offset, upper_offset) in ``segments`` (from the one holding
    ``start_offset``), searched until an entry proves no later one can overlap (Kafka's ``collectAbortedTxns``)."""
    found: list[AbortedTxn] = []
    for segment in segments:
        if segment.txn_index.collect(start_offset, upper_offset, found):
            break
    return found
