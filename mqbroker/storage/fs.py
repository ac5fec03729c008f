# -*- test-case-name: tests.test_powerloss -*-
"""The file-system seam of the storage library and the Raft log: every call that decides what survives a power loss.

Data moves through plain descriptors on the hot paths (``os.pwritev``, ``os.pread``,
``os.ftruncate``): a power loss decides their fate only through what was fsynced. Everything
else that matters then goes through this module: fsync, creating files and directories,
renaming and deleting them. Production runs on the operating system (``OsFileSystem``); a test
installs a fault-injecting file system with ``use`` (``tests/powerloss.py``) that records what
each fsync covered and can simulate a power loss. A module-level call costs one indirection
and none of them is made per record.

The rules the callers follow (POSIX promises no more): a written file's bytes are durable
once the file is fsynced; a created, renamed or deleted name is durable once its directory is
fsynced. ``replace`` and ``makedirs`` do both halves themselves.
"""

from __future__ import annotations

import builtins
import contextlib
import os
from collections.abc import Iterator
from typing import BinaryIO

from zope.interface import Interface, implementer


class IFileSystem(Interface):
    """The primitives the storage library's durability depends on."""

    def open(path: str, flags: int, mode: int) -> int:
        """``os.open``: a descriptor (``O_CREAT`` may create the file)."""

    def open_file(path: str, mode: str) -> BinaryIO:
        """``open`` in a binary mode (``"wb"``, ``"ab"`` or ``"r+b"``) for writing."""

    def fsync(fd: int) -> None:
        """Make the file's (or directory's) contents behind ``fd`` durable."""

    def rename(source: str, target: str) -> None:
        """``os.replace``: atomically give ``source``'s file the name ``target``."""

    def unlink(path: str) -> None:
        """Remove a file's name."""

    def mkdir(path: str) -> None:
        """Create a directory."""

    def rmdir(path: str) -> None:
        """Remove an empty directory."""


@implementer(IFileSystem)
class OsFileSystem:
    """The operating system's file system: what production uses."""

    def open(self, path: str, flags: int, mode: int) -> int:
        """``os.open``."""
        return os.open(path, flags, mode)

    def open_file(self, path: str, mode: str) -> BinaryIO:
        """The builtin ``open``."""
        assert "b" in mode, mode
        file: BinaryIO = builtins.open(path, mode)
        return file

    def fsync(self, fd: int) -> None:
        """``os.fsync``."""
        os.fsync(fd)

    def rename(self, source: str, target: str) -> None:
        """``os.replace``."""
        os.replace(source, target)

    def unlink(self, path: str) -> None:
        """``os.unlink``."""
        os.unlink(path)

    def mkdir(self, path: str) -> None:
        """``os.mkdir``."""
        os.mkdir(path)

    def rmdir(self, path: str) -> None:
        """``os.rmdir``."""
        os.rmdir(path)


_installed: IFileSystem = OsFileSystem()


@contextlib.contextmanager
def use(file_system: IFileSystem) -> Iterator[IFileSystem]:
    """Route the storage library's calls to ``file_system`` for the duration (tests only)."""
    global _installed
    previous, _installed = _installed, file_system
    try:
        yield file_system
    finally:
        _installed = previous


def open(path: str, flags: int, mode: int = 0o644) -> int:  # noqa: A001 (the seam's os.open)
    """``os.open`` through the seam."""
    return _installed.open(path, flags, mode)


def open_file(path: str, mode: str) -> BinaryIO:
    """A binary file object for writing ``path``, through the seam."""
    return _installed.open_file(path, mode)


def fsync(fd: int) -> None:
    """Force a file's written bytes (or a directory's entries) to stable storage."""
    _installed.fsync(fd)


def fsync_path(path: str) -> None:
    """fsync a file (or a directory) by name."""
    fd = os.open(path, os.O_RDONLY)
    try:
        _installed.fsync(fd)
    finally:
        os.close(fd)


def unlink(path: str) -> None:
    """Remove a file's name; durable once its directory is fsynced."""
    _installed.unlink(path)


def replace(source: str, target: str) -> None:
    """Rename ``source`` over ``target`` atomically and make the rename durable (its directories fsynced)."""
    _installed.rename(source, target)
    target_directory = os.path.dirname(os.path.abspath(target))
    fsync_path(target_directory)
    source_directory = os.path.dirname(os.path.abspath(source))
    if source_directory != target_directory:
        fsync_path(source_directory)


def makedirs(path: str) -> None:
    """Create ``path`` and any missing parents, each made durable in its parent before its children are made."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    makedirs(parent)
    with contextlib.suppress(FileExistsError):  # another thread or process made it meanwhile
        _installed.mkdir(path)
    fsync_path(parent)


def remove_tree(path: str) -> None:
    """Delete a directory and everything under it, deepest first (durable once its parent is fsynced)."""
    for root, directories, files in os.walk(path, topdown=False):
        for name in files:
            _installed.unlink(os.path.join(root, name))
        for name in directories:
            _installed.rmdir(os.path.join(root, name))
    _installed.rmdir(path)
