"""The suite in pytest-xdist workers (``-n 3 --dist loadscope``, as scripts/test.sh runs it).

Most integration tests wait (brokers starting, polls, kill -9 and restarts) rather than compute, so a few
workers on two cores finish the suite in about half the time of one process. This plugin keeps that safe:

- **A module runs whole on one worker** (``--dist loadscope``, with ``ModuleGroups`` as its scheduler), so a
  module-scoped broker or cluster starts once. The Spark modules (``tests/integration/*spark*.py``) form one
  group: one worker starts the session's one SparkSession and runs their jobs one after another. A test
  elsewhere that uses a SparkSession fails the collection (``SPARK_FIXTURES``).
- **Longest groups first**: the Spark group, then the integration and security modules, then the quick unit
  and property modules, so that no long module starts last and runs on while the other workers idle.
- **Tests marked ``alone`` run while no other worker runs a test**: those that bound a time, a rate or
  CPU would measure the other workers' load. Every test holds a shared lock; an ``alone`` test takes it
  exclusively (writer first: a turnstile stops new tests while it waits), so the workers pause meanwhile.
  Without xdist (``-n 0`` or no ``-n``) the lock is not taken.

Ports and data directories cannot collide: each worker picks ports from its own share of the range
(``tests/integration/brokerprocess.free_port``) and its temporary directories under its own basetemp.
(pytest-xdist's own ``xdist_group`` marks do not group under pytest 9: it renames a test's ``_nodeid``,
which pytest 9 no longer reads; hence a scheduler of our own.)
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

SPARK_GROUP = "spark"
#: A test that uses one of these must be in a module of ``SPARK_GROUP``.
SPARK_FIXTURES = frozenset({"spark", "spark_broker"})
#: After the Spark group, the modules under these directories, then all others.
SLOW_DIRECTORIES = ("tests/integration/", "tests/security/")

_LOCK_DIRECTORY = "mqbroker_lock_directory"


def group_of(nodeid: str) -> str:
    """The group a test runs in: its module, or ``SPARK_GROUP`` for ``tests/integration/*spark*.py``."""
    module = nodeid.split("::")[0]
    directory, _, name = module.rpartition("/")
    return SPARK_GROUP if directory == "tests/integration" and "spark" in name else module


def _rank(group: str) -> int:
    if group == SPARK_GROUP:
        return 0
    return 1 if group.startswith(SLOW_DIRECTORIES) else 2


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a worker: order the groups longest first, each group's tests in their order; check the Spark group.

    Every worker sorts the same collection the same way, as xdist requires.
    """
    if not hasattr(config, "workerinput"):
        return
    for item in items:
        if SPARK_FIXTURES.intersection(getattr(item, "fixturenames", ())) and group_of(item.nodeid) != SPARK_GROUP:
            raise pytest.UsageError(f"{item.nodeid} uses a SparkSession: name its module tests/integration/*spark*.py"
                                    " so that it runs in the one worker that has one (tests/parallel.py)")
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(group_of(item.nodeid), index)
    items.sort(key=lambda item: (_rank(group_of(item.nodeid)), first_seen[group_of(item.nodeid)]))


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """In the controller, for ``--dist loadscope``: ``ModuleGroups``, which keeps the collection's order."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):
        """Hands out whole groups (``group_of``) in the collection's order, the longest first."""

        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    config.option.loadscopereorder = False  # the workers ordered the collection already
    return ModuleGroups(config, log)


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
