"""Connector configurations: checked and typed; unknown keys and bad values are refused by name."""

from __future__ import annotations

import pytest

from mqbroker import errors
from mqbroker.connectors.settings import fill, parse_config, tasks_count
from mqbroker.connectors.wiring import connector_types

PARSERS = {name: kind.parse_settings for name, kind in connector_types().items()}


def parse(**config: str):
    return parse_config("c", {key.replace("__", "."): value for key, value in config.items()}, PARSERS)


def test_a_redis_sink_reads_its_defaults_and_fills_the_connector_name() -> None:
    parsed = parse(type="redis-sink", topics="a, b", redis__url="redis://:secret@cache:6380/2")
    settings = parsed.settings
    assert parsed.type == "redis-sink" and parsed.tasks_count == 1
    assert settings.topics == ("a", "b") and settings.mode == "stream" and settings.target == "{topic}"
    assert (settings.address.host, settings.address.port, settings.address.database) == ("cache", 6380, 2)
    assert settings.address.password == "secret"
    assert settings.positions_key == "mqbroker:connector:c:positions"
    assert settings.stream_length_max == 1_000_000


def test_keys_of_another_mode_are_refused() -> None:
    with pytest.raises(errors.InvalidConfigError, match="redis.key.ttl.ms"):
        parse(type="redis-sink", topics="a", redis__url="redis://h", redis__key__ttl__ms="5")


@pytest.mark.parametrize("config, problem", [
    ({"type": "nope"}, "type must be one of"),
    ({"type": "redis-sink", "topics": "a", "redis.url": "http://h"}, "redis://"),
    ({"type": "redis-sink", "topics": "a", "redis.url": "redis://h:notaport"}, "redis.url"),
    ({"type": "redis-sink", "topics": "a", "redis.url": "redis://h", "redis.tls.ca": "/ca.pem"}, "rediss://"),
    ({"type": "redis-sink", "topics": "a", "redis.url": "rediss://h", "redis.tls.cert": "/c.pem"}, "go together"),
    ({"type": "redis-sink", "topics": "a", "redis.url": "redis://h", "tasks.max": "0"}, "tasks.max"),
    ({"type": "redis-sink", "redis.url": "redis://h"}, "topics is required"),
    ({"type": "redis-sink", "topics": "a", "redis.url": "redis://h", "redis.stream": "{device}"}, "placeholder"),
    ({"type": "redis-sink", "topics": "a", "redis.url": "redis://h", "batch.records": "many"}, "whole number"),
    ({"type": "redis-sink", "topics": "a", "redis.url": "redis://h", "redis.stream.headers": "maybe"}, "true or false"),
    ({"type": "redis-source", "topic": "t", "redis.url": "redis://h", "redis.mode": "list"}, "redis.list is required"),
    ({"type": "redis-source", "topic": "t", "redis.url": "redis://h", "redis.stream": "s", "oversized": "drop"},
     "oversized must be one of"),
    ({"type": "redis-sink", "topics": "a", "redis.url": "redis://h", "principal": "alice"}, "KIND:NAME"),
])
def test_bad_configurations_are_refused_with_the_key_named(config: dict[str, str], problem: str) -> None:
    with pytest.raises(errors.InvalidConfigError, match=problem):
        parse_config("c", config, PARSERS)


def test_a_redis_source_in_list_mode_keeps_its_processing_list_template() -> None:
    settings = parse(type="redis-source", topic="jobs", redis__url="redis://h", redis__mode="list",
                     redis__list="queue").settings
    assert fill(settings.processing_list, list="queue", connector="c", task="2") == "queue:processing:c:2"


def test_a_stored_configuration_with_a_bad_task_count_runs_one_task() -> None:
    assert tasks_count({"tasks.max": "x"}) == 1 and tasks_count({"tasks.max": "1000"}) == 1
    assert tasks_count({"tasks.max": "4"}) == 4


def test_too_many_keys_are_refused() -> None:
    with pytest.raises(errors.InvalidConfigError, match="at most"):
        parse_config("c", {f"k{i}": "v" for i in range(300)}, PARSERS)


def test_rediss_urls_connect_over_tls_with_the_files_named() -> None:
    address = parse(type="redis-sink", topics="a", redis__url="rediss://cache:6380", redis__tls__ca="/ca.pem",
                    redis__tls__cert="/c.pem", redis__tls__key="/k.pem").settings.address
    assert (address.tls, address.tls_ca, address.tls_cert, address.tls_key) == (True, "/ca.pem", "/c.pem", "/k.pem")
    assert str(address) == "rediss://cache:6380/0"
    assert not parse(type="redis-source", topic="t", redis__stream="s", redis__url="redis://cache").settings.address.tls
