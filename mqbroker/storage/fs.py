"""The storage library's only calls of os.fsync and os.replace: the seam for fault-injecting tests."""

from __future__ import annotations

import os


def fsync(fd: int) -> None:
    """Force a file's written bytes to stable storage."""
    os.fsync(fd)


def fsync_path(path: str) -> None:
    """fsync a file (or a directory) by name."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace(source: str, target: str) -> None:
    """Rename ``source`` over ``target`` atomically and make the rename durable."""
    os.replace(source, target)
    fsync_path(os.path.dirname(os.path.abspath(target)))
