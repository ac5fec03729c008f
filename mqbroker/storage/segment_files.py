# -*- test-case-name: tests.unit.storage.test_segment_files -*-
"""A bounded set of open segment files shared by a broker's partition logs: opened on demand, closed least recently used.

Without it a broker holds one descriptor per segment it ever touched, so 10,000 partitions need
10,000+ descriptors. Here each segment's `.log` file is a `SegmentFile`, opened when it is used
and kept open until more than ``open_max`` files are open; then the least recently used are
closed. The active segment of a busy partition is used on every append, so it stays open; a
read of a cold segment reopens it. Reopens go through the ``fs`` seam like the first open.

Who may close a descriptor while someone uses it? Nobody, by two rules:

* A segment's descriptor is used under its log's lock (the storage library's threading
  contract: every `PartitionLog` operation holds it), fetched through `SegmentFile.descriptor`
  right before each call that uses it. The set closes a file only after taking that lock
  without waiting, so never under a read, a write or a truncation in another thread. A thread
  opening a file holds that file's log's lock, so it may close the log's other files too (it
  uses one at a time, and no other thread can use them).
* A descriptor used without the log's lock, an fsync in flight (an AIO fsync outlives the call
  that started it), is pinned (`pin` ... `unpin`) and a pinned file is never closed. While
  files are pinned or locked, the count may pass ``open_max`` by that many for a moment.

Thread-safe: one lock guards the set for opens, closes and the bookkeeping. A use of an open
file takes no lock at all: it marks the file recently used (one `OrderedDict.move_to_end`, a
single operation under the interpreter lock) and returns its descriptor, so an append or a
read pays well under a microsecond for the bound.

Closing a descriptor loses nothing: written bytes are in the page cache, and an fsync through a
later descriptor of the same file covers them (fsync(2) syncs the file; since Linux 4.16 a
writeback error nobody has seen yet is reported to a descriptor opened after it, too).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

from mqbroker.storage import fs

#: Open files of a set made without a configured bound (a log opened on its own, tests, tools); a
#: broker sizes its set from the ``segment_files_open_max`` setting (``mqbroker.limits``).
OPEN_MAX_DEFAULT = 64


class SegmentFiles:
    """At most ``open_max`` segment files open at once (beyond those in use), the least recently used closed first."""

    def __init__(self, open_max: int) -> None:
        assert open_max >= 1, "at least one segment file must be allowed open"
        self.open_max = open_max
        self._lock = threading.Lock()
        #: The open files, least recently used first.
        self._open: OrderedDict[SegmentFile, None] = OrderedDict()
        #: open(2) calls made, first opens and reopens alike (metrics, tests).
        self.opens = 0
        #: Files closed to stay within ``open_max``.
        self.evictions = 0

    @property
    def open_count(self) -> int:
        """Segment files open now."""
        return len(self._open)

    def file(self, path: str, owner_lock: threading.Lock | None = None) -> SegmentFile:
        """The `SegmentFile` for ``path``, used under ``owner_lock`` (its log's lock; nothing is opened yet)."""
        return SegmentFile(self, path, owner_lock or threading.Lock())

    def _opened(self, file: SegmentFile, create: bool) -> int:
        """Open ``file`` (if another thread has not meanwhile) and make room for it."""
        with self._lock:
            if file.fd is None:
                file.fd = fs.open(file.path, (os.O_RDWR | os.O_CREAT) if create else os.O_RDWR, 0o644)
                self.opens += 1
                self._open[file] = None
                self._evict(keep=file)
            return file.fd

    def _pin(self, file: SegmentFile) -> int:
        with self._lock:
            file.pins += 1
            file.retired = False
        try:
            return file.descriptor()
        except BaseException:
            self._unpin(file)
            raise

    def _unpin(self, file: SegmentFile) -> None:
        with self._lock:
            file.pins -= 1
            assert file.pins >= 0, f"{file.path} unpinned more often than pinned"
            if file.pins == 0 and file.retired:
                self._close(file)
            elif file.pins == 0:
                self._evict(keep=None)

    def _retire(self, file: SegmentFile) -> None:
        with self._lock:
            if file.fd is None:
                return
            if file.pins:
                file.retired = True  # an fsync in flight: its unpin closes the file
            else:
                self._close(file)

    def _evict(self, keep: SegmentFile | None) -> None:
        """Close least recently used files, neither pinned nor in use, until ``open_max`` are open (lock held).

        ``keep`` is the file being opened, by a caller holding its owner's lock: the other files
        of that owner are idle (only this thread could use them, and it is here).
        """
        excess = len(self._open) - self.open_max
        if excess <= 0:
            return
        held = keep.owner_lock if keep is not None else None
        for candidate in list(self._open):  # a copy: a use elsewhere may reorder the set meanwhile
            if candidate is keep or candidate.pins:
                continue
            if candidate.owner_lock is held:
                self._close(candidate)
            elif candidate.owner_lock.acquire(blocking=False):
                try:
                    self._close(candidate)
                finally:
                    candidate.owner_lock.release()
            else:
                continue  # its log is at work in another thread
            self.evictions += 1
            excess -= 1
            if excess == 0:
                return

    def _close(self, file: SegmentFile) -> None:
        fd, file.fd, file.retired = file.fd, None, False
        del self._open[file]
        assert fd is not None
        os.close(fd)


class SegmentFile:
    """One segment's `.log` file, open only while it is in use or recently used (see `SegmentFiles`)."""

    __slots__ = ("files", "path", "owner_lock", "fd", "pins", "retired")

    def __init__(self, files: SegmentFiles, path: str, owner_lock: threading.Lock) -> None:
        #: The set it belongs to.
        self.files = files
        self.path = path
        #: Its log's lock: held by every user of `descriptor`, taken by the set before it closes the file.
        self.owner_lock = owner_lock
        #: The descriptor while open.
        self.fd: int | None = None
        #: Users of the descriptor outside the owner's lock (fsyncs in flight).
        self.pins = 0
        #: Closed by its segment while pinned: the last unpin closes it.
        self.retired = False

    def descriptor(self, create: bool = False) -> int:
        """The open descriptor, for calls made now under the owner's lock (opened, and marked used, here).

        Only ``create`` makes a missing file (a new segment); otherwise a missing file raises
        ``FileNotFoundError`` rather than coming back empty.
        """
        fd = self.fd
        if fd is None:
            return self.files._opened(self, create)
        self.files._open.move_to_end(self)
        return fd

    def pin(self) -> int:
        """The descriptor, kept open until `unpin` even outside the owner's lock (an fsync in flight)."""
        return self.files._pin(self)

    def unpin(self) -> None:
        """The descriptor `pin` returned is no longer used."""
        self.files._unpin(self)

    def close(self) -> None:
        """Close the file now, or when its last pin goes (its segment was closed or deleted; under the owner's lock)."""
        self.files._retire(self)
