"""The on-disk index of scheduled records, ordered by deliver-at time (SQLite, synchronous, no Twisted).

A share group's scheduled records must not cost memory while they wait: a million of them sit
in this index, one row each (share partition, offset, deliver-at, delivery count, and the record
as a one-record batch when it is known), and only those due are loaded into memory, a bounded
number at a time. The index is derived data: the durable truth is the delay entries in
``__share_group_state``, so each hosting of a state partition starts a fresh file and fills it
from the replay. Nothing is fsynced (a crash loses the file, and the replay rebuilds it).
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from collections.abc import Iterable

_SCHEMA = """
CREATE TABLE delays (
    share_partition INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    deliver_at_ms INTEGER NOT NULL,
    delivery_count INTEGER NOT NULL,
    batch BLOB,
    PRIMARY KEY (share_partition, offset)
);
CREATE INDEX delays_by_time ON delays (share_partition, deliver_at_ms, offset);
"""
#: Pages SQLite may cache (negative: KiB), so a large index costs bounded memory.
_CACHE_KIB = 8 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class IndexedDelay:
    """One scheduled record in the index (``batch`` None: read it from the log when it is due)."""

    share_partition: int
    offset: int
    deliver_at_ms: int
    delivery_count: int
    batch: bytes | None


class DelayIndex:
    """Scheduled records of the share partitions one state partition hosts, by time."""

    def __init__(self, path: str) -> None:
        """Start a fresh index at ``path`` (an older file there is replaced)."""
        for leftover in (path, path + "-journal", path + "-wal", path + "-shm"):
            if os.path.exists(leftover):
                os.unlink(leftover)
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        self._path = path
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode = OFF")
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
        self._db.executescript(_SCHEMA)

    def add(self, entries: Iterable[IndexedDelay]) -> None:
        """Insert (or replace) entries, in one transaction."""
        rows = [(e.share_partition, e.offset, e.deliver_at_ms, e.delivery_count, e.batch) for e in entries]
        if rows:
            with self._transaction():
                self._db.executemany("INSERT OR REPLACE INTO delays VALUES (?, ?, ?, ?, ?)", rows)

    def remove(self, keys: Iterable[tuple[int, int]]) -> None:
        """Delete entries by (share partition, offset)."""
        rows = list(keys)
        if rows:
            with self._transaction():
                self._db.executemany("DELETE FROM delays WHERE share_partition = ? AND offset = ?", rows)

    def remove_partition(self, share_partition: int) -> None:
        """Delete every entry of one share partition (its group was deleted)."""
        self._db.execute("DELETE FROM delays WHERE share_partition = ?", (share_partition,))

    def take_due(self, now_ms: int, share_partition: int, limit: int) -> list[IndexedDelay]:
        """Remove and return up to ``limit`` entries of one share partition due by ``now_ms``, earliest first."""
        if limit <= 0:
            return []
        rows = self._db.execute(
            "SELECT share_partition, offset, deliver_at_ms, delivery_count, batch FROM delays "
            "WHERE share_partition = ? AND deliver_at_ms <= ? ORDER BY deliver_at_ms, offset LIMIT ?",
            (share_partition, now_ms, limit),
        ).fetchall()
        self.remove((row[0], row[1]) for row in rows)
        return [IndexedDelay(*row) for row in rows]

    def next_deliver_at_ms(self, share_partition: int) -> int | None:
        """The earliest deliver-at time of one share partition's entries."""
        row = self._db.execute("SELECT MIN(deliver_at_ms) FROM delays WHERE share_partition = ?",
                               (share_partition,)).fetchone()
        return None if row is None else row[0]

    def offsets_from(self, share_partition: int, offset: int) -> list[int]:
        """Offsets of one share partition's entries at or above ``offset``."""
        rows = self._db.execute("SELECT offset FROM delays WHERE share_partition = ? AND offset >= ? ORDER BY offset",
                                (share_partition, offset)).fetchall()
        return [row[0] for row in rows]

    def count(self, share_partition: int) -> int:
        """Entries of one share partition."""
        return int(self._db.execute("SELECT COUNT(*) FROM delays WHERE share_partition = ?",
                                    (share_partition,)).fetchone()[0])

    def close(self) -> None:
        """Close and delete the file (the next hosting builds its own)."""
        self._db.close()
        if os.path.exists(self._path):
            os.unlink(self._path)

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)


class _Transaction:
    """BEGIN … COMMIT around a block (ROLLBACK on an exception)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN")

    def __exit__(self, error_type: object, *rest: object) -> None:
        self._db.execute("ROLLBACK" if error_type is not None else "COMMIT")
