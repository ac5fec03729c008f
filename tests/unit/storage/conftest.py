"""Storage tests leave no file open: the segment files of every log a test opened are closed after it,
and a test that still leaves a file open (a raw ``os.open``, a flush ticket never released) fails.
Only descriptors of files count: pipes and sockets come from process-wide helpers created on first use.

Before this, the storage unit run ended with about 2,200 descriptors open (1,265 from
``test_recovery.py``): each log a test opened without closing kept its active segment open.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from mqbroker.storage.segment_files import SegmentFiles

DESCRIPTORS = "/proc/self/fd"


def _open_files() -> dict[int, str]:
    """Descriptor -> path of each file or directory this process has open."""
    found = {}
    for name in os.listdir(DESCRIPTORS):
        try:
            target = os.readlink(os.path.join(DESCRIPTORS, name))
        except FileNotFoundError:  # the listing's own descriptor, closed by now
            continue
        if target.startswith("/"):
            found[int(name)] = target
    return found


def _close_segment_files(files: SegmentFiles) -> None:
    """Close what ``files`` still holds open, unless a simulated power loss closed it already.

    Such a descriptor's number may since have gone to another file: only one of a file in the
    segment's own directory is closed (and newer sets are closed first, see the fixture).
    """
    open_now = _open_files()
    for segment_file in list(files._open):
        directory = os.path.dirname(os.path.realpath(segment_file.path)) + os.sep
        if segment_file.fd in open_now and open_now[segment_file.fd].startswith(directory):
            files._close(segment_file)


@pytest.fixture(autouse=True)
def no_leaked_descriptors(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close the segment files of the logs the test opened (as their close would); fail on any other descriptor left open."""
    before = _open_files()
    created: list[SegmentFiles] = []
    initialize = SegmentFiles.__init__

    def tracked(files: SegmentFiles, open_max: int) -> None:
        initialize(files, open_max)
        created.append(files)

    monkeypatch.setattr(SegmentFiles, "__init__", tracked)
    yield
    for files in reversed(created):  # a log left open (or crashed by a power-loss test) still holds these
        _close_segment_files(files)
    leaked = {number: target for number, target in _open_files().items() if before.get(number) != target}
    if leaked:
        shown = ", ".join(sorted(set(leaked.values()))[:5])
        pytest.fail(f"the test left {len(leaked)} file descriptors open (first: {shown}); close what it opened")
