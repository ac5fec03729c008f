"""Broker configuration: precedence, validation, and errors that name the key."""

import os

import pytest

from mqbroker.ops.affinity import parse_cpu_list

from mqbroker.config import BrokerConfig, ConfigError, build_config, dial_address, parse_overrides, parse_toml
from mqbroker.storage.config import LogConfig
from mqbroker.tap import Options


def test_defaults_make_a_cluster_of_one_on_the_default_ports() -> None:
    config = BrokerConfig()
    assert (config.native_port, config.mqtt_port, config.amqp_port, config.http_port, config.controller_port) == (
        9393, 1883, 5672, 9394, 9395,
    )
    assert config.data_dir == "./data"


def test_options_override_set_pairs_which_override_the_file(tmp_path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text('native_port = 1000\nmqtt_port = 1001\n[log]\n"retention.ms" = 5000\n')
    options = Options()
    options.parseOptions(["--config", str(path), "--set", "mqtt_port=2001", "--set", "amqp_port=2002", "--amqp-port", "3002"])
    config = options["broker_config"]
    assert (config.native_port, config.mqtt_port, config.amqp_port) == (1000, 2001, 3002)
    assert config.topic_defaults == {"retention.ms": "5000"}


def test_unknown_key_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="'native_prot'"):
        build_config({"native_prot": 1})


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"native_port": "many"}, "native_port"),
        ({"mqtt_port": 70000}, "mqtt_port"),
        ({"auto_create_topics": "perhaps"}, "auto_create_topics"),
        ({"default_partitions": 0}, "default_partitions"),
        ({"log.retention.mss": "1"}, "retention.mss"),
        ({"log.flush.policy": "sometimes"}, "flush.policy"),
        ({"fsync_engine": "io_uring"}, "fsync_engine"),
        ({"cpu_affinity": "first"}, "cpu_affinity"),
        ({"cpu_affinity": "3-1"}, "cpu_affinity"),
        ({"amqp_default_queue_type": "quorum"}, "amqp_default_queue_type"),
    ],
)
def test_bad_values_are_refused_with_the_key_named(settings, named) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        build_config(settings, validate_topic_defaults=LogConfig.from_mapping)


def test_set_requires_key_equals_value() -> None:
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_overrides(["retention"])


def test_invalid_toml_names_the_file() -> None:
    with pytest.raises(ConfigError, match="broker.toml"):
        parse_toml("native_port = = 1", source="broker.toml")


def test_command_line_reports_bad_config_as_usage_error() -> None:
    from twisted.python import usage

    with pytest.raises(usage.UsageError, match="mqtt_port"):
        Options().parseOptions(["--mqtt-port", "x"])


def test_help_lists_every_option_of_the_design() -> None:
    text = str(Options())
    for option in ("--config", "--data-dir", "--node-id", "--host", "--native-port", "--mqtt-port",
                   "--amqp-port", "--kafka-port", "--http-port", "--controller-port", "--controller-quorum", "--set"):
        assert option in text


@pytest.mark.parametrize(("text", "cpus"), [("0", {0}), ("0,2", {0, 2}), ("1-3", {1, 2, 3}), (" 0 , 4-5", {0, 4, 5})])
def test_cpu_lists_read_like_linux_cpu_lists(text, cpus) -> None:
    assert parse_cpu_list(text) == cpus


def test_a_cpu_this_machine_lacks_is_refused_by_name() -> None:
    from twisted.python import usage

    missing = max(os.sched_getaffinity(0)) + 1
    with pytest.raises(usage.UsageError, match=rf"cpu_affinity.*\[{missing}\]"):
        Options().parseOptions(["--set", f"cpu_affinity={missing}"])


@pytest.mark.parametrize(
    ("pair", "key", "expected"),
    [
        ('security.super_users=["User:admin", "User:ops"]', "security_super_users", "User:admin,User:ops"),
        ("security.allow_anonymous=false", "security_allow_anonymous", False),
        ("native_port=1000", "native_port", 1000),
        ('cluster_id="prod"', "cluster_id", "prod"),
        ("host=127.0.0.1", "host", "127.0.0.1"),
        ("cpu_affinity=0", "cpu_affinity", "0"),
        ("security.super_users=User:admin", "security_super_users", "User:admin"),
    ],
)
def test_set_values_are_toml_values(pair, key, expected) -> None:
    config = build_config(parse_overrides([pair]))
    assert getattr(config, key) == expected


@pytest.mark.parametrize(
    ("pair", "named"),
    [
        ("security.allow_anonymous=[1, 2]", "security.allow_anonymous"),
        ("security.allow_anonymous=maybe", "security.allow_anonymous"),
        ("native_port=true", "native_port"),
        ("native_port=[1]", "native_port"),
        ("security.super_users=[1, 2]", "security.super_users"),
        ("http_tls=1", "http_tls"),
    ],
)
def test_set_value_of_the_wrong_type_is_refused_by_name(pair, named) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        build_config(parse_overrides([pair]))


def test_set_value_that_looks_like_broken_toml_is_refused() -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        parse_overrides(['security.super_users=["User:admin"'])


def test_localhost_is_dialled_as_the_ipv4_loopback_and_other_hosts_as_given() -> None:
    assert dial_address("localhost") == "127.0.0.1"
    hosts = ["broker-2.example", "10.0.0.7", "::1"]
    assert [dial_address(host) for host in hosts] == hosts
