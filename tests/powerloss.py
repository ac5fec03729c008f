"""A fault-injecting file system for power-loss tests: it remembers what each fsync covered and, at a
simulated power loss, throws away everything else.

Install it behind the storage seam with ``mqbroker.storage.fs.use(PowerLossFileSystem())`` and
give it disks (``add_disk(root)``): directory trees whose files it models, one per simulated
machine. Paths outside every disk go straight to the operating system.

The model holds the operating system to what POSIX promises and nothing more:

* a file's bytes are durable as of its last fsync;
* a name change (create, rename, unlink, mkdir, rmdir) is durable once its directory has been
  fsynced after it.

``crash(disk, random)`` is the power loss. Every file is rebuilt from what was durable plus a
part of what was not, chosen by the seeded random source: each directory keeps a prefix of its
unsynced name changes (a journaling file system commits them in order), and each file keeps a
torn version of its unsynced bytes, cut at an arbitrary byte, with sectors written or not
independently, or with a size that reached the disk before its data (zeros). ``lose_everything``
keeps nothing that was not fsynced. Data written through plain descriptors (``os.pwritev``)
needs no interception: what an fsync covered is read back from the file when the fsync runs.

``cut_power_after(calls)`` makes the disk's ``calls``-th seam call raise ``PowerCut`` before it
happens (a ``BaseException``, so code under test cannot swallow it): the crash lands in the
middle of whatever the code was doing. ``fsync_works=False`` turns every fsync into a no-op, to
show that the checks built on this file system catch a broker that does not sync.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import os
import random
import shutil
import stat
import threading
from collections.abc import Iterator
from typing import BinaryIO

from zope.interface import implementer

from mqbroker.storage import fs

#: Torn files are also rebuilt sector by sector: each unsynced sector written or not.
SECTOR_BYTES = 512


class PowerCut(BaseException):
    """The power went out in the middle of a file-system call (see ``Disk.cut_power_after``)."""


class SeamBypassedError(AssertionError):
    """A directory changed without going through the storage ``fs`` seam, so the model cannot judge it."""


@dataclasses.dataclass(eq=False)
class _Inode:
    """A file or directory: its durable state, and where it lives now."""

    is_directory: bool
    #: File bytes as of the last fsync.
    durable: bytes = b""
    #: A file's bytes when its last name went (it can come back if that unlink is lost).
    orphaned: bytes | None = None
    #: Directory entries now, as of the last fsync, and the name changes since, oldest first.
    entries: dict[str, int] = dataclasses.field(default_factory=dict)
    durable_entries: dict[str, int] = dataclasses.field(default_factory=dict)
    pending: list[tuple[str, ...]] = dataclasses.field(default_factory=list)
    #: Where it is linked now: (parent inode id, name); None once unlinked.
    parent: tuple[int, str] | None = None


@dataclasses.dataclass(frozen=True)
class CrashReport:
    """What a power loss threw away: unsynced name changes and files whose unsynced bytes were cut."""

    name_changes_lost: int
    files_torn: int


class Disk:
    """The modelled state of one directory tree (one machine's disk)."""

    def __init__(self, file_system: PowerLossFileSystem, root: str) -> None:
        self.root = os.path.abspath(root)
        self._file_system = file_system
        self._inodes: dict[int, _Inode] = {}
        self._next_id = 0
        self._open_files: list[int | BinaryIO] = []
        self._calls_until_cut: int | None = None
        #: Seam calls made on this disk (fsyncs, creates, renames, unlinks, mkdirs, rmdirs).
        self.calls = 0
        self.fsyncs = 0
        os.makedirs(self.root, exist_ok=True)
        self._root_id = self._adopt_tree()

    # ---- faults ----------------------------------------------------------------------------

    def cut_power_after(self, calls: int | None) -> None:
        """Raise ``PowerCut`` at the ``calls``-th seam call on this disk from now (None: never)."""
        assert calls is None or calls >= 1
        self._calls_until_cut = calls

    @contextlib.contextmanager
    def power_cuts_held(self) -> Iterator[None]:
        """No power cut while the block runs (a checker reading the disk); an armed one stays armed."""
        armed, self._calls_until_cut = self._calls_until_cut, None
        try:
            yield
        finally:
            self._calls_until_cut = armed

    def _count_call(self) -> None:
        self.calls += 1
        if self._calls_until_cut is not None:
            self._calls_until_cut -= 1
            if self._calls_until_cut == 0:
                self._calls_until_cut = None
                raise PowerCut(f"power cut on {self.root}")

    def crash(
        self, chooser: random.Random, *, lose_everything: bool = False, keep_everything: bool = False
    ) -> CrashReport:
        """The power goes out: rebuild the tree from what was durable plus a torn part of the rest.

        ``lose_everything`` keeps nothing unsynced; ``keep_everything`` keeps all of it (what a
        killed process leaves: the state just before the interrupted call).
        """
        assert not (lose_everything and keep_everything)
        with self._file_system.lock:
            return self._crash(chooser, lose_everything, keep_everything)

    def _crash(self, chooser: random.Random, lose_everything: bool, keep_everything: bool) -> CrashReport:
        self.check_matches_the_files()
        self._calls_until_cut = None
        self._close_open_files()
        lost = torn = 0
        tree: dict[str, bytes | None] = {}  # relative path -> file bytes, None for a directory

        def rebuild(directory_id: int, relative: str, depth: int) -> None:
            nonlocal lost, torn
            assert depth < 64, "a directory inside itself"
            directory = self._inodes[directory_id]
            if lose_everything or keep_everything:
                kept = len(directory.pending) if keep_everything else 0
            else:
                kept = chooser.randint(0, len(directory.pending))
            lost += len(directory.pending) - kept
            entries = _apply(directory.durable_entries, directory.pending[:kept])
            for name, inode_id in sorted(entries.items()):
                path = os.path.join(relative, name)
                inode = self._inodes[inode_id]
                if inode.is_directory:
                    tree[path] = None
                    rebuild(inode_id, path, depth + 1)
                    continue
                current = self._current_bytes(inode_id)
                if lose_everything or keep_everything:
                    data = current if keep_everything else inode.durable
                else:
                    data = _torn(chooser, inode.durable, current)
                torn += data != current
                tree[path] = data

        rebuild(self._root_id, "", 0)
        self._rewrite(tree)
        self._inodes.clear()
        self._file_system.forget(self)
        self._root_id = self._adopt_tree()
        return CrashReport(name_changes_lost=lost, files_torn=torn)

    def _rewrite(self, tree: dict[str, bytes | None]) -> None:
        for name in os.listdir(self.root):
            path = os.path.join(self.root, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        for relative, data in tree.items():  # parents come before their children (sorted walk)
            path = os.path.join(self.root, relative)
            if data is None:
                os.mkdir(path)
            else:
                with builtins.open(path, "wb") as file:
                    file.write(data)

    def _close_open_files(self) -> None:
        """Close what the crashed code left open on this disk.

        A descriptor the code closed itself may have been reused since: only one that still names
        a file of this disk (so of the crashed world) is closed.
        """
        for handle in self._open_files:
            if isinstance(handle, int):
                with contextlib.suppress(OSError):
                    found = self._file_system.inode_of_descriptor(handle)
                    if found is not None and found[0] is self:
                        os.close(handle)
            else:
                with contextlib.suppress(OSError):
                    handle.close()
        self._open_files.clear()

    # ---- the model --------------------------------------------------------------------------

    def _new_inode(self, inode: _Inode) -> int:
        self._next_id += 1
        self._inodes[self._next_id] = inode
        return self._next_id

    def _adopt_tree(self) -> int:
        """Model the tree as it is on disk now, all of it durable."""
        root_id = self._new_inode(_Inode(is_directory=True))
        self._file_system.register(os.stat(self.root), self, root_id)
        stack = [(self.root, root_id)]
        while stack:
            path, directory_id = stack.pop()
            directory = self._inodes[directory_id]
            for name in sorted(os.listdir(path)):
                child_path = os.path.join(path, name)
                status = os.lstat(child_path)
                is_directory = stat.S_ISDIR(status.st_mode)
                child = _Inode(is_directory=is_directory, parent=(directory_id, name))
                if not is_directory:
                    with builtins.open(child_path, "rb") as file:
                        child.durable = file.read()
                child_id = self._new_inode(child)
                self._file_system.register(status, self, child_id)
                directory.entries[name] = directory.durable_entries[name] = child_id
                if is_directory:
                    stack.append((child_path, child_id))
        return root_id

    def _path_of(self, inode_id: int) -> str:
        parts = []
        while inode_id != self._root_id:
            parent = self._inodes[inode_id].parent
            assert parent is not None, "an unlinked inode has no path"
            inode_id, name = parent
            parts.append(name)
        return os.path.join(self.root, *reversed(parts))

    def _locate(self, path: str) -> tuple[int, str]:
        """(parent directory inode, name) of ``path`` inside this disk."""
        relative = os.path.relpath(os.path.abspath(path), self.root)
        parts = relative.split(os.sep)
        directory_id = self._root_id
        for part in parts[:-1]:
            directory_id = self._inodes[directory_id].entries[part]
        return directory_id, parts[-1]

    def _current_bytes(self, inode_id: int) -> bytes:
        inode = self._inodes[inode_id]
        if inode.parent is None:
            return inode.orphaned if inode.orphaned is not None else inode.durable
        with builtins.open(self._path_of(inode_id), "rb") as file:
            return file.read()

    def _link(self, path: str, inode_id: int) -> None:
        directory_id, name = self._locate(path)
        directory = self._inodes[directory_id]
        assert name not in directory.entries, f"{path} exists already"
        directory.entries[name] = inode_id
        directory.pending.append(("link", name, str(inode_id)))
        self._inodes[inode_id].parent = (directory_id, name)

    def _unlink(self, path: str) -> None:
        directory_id, name = self._locate(path)
        directory = self._inodes[directory_id]
        inode_id = directory.entries.pop(name)
        directory.pending.append(("unlink", name))
        inode = self._inodes[inode_id]
        if not inode.is_directory:
            with builtins.open(path, "rb") as file:
                inode.orphaned = file.read()
        inode.parent = None

    # ---- seam calls ---------------------------------------------------------------------------

    def created(self, path: str, is_directory: bool) -> None:
        """``path`` was just created (empty)."""
        inode_id = self._new_inode(_Inode(is_directory=is_directory))
        self._file_system.register(os.stat(path), self, inode_id)
        self._link(path, inode_id)

    def opened(self, handle: int | BinaryIO) -> None:
        """Remember a descriptor or file to close at the crash."""
        if len(self._open_files) > 1000:  # files the code closed itself need no closing
            self._open_files = [kept for kept in self._open_files if isinstance(kept, int) or not kept.closed]
        self._open_files.append(handle)

    def synced(self, inode_id: int, fd: int) -> None:
        """An fsync of ``fd`` (inode ``inode_id``) returned."""
        self.fsyncs += 1
        if not self._file_system.fsync_works:
            return
        inode = self._inodes[inode_id]
        if inode.is_directory:
            self._check_directory(inode_id)
            inode.durable_entries = dict(inode.entries)
            inode.pending = []
        else:
            with builtins.open(f"/proc/self/fd/{fd}", "rb") as file:
                inode.durable = file.read()

    def renamed(self, source: str, target: str) -> None:
        """``source`` is about to be renamed over ``target``."""
        source_directory, source_name = self._locate(source)
        target_directory, target_name = self._locate(target)
        if target_name in self._inodes[target_directory].entries:
            self._unlink(target)
            self._inodes[target_directory].pending.pop()  # folded into the rename below
        inode_id = self._inodes[source_directory].entries.pop(source_name)
        if source_directory == target_directory:
            directory = self._inodes[source_directory]
            directory.entries[target_name] = inode_id
            directory.pending.append(("rename", source_name, target_name))
        else:
            self._inodes[source_directory].pending.append(("unlink", source_name))
            self._inodes[target_directory].entries[target_name] = inode_id
            self._inodes[target_directory].pending.append(("link", target_name, str(inode_id)))
        self._inodes[inode_id].parent = (target_directory, target_name)

    def unlinked(self, path: str) -> None:
        """``path`` is about to be unlinked (a file) or removed (an empty directory)."""
        self._unlink(path)

    # ---- checks -----------------------------------------------------------------------------

    def _check_directory(self, directory_id: int) -> None:
        path = self._path_of(directory_id)
        modelled = sorted(self._inodes[directory_id].entries)
        actual = sorted(os.listdir(path))
        if modelled != actual:
            raise SeamBypassedError(
                f"{path} holds {sorted(set(actual) - set(modelled))} and lacks {sorted(set(modelled) - set(actual))}"
                " that the model does not know of: a create, rename or delete bypassed mqbroker.storage.fs"
            )

    def check_matches_the_files(self) -> None:
        """Every directory of the model lists what the real directory lists (no seam was bypassed)."""
        stack = [self._root_id]
        while stack:
            directory_id = stack.pop()
            self._check_directory(directory_id)
            for inode_id in self._inodes[directory_id].entries.values():
                if self._inodes[inode_id].is_directory:
                    stack.append(inode_id)


def _apply(entries: dict[str, int], changes: list[tuple[str, ...]]) -> dict[str, int]:
    """A directory's entries after ``changes`` (link name id / unlink name / rename old new)."""
    result = dict(entries)
    for change in changes:
        match change:
            case ("link", name, inode_id):
                result[name] = int(inode_id)
            case ("unlink", name):
                result.pop(name, None)
            case ("rename", old, new):
                if old in result:
                    result[new] = result.pop(old)
    return result


def _torn(chooser: random.Random, durable: bytes, current: bytes) -> bytes:
    """What a file whose durable bytes are ``durable`` and current bytes ``current`` holds after a power loss."""
    if durable == current:
        return durable
    common = 0
    limit = min(len(durable), len(current))
    while common < limit and durable[common] == current[common]:
        common += 1
    merged = bytearray(max(len(durable), len(current)))
    merged[: len(durable)] = durable
    strategy = chooser.randrange(4)
    if strategy == 0:
        return durable  # nothing unsynced reached the disk
    if strategy == 1:
        written = chooser.randint(common, len(current))  # written in order, cut at an arbitrary byte
        merged[common:written] = current[common:written]
    elif strategy == 2:
        written = len(current)
        for start in range(common - common % SECTOR_BYTES, len(current), SECTOR_BYTES):
            if chooser.random() < 0.5:  # sectors reach the disk in any order
                end = min(start + SECTOR_BYTES, len(current))
                merged[start:end] = current[start:end]
    else:
        written = len(current)
        merged[common:written] = current[common:written]  # everything reached the disk
    # The size is metadata of its own: the old one, the new one (zeros where data did not arrive), or where writing stopped.
    size = chooser.choice([len(durable), len(current), max(written, min(len(durable), len(current)))])
    return bytes(merged[:size])


@implementer(fs.IFileSystem)
class PowerLossFileSystem:
    """The storage seam over the operating system, with disks whose durability it models."""

    def __init__(self, *, fsync_works: bool = True) -> None:
        #: False turns every fsync into a no-op (to show the power-loss checks catch it).
        self.fsync_works = fsync_works
        self._disks: list[Disk] = []
        self._inodes: dict[tuple[int, int], tuple[Disk, int]] = {}
        #: Serializes the model: code under test may flush from several threads.
        self.lock = threading.RLock()

    def add_disk(self, root: str) -> Disk:
        """Model the tree under ``root`` (created if missing; what it holds counts as durable)."""
        with self.lock:
            disk = Disk(self, root)
            self._disks.append(disk)
            return disk

    def register(self, status: os.stat_result, disk: Disk, inode_id: int) -> None:
        """The real file ``status`` is inode ``inode_id`` of ``disk`` (an inode number may be reused)."""
        self._inodes[(status.st_dev, status.st_ino)] = (disk, inode_id)

    def forget(self, disk: Disk) -> None:
        """Drop ``disk``'s real inodes (its tree was rebuilt)."""
        self._inodes = {key: value for key, value in self._inodes.items() if value[0] is not disk}

    def inode_of_descriptor(self, fd: int) -> tuple[Disk, int] | None:
        """The disk and modelled inode behind ``fd``, if it is one of ours."""
        status = os.fstat(fd)
        return self._inodes.get((status.st_dev, status.st_ino))

    def disk_of(self, path: str) -> Disk | None:
        """The disk ``path`` lies in, if any."""
        path = os.path.abspath(path)
        for disk in self._disks:
            if path == disk.root or path.startswith(disk.root + os.sep):
                return disk
        return None

    # ---- IFileSystem ---------------------------------------------------------------------------

    def open(self, path: str, flags: int, mode: int) -> int:
        """``os.open``; a file it creates becomes a pending name in its directory."""
        with self.lock:
            disk = self.disk_of(path)
            if disk is None:
                return os.open(path, flags, mode)
            disk._count_call()
            existed = os.path.exists(path)
            fd = os.open(path, flags, mode)
            if not existed:
                disk.created(path, is_directory=False)
            disk.opened(fd)
            return fd

    def open_file(self, path: str, mode: str) -> BinaryIO:
        """The builtin ``open``; a file it creates becomes a pending name in its directory."""
        with self.lock:
            disk = self.disk_of(path)
            if disk is None:
                file: BinaryIO = builtins.open(path, mode)
                return file
            disk._count_call()
            existed = os.path.exists(path)
            file = builtins.open(path, mode)
            if not existed:
                disk.created(path, is_directory=False)
            disk.opened(file)
            return file

    def fsync(self, fd: int) -> None:
        """Record what the fsync covers (no real fsync: the model is the disk)."""
        with self.lock:
            found = self.inode_of_descriptor(fd)
            if found is None:
                os.fsync(fd)
                return
            disk, inode_id = found
            disk._count_call()
            disk.synced(inode_id, fd)

    def rename(self, source: str, target: str) -> None:
        """``os.replace``, a pending name change of the directory (or directories)."""
        with self.lock:
            disk = self.disk_of(source)
            assert disk is self.disk_of(target), "a rename across disks"
            if disk is None:
                os.replace(source, target)
                return
            disk._count_call()
            disk.renamed(source, target)
            os.replace(source, target)

    def unlink(self, path: str) -> None:
        """``os.unlink``, a pending name change (the bytes are kept: the name may come back)."""
        with self.lock:
            disk = self.disk_of(path)
            if disk is not None:
                disk._count_call()
                disk.unlinked(path)
            os.unlink(path)

    def mkdir(self, path: str) -> None:
        """``os.mkdir``, a pending name change of the parent."""
        with self.lock:
            disk = self.disk_of(path)
            if disk is not None:
                disk._count_call()
            os.mkdir(path)
            if disk is not None:
                disk.created(path, is_directory=True)

    def rmdir(self, path: str) -> None:
        """``os.rmdir``, a pending name change of the parent."""
        with self.lock:
            disk = self.disk_of(path)
            if disk is not None:
                disk._count_call()
                disk.unlinked(path)
            os.rmdir(path)


@contextlib.contextmanager
def power_loss_disks(*roots: str, fsync_works: bool = True) -> Iterator[list[Disk]]:
    """Install a ``PowerLossFileSystem`` with one disk per root for the duration."""
    file_system = PowerLossFileSystem(fsync_works=fsync_works)
    disks = [file_system.add_disk(root) for root in roots]
    with fs.use(file_system):
        yield disks


def cut_power_at_random(disk: Disk, chooser: random.Random, calls_max: int) -> int:
    """Arm ``disk`` to lose power at a random one of its next ``calls_max`` seam calls; return which."""
    calls = chooser.randint(1, calls_max)
    disk.cut_power_after(calls)
    return calls


def power_loss_seeds(first: int, count: int) -> list[int]:
    """``count`` seeds from ``first``, or only ``$POWER_LOSS_SEED`` when set (to rerun the seed a failure named)."""
    fixed = os.environ.get("POWER_LOSS_SEED")
    return [int(fixed)] if fixed else [first + number for number in range(count)]
