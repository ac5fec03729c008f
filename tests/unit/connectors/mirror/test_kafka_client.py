"""The mirror's Kafka-protocol adapters: librdkafka settings from the mirror's, and the source seam they fill."""

from __future__ import annotations

from zope.interface.verify import verifyClass

from mqbroker.connectors.mirror.kafka_client import client_config
from mqbroker.connectors.mirror.kafka_source import KafkaSourceCluster
from mqbroker.connectors.mirror.settings import SourceSecurity
from mqbroker.connectors.mirror.source import IMirrorSource, SourceCluster


def test_plain_settings_name_only_the_cluster() -> None:
    assert client_config("k:9092", SourceSecurity(), "m") == {"bootstrap.servers": "k:9092", "client.id": "m"}


def test_sasl_over_tls_maps_to_librdkafka_keys() -> None:
    config = client_config("k:9093", SourceSecurity(tls_ca="/ca.pem", sasl_mechanism="PLAIN", username="u",
                                                    password="p"), "m")
    assert config["security.protocol"] == "SASL_SSL" and config["ssl.ca.location"] == "/ca.pem"
    assert (config["sasl.mechanism"], config["sasl.username"], config["sasl.password"]) == ("PLAIN", "u", "p")


def test_mutual_tls_without_sasl_is_ssl() -> None:
    config = client_config("k:9093", SourceSecurity(tls=True, tls_cert="/c.pem", tls_key="/k.pem"), "m")
    assert (config["security.protocol"], config["ssl.certificate.location"], config["ssl.key.location"]) == (
        "SSL", "/c.pem", "/k.pem")


def test_both_sources_provide_the_mirror_source_seam() -> None:
    assert verifyClass(IMirrorSource, SourceCluster) and verifyClass(IMirrorSource, KafkaSourceCluster)
