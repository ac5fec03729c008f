"""``Consumer.poll_values`` against a real broker: the values ``poll`` would give, positions and commits that a later
``poll`` continues from, and under read_committed no aborted record and no marker."""

from __future__ import annotations

from mqbroker.client import Admin, Consumer, FetchedValues, Producer
from tests.integration.brokerprocess import BrokerProcess


def _poll_values(consumer: Consumer, expected: int, with_keys: bool = False) -> list[FetchedValues]:
    """``poll_values`` until ``expected`` values came (or 40 polls), then once more: nothing more may come."""
    fetched: list[FetchedValues] = []
    for _ in range(40):
        fetched += consumer.poll_values(timeout=0.25, with_keys=with_keys)
        if sum(len(item.values) for item in fetched) >= expected:
            break
    return fetched + consumer.poll_values(timeout=0.5, with_keys=with_keys)


def test_values_offsets_and_commits_continue_where_poll_would(broker: BrokerProcess) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["plain"], partitions=2)
    with Producer(broker.bootstrap, linger_ms=0) as producer:
        for number in range(40):
            producer.send("plain", key=b"k%02d" % number, value=b"v%02d" % number, partition=number % 2)
        producer.flush()
    with Consumer(broker.bootstrap, group_id="values", topics=["plain"], auto_offset_reset="earliest",
                  enable_auto_commit=False) as consumer:
        fetched = _poll_values(consumer, 40, with_keys=True)
        by_partition: dict[int, list] = {}
        for item in fetched:
            assert item.topic == "plain" and item.first_offset == len(by_partition.get(item.partition, []))
            by_partition.setdefault(item.partition, []).extend(item.values)
        assert by_partition == {partition: [(b"k%02d" % n, b"v%02d" % n) for n in range(partition, 40, 2)]
                                for partition in (0, 1)}
        assert {item.partition: item.next_offset for item in fetched} == {0: 20, 1: 20}
        assert consumer.position(("plain", 0)) == consumer.position(("plain", 1)) == 20
        consumer.commit()
    with Producer(broker.bootstrap, linger_ms=0) as producer:
        producer.send("plain", value=b"later", partition=0)
        producer.flush()
    with Consumer(broker.bootstrap, group_id="values", topics=["plain"], auto_offset_reset="earliest",
                  enable_auto_commit=False) as consumer:  # the commit stands: a poll continues after the last value
        messages = []
        for _ in range(40):
            messages += consumer.poll(timeout=0.25)
            if messages:
                break
        assert [(message.partition, message.offset, message.value) for message in messages] == [(0, 20, b"later")]


def test_read_committed_values_hold_no_aborted_record(broker: BrokerProcess) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["orders"], partitions=1)
    with Producer(broker.bootstrap, transactional_id="writer", linger_ms=0) as producer:
        producer.init_transactions()
        with producer.transaction():
            for number in range(10):
                producer.send("orders", value=b"committed-%02d" % number)
        producer.begin_transaction()
        for number in range(10):
            producer.send("orders", value=b"aborted-%02d" % number)
        producer.flush()
        producer.abort_transaction()
        with producer.transaction():
            producer.send("orders", value=b"after")
    # offsets: 0-9 committed, 10 its marker, 11-20 aborted, 21 the abort marker, 22 "after", 23 its marker
    with Consumer(broker.bootstrap, topics=["orders"], auto_offset_reset="earliest",
                  isolation_level="read_committed") as consumer:
        fetched = _poll_values(consumer, 11)
        values = [value for item in fetched for value in item.values]
        assert values == [b"committed-%02d" % n for n in range(10)] + [b"after"]
        assert fetched[0].first_offset == 0 and fetched[-1].next_offset == 24
        assert consumer.position(("orders", 0)) == 24
    with Consumer(broker.bootstrap, topics=["orders"], auto_offset_reset="earliest",
                  isolation_level="read_uncommitted") as consumer:
        assert len([value for item in _poll_values(consumer, 21) for value in item.values]) == 21
