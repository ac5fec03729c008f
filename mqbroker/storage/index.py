"""Sparse segment indexes with fixed-width entries: derived data, rebuilt from the `.log` when doubtful.

``.index`` entries are (relative last offset int32, batch position int32): the batch starting
at that position ends at that offset. ``.timeindex`` entries are (timestamp int64, relative
last offset int32): every batch up to and including that offset has timestamps <= timestamp.
Entries live in memory once loaded; new ones are appended to the file by `write_pending`
(durability comes from the `.log`, so a torn index is simply rebuilt).
"""

from __future__ import annotations

import array
import bisect
import os
import struct
from collections.abc import Callable

from mqbroker.storage import fs


class SparseIndex:
    """An ordered list of (key, value) entries in a fixed-width file, loaded on first use."""

    def __init__(self, path: str, entry: struct.Struct, key_type: str, value_type: str) -> None:
        self.path = path
        self._entry = entry
        self._key_type = key_type
        self._value_type = value_type
        self._keys: array.array[int] | None = None
        self._values = array.array(value_type)
        self._written_count = 0

    @property
    def loaded(self) -> bool:
        """True once entries are in memory (after `load`, `reset` or an append)."""
        return self._keys is not None

    def load(self, is_valid: Callable[[SparseIndex], bool]) -> bool:
        """Read the file; keep it only if it is well formed and ``is_valid`` agrees, else start empty.

        A missing file is not valid either: its segment's entries must be rebuilt from the log.
        """
        try:
            with open(self.path, "rb") as file:
                data = file.read()
        except FileNotFoundError:
            self.reset()
            return False
        entry_bytes = self._entry.size
        self._keys = array.array(self._key_type)
        self._values = array.array(self._value_type)
        well_formed = len(data) % entry_bytes == 0
        if well_formed:
            for key, value in self._entry.iter_unpack(data):
                self._keys.append(key)
                self._values.append(value)
            well_formed = all(a <= b for a, b in zip(self._keys, self._keys[1:])) and is_valid(self)
        self._written_count = len(self._keys)
        if not well_formed:
            self.reset()
        return well_formed

    def reset(self) -> None:
        """Drop every entry (in memory and on disk) before a rebuild."""
        self._keys = array.array(self._key_type)
        self._values = array.array(self._value_type)
        self._written_count = 0
        with fs.open_file(self.path, "wb"):
            pass

    def __len__(self) -> int:
        assert self._keys is not None, "index used before load"
        return len(self._keys)

    def last(self) -> tuple[int, int] | None:
        """The newest entry, or None when empty."""
        assert self._keys is not None, "index used before load"
        return (self._keys[-1], self._values[-1]) if self._keys else None

    def append(self, key: int, value: int) -> None:
        """Add an entry whose key is not below the last one."""
        assert self._keys is not None, "index used before load"
        assert not self._keys or key >= self._keys[-1], f"index key {key} goes backwards"
        self._keys.append(key)
        self._values.append(value)

    def floor(self, key: int) -> tuple[int, int] | None:
        """The last entry whose key is <= ``key``."""
        assert self._keys is not None, "index used before load"
        slot = bisect.bisect_right(self._keys, key) - 1
        return (self._keys[slot], self._values[slot]) if slot >= 0 else None

    def below(self, key: int) -> tuple[int, int] | None:
        """The last entry whose key is < ``key``."""
        assert self._keys is not None, "index used before load"
        slot = bisect.bisect_left(self._keys, key) - 1
        return (self._keys[slot], self._values[slot]) if slot >= 0 else None

    def last_within(self, key: int, value: int) -> tuple[int, int] | None:
        """The last entry whose key is <= ``key`` and whose value is <= ``value`` (both ascend)."""
        assert self._keys is not None, "index used before load"
        slot = min(bisect.bisect_right(self._keys, key), bisect.bisect_right(self._values, value)) - 1
        return (self._keys[slot], self._values[slot]) if slot >= 0 else None

    def value_after(self, key: int) -> int | None:
        """The value of the entry that follows the entry whose key is exactly ``key``, if both exist."""
        assert self._keys is not None, "index used before load"
        slot = bisect.bisect_left(self._keys, key)
        if slot + 1 < len(self._keys) and self._keys[slot] == key:
            return self._values[slot + 1]
        return None

    def truncate(self, keep: Callable[[int, int], bool]) -> None:
        """Drop the entries from the first one ``keep(key, value)`` rejects."""
        assert self._keys is not None, "index used before load"
        count = 0
        while count < len(self._keys) and keep(self._keys[count], self._values[count]):
            count += 1
        del self._keys[count:]
        del self._values[count:]
        if self._written_count > count:
            os.truncate(self.path, count * self._entry.size)
            self._written_count = count

    def write_pending(self) -> bool:
        """Append the entries not yet in the file; True if the file changed."""
        if self._keys is None or self._written_count == len(self._keys):
            return False
        pack = self._entry.pack
        data = b"".join(
            pack(self._keys[slot], self._values[slot]) for slot in range(self._written_count, len(self._keys))
        )
        with fs.open_file(self.path, "ab") as file:
            file.write(data)
        self._written_count = len(self._keys)
        return True

    def entries(self) -> list[tuple[int, int]]:
        """Every entry, oldest first (for checks and tests)."""
        assert self._keys is not None, "index used before load"
        return list(zip(self._keys, self._values))


def offset_index(path: str) -> SparseIndex:
    """A `.index`: relative last offset -> position of the batch's first byte."""
    return SparseIndex(path, struct.Struct(">ii"), "i", "i")


def time_index(path: str) -> SparseIndex:
    """A `.timeindex`: timestamp -> relative last offset of the batch that reached it."""
    return SparseIndex(path, struct.Struct(">qi"), "q", "i")
