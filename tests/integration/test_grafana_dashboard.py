"""docs/grafana/mqbroker.json queries only metrics a running broker exposes, with the labels it groups them by."""

from __future__ import annotations

import json
import pathlib
import re
import time
import urllib.request

import pika
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mqbroker.client import Admin, Consumer, Producer
from tests.integration.brokerprocess import BrokerProcess, running
from tests.integration.nativewire import produce_batch
from tests.poison import poison_batch

DASHBOARD = pathlib.Path(__file__).resolve().parents[2] / "docs" / "grafana" / "mqbroker.json"
METRIC = re.compile(r"\bmqbroker_[a-z_]+\b")
GROUPED_BY = re.compile(r"\bby\s*\(([^)]*)\)")
#: Labels Prometheus adds to every series it scrapes, and the histogram buckets' bound.
SCRAPE_LABELS = {"instance", "job", "le"}


def _queries(dashboard: dict) -> list[str]:
    """Every PromQL expression of the panels and the template variables."""
    panels = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", ())]
    variables = [variable["query"]["query"] for variable in dashboard["templating"]["list"]
                 if isinstance(variable.get("query"), dict)]
    return panels + variables


def _scrape(broker: BrokerProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.ports['http']}/metrics", timeout=10) as reply:
        return reply.read().decode()


def _skip_a_poison_batch(broker: BrokerProcess) -> None:
    """An AMQP exchange reads topic ``sensors``; a batch whose records do not decode is appended there, and the
    exchange's source reader skips it (mqbroker_unreadable_batches_total gets its first sample)."""
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["sensors"], partitions=1)
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.ports["amqp"]))
    try:
        connection.channel().exchange_declare("sensors-x", "fanout", arguments={"x-source-topic": "sensors"})
    finally:
        connection.close()
    assert produce_batch(broker.ports["native"], "sensors", 0, poison_batch()) == 0
    deadline = time.monotonic() + 20
    while 'mqbroker_unreadable_batches_total{reader="AMQP source reader"' not in _scrape(broker):
        assert time.monotonic() < deadline, "the AMQP source reader did not skip the poison batch within 20 s"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def exposed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Sample names and their label names from a broker's /metrics after produce, fetch, a group's commit, a
    skipped unreadable batch, a committed transaction and during an open one."""
    for broker in running(BrokerProcess(data_dir=tmp_path_factory.mktemp("grafana") / "data")):
        with Producer(broker.bootstrap, acks="all") as producer:
            for n in range(20):
                producer.send("metered", value=b"v%d" % n, partition=0)
        with Consumer(broker.bootstrap, group_id="metered-readers", topics=["metered"], auto_offset_reset="earliest",
                      enable_auto_commit=False) as consumer:
            taken = 0
            while taken < 5:
                taken += len(consumer.poll(timeout=1.0))
            consumer.commit({("metered", 0): 5})
        _skip_a_poison_batch(broker)
        with Producer(broker.bootstrap, transactional_id="metered-txn", linger_ms=0) as transactional:
            transactional.init_transactions()
            with transactional.transaction():
                transactional.send("metered", value=b"committed", partition=0)
            transactional.begin_transaction()  # open while scraped: the stable-offset lag has a sample
            transactional.send("metered", value=b"open", partition=0).result(10)
            text = _scrape(broker)
            transactional.abort_transaction()
    samples: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, set()).update(sample.labels)
    return samples


def test_the_dashboard_is_grafana_json_with_panels() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["panels"] and dashboard["schemaVersion"] >= 30
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])


def test_every_metric_the_dashboard_queries_exists_with_its_labels(exposed: dict[str, set[str]]) -> None:
    queries = _queries(json.loads(DASHBOARD.read_text()))
    assert len(queries) >= 10
    for query in queries:
        metrics = set(METRIC.findall(query))
        assert metrics, f"a query naming no mqbroker metric (a typo?): {query}"
        missing = metrics - set(exposed)
        assert not missing, f"{query} queries {sorted(missing)}, which /metrics does not expose"
        labels = set().union(*(exposed[metric] for metric in metrics)) | SCRAPE_LABELS
        for grouped in GROUPED_BY.findall(query):
            unknown = {name.strip() for name in grouped.split(",")} - labels
            assert not unknown, f"{query} groups by {sorted(unknown)}, labels its metrics do not have"
