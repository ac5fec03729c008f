# -*- test-case-name: tests.unit.storage.test_recovery -*-
"""Opening a partition directory: finish what a crash interrupted, then trust nothing past the last good byte.

A crash can leave a compaction swap half done (`<base>.log.swap`, with its rewritten
`<base>.txnindex.cleaned`), a rewrite half written (`.cleaned`), temp files, indexes whose
segment is gone, and a torn or garbage tail in the segments written since the last recovery
point. `open_segments` tidies the directory, then (unless the last shutdown was clean) checks
every batch from the segment holding the recovery point, cuts the first bad one and everything
after it, and fsyncs what it changed. It also says from which segment on the aborted-transaction
indexes must be rebuilt (the log does that with its producers' replay): the first segment
recovery checked, and any segment whose `.txnindex` is missing or does not fit it; and where
the leader epochs of the checked batches start (the log's epoch cache is rebuilt from them).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import threading
from typing import NamedTuple

from mqbroker.storage import fs
from mqbroker.storage.segment import CLEANED_SUFFIX, DELETED_SUFFIX, INDEX_SUFFIXES, LOG_SUFFIX, SWAP_SUFFIX, Segment
from mqbroker.storage.segment_files import OPEN_MAX_DEFAULT, SegmentFiles
from mqbroker.storage.txn_index import TXN_INDEX_SUFFIX

#: Leftovers of an interrupted write or delete, removed when a log is opened.
LEFTOVER_SUFFIXES = (".tmp", DELETED_SUFFIX)


class RecoveredEpochs(NamedTuple):
    """The leader epochs recovery found: from ``checked_from`` on, (epoch, start offset) of each change."""

    checked_from: int
    starts: list[tuple[int, int]]


class OpenedSegments(NamedTuple):
    """What `open_segments` found: the segments, and what of the log's derived state must be rebuilt."""

    segments: list[Segment]
    #: The base offset from which the aborted-transaction indexes must be rebuilt (None: none).
    rebuild_txn_index_from: int | None
    #: The epochs of the batches recovery checked (None: nothing was checked, the shutdown was clean).
    epochs: RecoveredEpochs | None = None


def open_segments(
    directory: str,
    index_interval_bytes: int,
    *,
    recovery_point: int,
    log_start_offset: int,
    clean_shutdown: bool,
    files: SegmentFiles | None = None,
    lock: threading.Lock | None = None,
) -> OpenedSegments:
    """The segments of the log in ``directory`` (created empty at ``log_start_offset`` if there are none),
    the base offset from which their aborted-transaction indexes must be rebuilt, and the epochs recovery found.

    Recovery checks every batch from the segment holding ``recovery_point`` (and always the
    last segment), cuts the log at the first invalid byte and drops the segments after it.
    It rescans that first segment from its beginning, not from the recovery point: it needs
    no trusted position inside a segment, and costs at most one segment of CRC checks more
    (`benchmarks/storage_bench.py` measures ``recovery_s_per_gib``: 0.1-0.3 s per GiB here).
    ``files`` and ``lock`` are the log's set of open segment files and its lock, held by the caller.
    """
    files = files or SegmentFiles(OPEN_MAX_DEFAULT)
    fs.makedirs(directory)
    names = _remove_leftovers(directory)
    segments = [Segment(directory, base, index_interval_bytes, files, lock) for base in _log_bases(names)]
    if not segments:
        segment = Segment(directory, log_start_offset, index_interval_bytes, files, lock)
        segment.create()
        fs.fsync_path(directory)
        return OpenedSegments([segment], None)
    if clean_shutdown:
        segments[-1].load_tail()
        return OpenedSegments(segments, _doubtful_txn_index(segments, None))
    epoch_starts: list[tuple[int, int]] = []
    segments, checked_from = _recover(directory, segments, recovery_point, epoch_starts)
    return OpenedSegments(segments, _doubtful_txn_index(segments, checked_from), RecoveredEpochs(checked_from, epoch_starts))


def _doubtful_txn_index(segments: list[Segment], rebuild_from: int | None) -> int | None:
    """Load every `.txnindex` below ``rebuild_from``; the base of the first that is missing or does not fit."""
    for slot, segment in enumerate(segments):
        if rebuild_from is not None and segment.base_offset >= rebuild_from:
            break
        end = segments[slot + 1].base_offset if slot + 1 < len(segments) else segment.next_offset
        if not segment.txn_index.load(segment.base_offset, end):
            return segment.base_offset
    return rebuild_from


def _log_bases(names: list[str]) -> list[int]:
    """Base offsets of the `.log` files among ``names`` (a directory listing), ascending."""
    return sorted(int(name[: -len(LOG_SUFFIX)]) for name in names if name.endswith(LOG_SUFFIX))


def _remove_leftovers(directory: str) -> list[str]:
    """Finish interrupted swaps; delete temp files, half-written or half-deleted files, orphan indexes.

    Returns the names left in ``directory`` (listed again only after a step changed it: opening
    10,000 tidy partitions lists each directory once).
    """
    names = os.listdir(directory)
    changed = False
    for name in names:
        path = os.path.join(directory, name)
        if name.endswith(LOG_SUFFIX + CLEANED_SUFFIX):
            fs.unlink(path)
            changed = True
        elif name.endswith(TXN_INDEX_SUFFIX + CLEANED_SUFFIX):
            # Written before the swap's commit point: it belongs to the swap if there is one.
            swap = name[: -len(TXN_INDEX_SUFFIX + CLEANED_SUFFIX)] + LOG_SUFFIX + SWAP_SUFFIX
            if swap in names:
                fs.replace(path, path[: -len(CLEANED_SUFFIX)])
            else:
                fs.unlink(path)
            changed = True
    if changed:
        names = os.listdir(directory)
    swaps = [name for name in names if name.endswith(LOG_SUFFIX + SWAP_SUFFIX)]
    for name in swaps:
        path = os.path.join(directory, name)
        Segment(directory, int(name[:20]), 0).drop_indexes()
        fs.replace(path, path[: -len(SWAP_SUFFIX)])
    if swaps:
        names = os.listdir(directory)
    bases = set(_log_bases(names))
    left = []
    for name in names:
        orphan_index = name.endswith((*INDEX_SUFFIXES, TXN_INDEX_SUFFIX)) and int(name.split(".")[0]) not in bases
        if name.endswith(LEFTOVER_SUFFIXES) or orphan_index:
            with contextlib.suppress(FileNotFoundError):  # already gone is what this step wants: never fail recovery
                fs.unlink(os.path.join(directory, name))
        else:
            left.append(name)
    return left


def _recover(
    directory: str, segments: list[Segment], recovery_point: int, epoch_starts: list[tuple[int, int]]
) -> tuple[list[Segment], int]:
    """Validate the segments from the one holding the recovery point; cut at the first bad byte.

    Returns the segments kept and the base offset of the first one checked; adds the leader
    epochs of the kept batches to ``epoch_starts`` (see `Segment.recover`).
    """
    first = max(0, bisect.bisect_right(segments, recovery_point, key=lambda s: s.base_offset) - 1)
    checked_from = segments[first].base_offset
    for slot in range(first, len(segments)):
        segment = segments[slot]
        if slot > 0 and segment.base_offset < segments[slot - 1].next_offset:
            return _keep_segments(directory, segments, slot), checked_from
        cut_bytes = segment.recover(epoch_starts)
        fs.fsync_path(segment.path)
        if slot < len(segments) - 1:
            segment.finish()
            if cut_bytes:
                return _keep_segments(directory, segments, slot + 1), checked_from
    fs.fsync_path(directory)
    return segments, checked_from


def _keep_segments(directory: str, segments: list[Segment], count: int) -> list[Segment]:
    """Delete the segments after the first ``count`` (they follow a cut, so they cannot be trusted).

    Newest first: whatever part of the deletions a power loss keeps, no hole is left behind.
    """
    for doomed in reversed(segments[count:]):
        doomed.delete()
    fs.fsync_path(directory)
    return segments[:count]
