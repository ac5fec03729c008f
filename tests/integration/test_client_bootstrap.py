"""Bootstrap lists (Kafka's ``bootstrap.servers`` form, or a list): the clients try the brokers in turn,
so a first broker that is down does not stop them."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor

from mqbroker.client import Admin, Consumer, Producer
from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.client.group_admin import GroupAdmin
from mqbroker.client.twisted import TwistedAdmin, TwistedProducer
from tests.integration.brokerprocess import BrokerProcess, free_port


def _down() -> str:
    """The address of a broker that is not running (nothing listens there)."""
    return f"127.0.0.1:{free_port()}"


@pytest.mark.parametrize("form", ["string", "list"])
def test_blocking_clients_skip_a_first_broker_that_is_down(shared_broker: BrokerProcess, form: str) -> None:
    addresses = [_down(), shared_broker.bootstrap]
    bootstrap: str | list[str] = ",".join(addresses) if form == "string" else addresses
    topic = f"bootstrap-{form}"
    with Admin(bootstrap) as admin:
        admin.create_topics([topic], partitions=1)
    with Producer(bootstrap, acks="all") as producer:
        producer.send(topic, value=b"through the second broker").result(10)
    with Consumer(bootstrap, group_id=f"group-{form}", topics=[topic], auto_offset_reset="earliest") as consumer:
        values = []
        for _ in range(40):
            values += [message.value for message in consumer.poll(0.5)]
            if values:
                break
        consumer.commit()
    assert values == [b"through the second broker"]
    with GroupAdmin(bootstrap) as groups:
        assert (f"group-{form}", "Empty") in groups.list_groups()
        assert groups.committed_offsets(f"group-{form}") == {(topic, 0): 1}


def test_a_blocking_client_names_every_broker_it_tried_when_none_answers() -> None:
    first, second = _down(), _down()
    with pytest.raises(BrokerUnavailableError) as raised:
        Admin(f"{first},{second}").list_topics()
    assert first in str(raised.value) and second in str(raised.value)


@pytest_twisted.ensureDeferred
async def test_twisted_clients_skip_a_first_broker_that_is_down(shared_broker: BrokerProcess) -> None:
    admin = TwistedAdmin(reactor, f"{_down()},{shared_broker.bootstrap}")
    producer = TwistedProducer(reactor, [_down(), shared_broker.bootstrap], acks="all")
    try:
        await admin.create_topics(["twisted-bootstrap"], partitions=1)
        metadata = await admin.metadata(["twisted-bootstrap"])
        sent = await producer.send("twisted-bootstrap", value=b"v")
    finally:
        await producer.close()
        await admin.close()
    assert [topic.name for topic in metadata.topics] == ["twisted-bootstrap"]
    assert (sent.topic, sent.offset) == ("twisted-bootstrap", 0)
