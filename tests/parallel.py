"""The suite in pytest-xdist workers (``-n 3 --dist loadgroup --no-loadscope-reorder``, as scripts/test.sh runs it).

Most integration tests wait (brokers starting, polls, kill -9 and restarts) rather than compute, so a few
workers on two cores finish the suite in about half the time of one process. This plugin keeps that safe:

- **A module runs whole on one worker**: each test gets the ``xdist_group`` of its module unless it names
  one itself, so a module-scoped broker or cluster starts once. The Spark modules (those using
  ``SPARK_FIXTURES``) share the group ``spark``: one worker starts the session's one SparkSession and runs
  their jobs one after another.
- **Longest groups first**: ``HEAVY_GROUPS`` (measured) are handed out before the integration modules,
  and those before the quick unit modules, so that no long module starts last and runs alone at the end.
- **Tests marked ``alone`` run while no other worker runs a test**: those that bound a time, a rate or
  CPU would measure the other workers' load. Every test holds a shared lock; an ``alone`` test takes it
  exclusively (writer first: a turnstile stops new tests while it waits), so the workers pause meanwhile.
  Without xdist (``-n 0`` or no ``-n``) the lock is not taken.

Ports and data directories cannot collide: each worker picks ports from its own share of the range
(``tests/integration/brokerprocess.free_port``) and its temporary directories under its own basetemp.
"""

from __future__ import annotations

import fcntl
import pathlib
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import pytest

#: Groups by their measured length, longest first (a stale entry costs balance only, never correctness).
HEAVY_GROUPS = (
    "spark",
)
#: A module with a test that uses one of these joins the group ``spark``.
SPARK_FIXTURES = frozenset({"spark", "spark_broker"})
#: Then the modules under these directories, then all others (quick unit and property tests).
SLOW_DIRECTORIES = ("tests/integration/", "tests/security/")

_LOCK_DIRECTORY = "mqbroker_lock_directory"


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def _group(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("xdist_group")
    if marker is None:
        return None
    return str(marker.args[0] if marker.args else marker.kwargs.get("name", "default"))


def _rank(group: str) -> int:
    if group in HEAVY_GROUPS:
        return HEAVY_GROUPS.index(group)
    return len(HEAVY_GROUPS) + (0 if group.startswith(SLOW_DIRECTORIES) else 1)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a worker: give each test its module's group (unless it has one) and order the groups longest first.

    Runs before xdist's own hook, which appends the group to the test's id for the scheduler. Every worker
    sorts the same collection the same way, as xdist requires.
    """
    if not hasattr(config, "workerinput"):
        return
    spark_modules = {_module(item) for item in items if SPARK_FIXTURES.intersection(getattr(item, "fixturenames", ()))}
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        group = _group(item)
        if group is None:
            group = "spark" if _module(item) in spark_modules else _module(item)
            item.add_marker(pytest.mark.xdist_group(group))
        first_seen.setdefault(group, index)
    items.sort(key=lambda item: (_rank(_group(item)), first_seen[_group(item)]))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """In the controller: hand each worker the directory of the lock that ``alone`` tests take."""
    config = node.config
    if not hasattr(config, "_mqbroker_lock_directory"):
        config._mqbroker_lock_directory = tempfile.mkdtemp(prefix="mqbroker-tests-")
    node.workerinput[_LOCK_DIRECTORY] = config._mqbroker_lock_directory


def pytest_unconfigure(config: pytest.Config) -> None:
    """In the controller: remove the lock directory."""
    directory = getattr(config, "_mqbroker_lock_directory", None)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


class _RunLock:
    """A writer-first readers-writer lock between worker processes, from two ``flock``ed files."""

    def __init__(self, directory: pathlib.Path) -> None:
        self._turnstile: IO[bytes] = open(directory / "turnstile", "ab")
        self._tests: IO[bytes] = open(directory / "tests", "ab")

    @contextmanager
    def shared(self) -> Iterator[None]:
        """Held by every other test: waits while an ``alone`` test runs or waits to run."""
        fcntl.flock(self._turnstile, fcntl.LOCK_EX)
        fcntl.flock(self._tests, fcntl.LOCK_SH)
        fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self._tests, fcntl.LOCK_UN)

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Held by an ``alone`` test: stops new tests from starting, then waits for the running ones to end."""
        fcntl.flock(self._turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._tests, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._tests, fcntl.LOCK_UN)
        finally:
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)


_run_lock: _RunLock | None = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """In a worker: run the test (with its fixtures' set-up and tear-down) under the shared or exclusive lock."""
    global _run_lock
    directory = getattr(item.config, "workerinput", {}).get(_LOCK_DIRECTORY)
    if directory is None:
        yield
        return
    if _run_lock is None:
        _run_lock = _RunLock(pathlib.Path(directory))
    hold = _run_lock.exclusive if item.get_closest_marker("alone") else _run_lock.shared
    with hold():
        yield
