"""The mirror's settings: required keys, aliases, and the refusal of a mirror onto itself."""

from __future__ import annotations

import pytest

from mqbroker import errors
from mqbroker.connectors.mirror.settings import parse_mirror
from mqbroker.connectors.settings import SettingsReader

BASE = {"source.bootstrap": "east:9393", "source.alias": "east", "target.alias": "west", "topics": "a"}


@pytest.mark.parametrize("change, problem", [
    ({"topics": ""}, "needs topics"),
    ({"source.alias": "west"}, "must differ"),
    ({"target.alias": "we st"}, "target.alias"),
    ({"topics.pattern": "("}, "regular expression"),
    ({"naming": "suffix"}, "naming"),
    ({"source.bootstrap": ""}, "source.bootstrap is required"),
    ({"target.bootstrap": "kafka:9092"}, "not both"),
    ({"target.bootstrap": "kafka:9092", "source.bootstrap": "", "target.protocol": "native"}, "target.protocol"),
    ({"source.protocol": "amqp"}, "source.protocol"),
])
def test_bad_mirror_settings_are_refused(change: dict[str, str], problem: str) -> None:
    with pytest.raises(errors.InvalidConfigError, match=problem):
        parse_mirror("m", SettingsReader({**BASE, **change}))


def test_source_credentials_are_read() -> None:
    parsed = parse_mirror("m", SettingsReader({**BASE, "source.sasl.username": "u", "source.sasl.password": "p",
                                               "source.tls.ca": "/ca.pem"}))
    assert (parsed.security.username, parsed.security.password, parsed.security.tls_ca) == ("u", "p", "/ca.pem")


def test_an_outbound_mirror_reads_the_target_cluster_and_its_credentials() -> None:
    parsed = parse_mirror("m", SettingsReader({**BASE, "source.bootstrap": "", "target.bootstrap": "kafka:9092",
                                               "target.sasl.username": "u", "source.sasl.username": "ignored"}))
    assert (parsed.target_bootstrap, parsed.security.username) == ("kafka:9092", "u")


def test_a_kafka_source_is_chosen_by_protocol() -> None:
    assert parse_mirror("m", SettingsReader({**BASE, "source.protocol": "kafka"})).source_protocol == "kafka"
