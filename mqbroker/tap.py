"""``twistd mqbroker``: command-line options and ``makeService`` (composition root)."""

from __future__ import annotations

import os
import pathlib
from typing import Any

from twisted.application.service import IService
from twisted.python import usage

from mqbroker.ops.affinity import parse_cpu_list, unavailable_cpus
from mqbroker.config import BrokerConfig, ConfigError, build_config, parse_overrides, parse_toml, parse_value

#: (option, config key, help) for the options of DESIGN §7; each maps onto a config key.
CONFIG_OPTIONS: list[tuple[str, str, str]] = [
    ("data-dir", "data_dir", "Directory for partition logs and metadata [default: ./data]."),
    ("node-id", "node_id", "This broker's id in the cluster [default: 1]."),
    ("host", "host", "Interface to listen on, also the advertised host [default: localhost]."),
    ("native-port", "native_port", "Native protocol port; 0 disables [default: 9393]."),
    ("mqtt-port", "mqtt_port", "MQTT port; 0 disables [default: 1883]."),
    ("amqp-port", "amqp_port", "AMQP 0-9-1 port; 0 disables [default: 5672]."),
    ("kafka-port", "kafka_port", "Kafka wire protocol port; 0 disables [default: 9092]."),
    ("http-port", "http_port", "HTTP health/metrics port; 0 disables [default: 9394]."),
    ("controller-port", "controller_port", "Raft controller port; 0 disables [default: 9395]."),
    ("controller-quorum", "controller_quorum", "Voters as ID@HOST:PORT,... [default: this broker alone]."),
    ("tls-cert", "tls_cert", "Server certificate (PEM); enables the TLS listeners."),
    ("tls-key", "tls_key", "The server certificate's private key (PEM)."),
    ("tls-ca", "tls_ca", "CA certificate(s) that sign client certificates (PEM)."),
    ("tls-client-auth", "tls_client_auth", "Ask for a client certificate: none, optional or required [default: none]."),
    ("native-tls-port", "native_tls_port", "Native protocol TLS port; 0 disables [default: 9493]."),
    ("mqtt-tls-port", "mqtt_tls_port", "MQTT TLS port; 0 disables [default: 8883]."),
    ("amqp-tls-port", "amqp_tls_port", "AMQP TLS port; 0 disables [default: 5671]."),
    ("kafka-tls-port", "kafka_tls_port", "Kafka wire protocol TLS port; 0 disables [default: 9093]."),
]


class Options(usage.Options):
    """Options of ``twistd mqbroker`` and ``mqbroker serve`` (see docs/configuration.md)."""

    synopsis = "[options]"
    longdesc = (
        "Run an mqbroker broker. Settings come from the built-in defaults, then --config FILE "
        "(TOML), then --set KEY=VALUE, then the options below. Any configuration key can be "
        "given with --set, e.g. --set log.retention.ms=3600000."
    )
    optParameters = [["config", "c", None, "TOML configuration file."]] + [
        [option, None, None, help_text] for option, _, help_text in CONFIG_OPTIONS
    ]

    def __init__(self) -> None:
        super().__init__()
        self["set"] = []

    def opt_set(self, pair: str) -> None:
        """Set any configuration key: --set KEY=VALUE (repeatable)."""
        self["set"].append(pair)

    def postOptions(self) -> None:
        try:
            self["broker_config"] = load_config(self)
        except ConfigError as error:
            raise usage.UsageError(str(error)) from None


def load_config(options: dict[str, Any]) -> BrokerConfig:
    """Merge defaults, the TOML file, ``--set`` pairs and explicit options into a ``BrokerConfig``."""
    from mqbroker.core.topic_config import validate_topic_defaults

    settings: dict[str, Any] = {}
    if options.get("config"):
        path = pathlib.Path(options["config"])
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigError(f"cannot read configuration file {str(path)!r}: {error.strerror}") from None
        settings.update(parse_toml(text, source=str(path)))
    settings.update(parse_overrides(options.get("set", [])))
    for option, key, _ in CONFIG_OPTIONS:
        if options.get(option) is not None:
            settings[key] = parse_value(str(options[option]))
    config = build_config(settings, validate_topic_defaults=validate_topic_defaults)
    from mqbroker.cluster.controlplane import parse_quorum
    from mqbroker.security.cluster_auth import ClusterAuthentication

    ClusterAuthentication.from_config(config, frozenset(parse_quorum(config)))  # a cluster must not run open
    unavailable = unavailable_cpus(parse_cpu_list(config.cpu_affinity)) if config.cpu_affinity else []
    if unavailable:
        raise ConfigError(f"configuration key 'cpu_affinity': CPU(s) {unavailable} are not available on this machine "
                          f"(it offers {sorted(os.sched_getaffinity(0))})")
    return config


def makeService(options: Options) -> IService:
    """Build the broker's service tree (the global reactor is chosen by twistd by now)."""
    from twisted.internet import reactor

    from mqbroker.service import build_broker_service

    return build_broker_service(options["broker_config"], reactor)
