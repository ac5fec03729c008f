"""A producer's settings are checked together, and acks are read as users write them."""

import pytest

from mqbroker.client.producer_config import ProducerConfig, parse_acks
from mqbroker.protocols.native.messages import Acks


def test_settings_are_checked_together() -> None:
    with pytest.raises(ValueError, match="idempotence"):
        ProducerConfig(acks=Acks.NONE).validated()
    with pytest.raises(ValueError, match="compression"):
        ProducerConfig(compression="brotli").validated()
    assert parse_acks("all") is Acks.ALL and parse_acks("1") is Acks.LEADER
