"""Atomic small files: write a temp file, fsync it, rename it over the old one, fsync the directory.

Offset checkpoints use Kafka's text layout: a version line (0), an entry-count line, then
one ``<topic> <partition> <offset>`` line per partition. A single-offset checkpoint kept in a
partition's own directory (the cleaner's) is a version line and an offset line.
"""

from __future__ import annotations

import os

from mqbroker.storage import fs
from mqbroker.storage.errors import CorruptFileError

CHECKPOINT_VERSION = 0
TEMPORARY_SUFFIX = ".tmp"
#: Where a compacted log's clean part ends (its first dirty offset), in the partition's directory.
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"


def write_atomically(path: str, data: bytes, mode: int = 0o666) -> None:
    """Replace the file at ``path`` with ``data`` so a crash leaves either the old or the new file.

    A new file gets ``mode`` less the process umask (0o600 for files that hold secrets).
    """
    temporary = path + TEMPORARY_SUFFIX
    descriptor = fs.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
        file.flush()
        fs.fsync(file.fileno())
    fs.replace(temporary, path)


def write_offsets(path: str, offsets: dict[tuple[str, int], int]) -> None:
    """Atomically write a ``(topic, partition) -> offset`` checkpoint."""
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    write_atomically(path, ("\n".join(lines) + "\n").encode())


def read_offsets(path: str) -> dict[tuple[str, int], int]:
    """Read a checkpoint written by `write_offsets`; a missing file is an empty checkpoint."""
    if not os.path.exists(path):
        return {}
    with open(path, "rb") as file:
        data = file.read()
    try:
        lines = data.decode("utf-8").splitlines()
        version, count = int(lines[0]), int(lines[1])
        entries = [line.rsplit(" ", 2) for line in lines[2:]]
        offsets = {(topic, int(partition)): int(offset) for topic, partition, offset in entries}
    except (IndexError, ValueError) as error:  # UnicodeDecodeError is a ValueError
        raise CorruptFileError(f"checkpoint {path} is malformed: {error}") from None
    if version != CHECKPOINT_VERSION or count != len(offsets):
        raise CorruptFileError(f"checkpoint {path} has version {version} and {count} entries; expected version 0")
    return offsets


def write_offset(path: str, offset: int) -> None:
    """Atomically write a single-offset checkpoint."""
    write_atomically(path, f"{CHECKPOINT_VERSION}\n{offset}\n".encode())


def read_offset(path: str) -> int | None:
    """Read a checkpoint written by `write_offset`; None when the file is missing."""
    if not os.path.exists(path):
        return None
    with open(path, "rb") as file:
        data = file.read()
    try:
        version_line, offset_line = data.decode("utf-8").splitlines()
        version, offset = int(version_line), int(offset_line)
    except ValueError as error:  # too few or many lines, not numbers, not UTF-8
        raise CorruptFileError(f"checkpoint {path} is malformed: {error}") from None
    if version != CHECKPOINT_VERSION or offset < 0:
        raise CorruptFileError(f"checkpoint {path} has version {version} and offset {offset}")
    return offset


def read_clean_offset(directory: str) -> int:
    """The cleaner checkpoint of the partition in ``directory``; 0 (all dirty, always safe) if missing or damaged."""
    try:
        return read_offset(os.path.join(directory, CLEANER_CHECKPOINT)) or 0
    except CorruptFileError:
        return 0


def write_clean_offset(directory: str, offset: int) -> None:
    """Atomically record that compaction covered everything below ``offset`` in ``directory``."""
    write_offset(os.path.join(directory, CLEANER_CHECKPOINT), offset)
