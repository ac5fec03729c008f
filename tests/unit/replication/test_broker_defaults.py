"""Broker-wide ``log.`` defaults of the replication topic configs."""

from __future__ import annotations

import pytest

from mqbroker.config import ConfigError
from mqbroker.tap import load_config


def test_log_prefixed_replication_defaults_are_accepted() -> None:
    config = load_config({"set": ["log.unclean.leader.election.enable=true", "log.min.insync.replicas=2"]})
    assert config.topic_defaults == {"unclean.leader.election.enable": "true", "min.insync.replicas": "2"}


def test_a_bad_unclean_default_names_the_key() -> None:
    with pytest.raises(ConfigError, match="unclean.leader.election.enable"):
        load_config({"set": ["log.unclean.leader.election.enable=maybe"]})
