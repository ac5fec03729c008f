"""``IRaftStorage`` on files: the durable Raft log, hard state and latest snapshot of one node.

A node's directory holds three files:

* ``hard-state``: term, vote and commit index plus a CRC-32C, replaced atomically (temp file,
  fsync, rename, fsync of the directory: ``mqbroker.storage.checkpoint``). It is rewritten
  only when the term or vote changes, or when a snapshot moves the commit index: a commit
  index that lags on disk is safe, the leader tells the node again.
* ``snapshot``: the latest snapshot (``codec.encode_snapshot``) plus a CRC-32C, replaced atomically.
* ``entries.log``: append-only records ``length u32, crc32c u32, term u64, index u64, kind u8,
  data``, fsynced once per ``save``. On open, the first record that is short or fails its
  CRC ends the log: a crash tore it, so it and everything after are cut off.

The directory is 0700 and the files 0600 whatever the umask: the metadata log holds the users'
salted SCRAM keys and every ACL.

Entries are also kept in memory (the metadata log is bounded by snapshots), so reads never
touch the disk. Synchronous file I/O only: the Twisted node calls ``save`` off the reactor thread.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence

import crc32c
from zope.interface import implementer

from mqbroker.raft.codec import decode_snapshot, encode_snapshot
from mqbroker.raft.errors import RaftCodecError
from mqbroker.raft.log import IRaftStorage, StoredEntries
from mqbroker.raft.messages import Entry, EntryKind, HardState, Snapshot
from mqbroker.storage import fs
from mqbroker.storage.checkpoint import write_atomically
from mqbroker.storage.errors import CorruptFileError

HARD_STATE_FILE = "hard-state"
SNAPSHOT_FILE = "snapshot"
ENTRIES_FILE = "entries.log"

_RECORD_HEAD = struct.Struct(">II")
_ENTRY_HEAD = struct.Struct(">QQB")
_HARD_STATE = struct.Struct(">QIQ")
_CRC = struct.Struct(">I")
#: The Raft files hold secrets (users' SCRAM keys): only the broker's own user may read them.
FILE_MODE = 0o600
DIRECTORY_MODE = 0o700


def _encode_entry(entry: Entry) -> bytes:
    body = _ENTRY_HEAD.pack(entry.term, entry.index, entry.kind) + entry.data
    return _RECORD_HEAD.pack(len(body), crc32c.crc32c(body)) + body


def _with_crc(body: bytes) -> bytes:
    return _CRC.pack(crc32c.crc32c(body)) + body


def _read_checked(path: str) -> bytes | None:
    """The body of a CRC-prefixed file, None if it does not exist; corruption is an error."""
    if not os.path.exists(path):
        return None
    with open(path, "rb") as file:
        data = file.read()
    if len(data) < _CRC.size or _CRC.unpack_from(data)[0] != crc32c.crc32c(data[_CRC.size :]):
        raise CorruptFileError(f"{path} fails its CRC; it is written atomically, so the disk corrupted it")
    return data[_CRC.size :]


@implementer(IRaftStorage)
class FileRaftStorage(StoredEntries):
    """Raft state in one directory; open it with ``FileRaftStorage.open``."""

    def __init__(
        self, directory: str, hard_state: HardState, snapshot: Snapshot, entries: list[Entry], offsets: list[int]
    ) -> None:
        """Use ``open`` instead: this takes the recovered state."""
        self.directory = directory
        self._hard_state = hard_state
        self._snapshot = snapshot
        self._entries = entries
        #: File position of each entry's record, to truncate at a conflicting index.
        self._offsets = offsets
        self._file = fs.open_file(os.path.join(directory, ENTRIES_FILE), "r+b")
        self._file.seek(0, os.SEEK_END)

    @classmethod
    def open(cls, directory: str, bootstrap: Snapshot | None = None) -> FileRaftStorage:
        """Recover the state in ``directory`` (created if missing); ``bootstrap`` seeds a new node's snapshot."""
        fs.makedirs(directory)
        _restrict_permissions(directory)
        snapshot_body = _read_checked(os.path.join(directory, SNAPSHOT_FILE))
        if snapshot_body is None:
            snapshot = bootstrap or Snapshot()
            write_atomically(os.path.join(directory, SNAPSHOT_FILE), _with_crc(encode_snapshot(snapshot)), FILE_MODE)
        else:
            try:
                snapshot = decode_snapshot(snapshot_body)
            except RaftCodecError as error:
                raise CorruptFileError(f"snapshot in {directory} does not decode: {error.message}") from None
        hard_state_body = _read_checked(os.path.join(directory, HARD_STATE_FILE))
        hard_state = HardState()
        if hard_state_body is not None:
            if len(hard_state_body) != _HARD_STATE.size:
                raise CorruptFileError(f"hard state in {directory} has {len(hard_state_body)} bytes, not "
                                         f"{_HARD_STATE.size}")
            term, vote, commit = _HARD_STATE.unpack(hard_state_body)
            hard_state = HardState(term=term, vote=vote, commit=commit)
        entries, offsets = _recover_entries(os.path.join(directory, ENTRIES_FILE), snapshot)
        return cls(directory, hard_state, snapshot, entries, offsets)

    def close(self) -> None:
        """Release the entries file."""
        self._file.close()


    # ---- writing ---------------------------------------------------------------------------

    def save(self, hard_state: HardState | None, entries: Sequence[Entry], snapshot: Snapshot | None) -> None:
        """Durably store a ``Ready``: snapshot, then entries, then hard state."""
        if snapshot is not None:
            self._install_snapshot(snapshot)
        if entries:
            self._append(entries)
        if hard_state is not None:
            self._save_hard_state(hard_state, force=snapshot is not None)

    def compact(self, snapshot: Snapshot) -> None:
        """Keep ``snapshot`` and drop the entries it covers (the entries file is rewritten)."""
        index = snapshot.metadata.index
        assert self.first_index() <= index <= self.last_index(), "compacting outside the stored log"
        assert self.term(index) == snapshot.metadata.term
        write_atomically(os.path.join(self.directory, SNAPSHOT_FILE), _with_crc(encode_snapshot(snapshot)), FILE_MODE)
        remaining = self._entries[index + 1 - self.first_index() :]
        self._snapshot = snapshot
        self._rewrite_entries(remaining)

    def _install_snapshot(self, snapshot: Snapshot) -> None:
        # A crash between these two writes leaves old entries after the new snapshot; recovery
        # keeps them only if they continue the snapshot's last entry (see _recover_entries).
        write_atomically(os.path.join(self.directory, SNAPSHOT_FILE), _with_crc(encode_snapshot(snapshot)), FILE_MODE)
        self._snapshot = snapshot
        self._rewrite_entries([])

    def _rewrite_entries(self, entries: list[Entry]) -> None:
        self._file.close()
        records = [_encode_entry(entry) for entry in entries]
        write_atomically(os.path.join(self.directory, ENTRIES_FILE), b"".join(records), FILE_MODE)
        self._entries = list(entries)
        self._offsets = []
        position = 0
        for record in records:
            self._offsets.append(position)
            position += len(record)
        self._file = fs.open_file(os.path.join(self.directory, ENTRIES_FILE), "r+b")
        self._file.seek(0, os.SEEK_END)

    def _append(self, entries: Sequence[Entry]) -> None:
        first = entries[0].index
        assert self.first_index() <= first <= self.last_index() + 1, "a gap in the stored log"
        keep = first - self.first_index()
        if keep < len(self._entries):
            self._file.truncate(self._offsets[keep])  # a new leader overwrote these entries
            del self._entries[keep:]
            del self._offsets[keep:]
        self._file.seek(0, os.SEEK_END)
        position = self._file.tell()
        records = []
        for entry in entries:
            record = _encode_entry(entry)
            self._offsets.append(position)
            position += len(record)
            records.append(record)
        self._file.write(b"".join(records))
        self._file.flush()
        fs.fsync(self._file.fileno())
        self._entries.extend(entries)

    def _save_hard_state(self, hard_state: HardState, *, force: bool) -> None:
        changed_vote = (hard_state.term, hard_state.vote) != (self._hard_state.term, self._hard_state.vote)
        self._hard_state = hard_state
        if changed_vote or force:
            body = _HARD_STATE.pack(hard_state.term, hard_state.vote, hard_state.commit)
            write_atomically(os.path.join(self.directory, HARD_STATE_FILE), _with_crc(body), FILE_MODE)


def _restrict_permissions(directory: str) -> None:
    """Make the directory 0700 and its files 0600 (files written by an older version may be 0644)."""
    os.chmod(directory, DIRECTORY_MODE)
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            os.chmod(path, FILE_MODE)


def _recover_entries(path: str, snapshot: Snapshot) -> tuple[list[Entry], list[int]]:
    """Read the entries after ``snapshot``, cutting off a torn or corrupt tail."""
    if not os.path.exists(path):
        write_atomically(path, b"", FILE_MODE)
    with open(path, "rb") as file:
        data = file.read()
    records: list[tuple[Entry, int]] = []
    position = 0
    while position + _RECORD_HEAD.size <= len(data):
        length, crc = _RECORD_HEAD.unpack_from(data, position)
        body = data[position + _RECORD_HEAD.size : position + _RECORD_HEAD.size + length]
        if len(body) != length or length < _ENTRY_HEAD.size or crc32c.crc32c(body) != crc:
            break
        term, index, kind = _ENTRY_HEAD.unpack_from(body)
        if kind not in (EntryKind.NORMAL, EntryKind.CONFIGURATION):
            break
        if records and index != records[-1][0].index + 1:
            break
        records.append((Entry(term=term, index=index, kind=EntryKind(kind), data=body[_ENTRY_HEAD.size :]), position))
        position += _RECORD_HEAD.size + length
    continuation = _after_snapshot(records, snapshot)
    if continuation is None:
        position = 0  # entries that do not continue the snapshot are stale: drop them all
        continuation = [], []
    if position != len(data):
        with fs.open_file(path, "r+b") as file:
            file.truncate(position)  # the torn tail of a write a crash interrupted, or stale entries
            file.flush()
            fs.fsync(file.fileno())
    return continuation


def _after_snapshot(records: list[tuple[Entry, int]], snapshot: Snapshot) -> tuple[list[Entry], list[int]] | None:
    """The recovered entries after ``snapshot`` (and their offsets); None if they do not continue it."""
    index, term = snapshot.metadata.index, snapshot.metadata.term
    at_snapshot = [entry for entry, _ in records if entry.index == index]
    continues = (at_snapshot and at_snapshot[0].term == term) or (records and records[0][0].index == index + 1)
    if records and not continues:
        return None
    kept = [(entry, offset) for entry, offset in records if entry.index > index]
    return [entry for entry, _ in kept], [offset for _, offset in kept]
