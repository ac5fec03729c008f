"""Fixtures that run real brokers."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from tests.integration.brokerprocess import BrokerProcess, running


@pytest.fixture
def broker(tmp_path: pathlib.Path) -> Iterator[BrokerProcess]:
    """A running broker with a fresh data directory; killed at the end of the test."""
    yield from running(BrokerProcess(data_dir=tmp_path / "data"))


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One running broker for a module's tests that leave it running and each use their own topics."""
    yield from running(BrokerProcess(data_dir=tmp_path_factory.mktemp("shared") / "data"))
