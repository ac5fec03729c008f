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
