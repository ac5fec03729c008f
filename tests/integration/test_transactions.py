"""Transactions against a real broker process: atomic commit and abort across partitions, read_committed, fencing."""

from __future__ import annotations

import io
import json
import threading
import time
import urllib.request
from contextlib import redirect_stderr, redirect_stdout

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import gatherResults

from mqbroker import errors
from mqbroker.client import Admin, Consumer, Message, Producer
from mqbroker.client.transaction_admin import TransactionAdmin
from mqbroker.cli import main
from mqbroker.client.twisted import TwistedConsumer, TwistedProducer
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import wait_for


def _read(broker: BrokerProcess, topic: str, isolation_level: str, expected: int, timeout_s: float = 10.0
          ) -> list[Message]:
    """Everything ``topic`` shows at ``isolation_level``, waiting up to ``timeout_s`` for ``expected`` records."""
    messages: list[Message] = []
    with Consumer(broker.bootstrap, topics=[topic], auto_offset_reset="earliest",
                  isolation_level=isolation_level) as consumer:
        for _ in range(int(timeout_s / 0.25)):
            messages += consumer.poll(timeout=0.25)
            if len(messages) >= expected:
                break
        messages += consumer.poll(timeout=0.5)  # nothing more may come
    return sorted(messages, key=lambda message: (message.partition, message.offset))


def _values(messages: list[Message]) -> list[bytes]:
    return sorted(message.value for message in messages if message.value is not None)


def test_committed_and_aborted_transactions_across_partitions(broker: BrokerProcess) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["orders"], partitions=3)
    with Producer(broker.bootstrap, transactional_id="writer", linger_ms=0) as producer:
        producer.init_transactions()
        with producer.transaction():
            for number in range(30):
                producer.send("orders", value=b"committed-%02d" % number, partition=number % 3)
        producer.begin_transaction()
        for number in range(30):
            producer.send("orders", value=b"aborted-%02d" % number, partition=number % 3)
        producer.flush()
        producer.abort_transaction()
        with producer.transaction():
            producer.send("orders", value=b"after", partition=1)
    committed = _read(broker, "orders", "read_committed", 31)
    assert _values(committed) == sorted([b"committed-%02d" % n for n in range(30)] + [b"after"])
    everything = _read(broker, "orders", "read_uncommitted", 61)
    assert len(everything) == 61  # the aborted records are in the log, only read_committed drops them


def test_read_committed_never_sees_an_open_transaction(broker: BrokerProcess) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["open"], partitions=1)
    with Producer(broker.bootstrap, transactional_id="slow", linger_ms=0) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("open", value=b"pending").result(10)
        with Producer(broker.bootstrap, linger_ms=0) as plain:
            plain.send("open", value=b"plain-after").result(10)  # behind the open transaction: held back too
        assert _read(broker, "open", "read_committed", 1, timeout_s=2.0) == []
        assert _values(_read(broker, "open", "read_uncommitted", 2)) == [b"pending", b"plain-after"]
        producer.commit_transaction()
    assert _values(_read(broker, "open", "read_committed", 2)) == [b"pending", b"plain-after"]


def test_a_new_incarnation_fences_the_zombie_and_aborts_its_transaction(broker: BrokerProcess) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["fenced"], partitions=2)
    zombie = Producer(broker.bootstrap, transactional_id="worker-1", linger_ms=0)
    zombie.init_transactions()
    zombie.begin_transaction()
    zombie.send("fenced", value=b"zombie", partition=0).result(10)
    with Producer(broker.bootstrap, transactional_id="worker-1", linger_ms=0) as successor:
        successor.init_transactions()  # aborts the zombie's open transaction
        with pytest.raises((errors.ProducerFencedError, errors.InvalidProducerEpochError, errors.InvalidTxnStateError)):
            zombie.send("fenced", value=b"late", partition=1)
            zombie.commit_transaction()
        with pytest.raises(errors.InvalidTxnStateError, match="close it"):
            zombie.begin_transaction()
        with successor.transaction():
            successor.send("fenced", value=b"successor", partition=0)
    zombie.close()
    assert _values(_read(broker, "fenced", "read_committed", 1)) == [b"successor"]


def test_illegal_calls_are_refused_client_side(broker: BrokerProcess) -> None:
    with Producer(broker.bootstrap, transactional_id="careful") as producer:
        with pytest.raises(errors.InvalidTxnStateError, match="init_transactions"):
            producer.begin_transaction()
        producer.init_transactions()
        with pytest.raises(errors.InvalidTxnStateError, match="begin_transaction"):
            producer.send("t", value=b"x")
        with pytest.raises(errors.InvalidTxnStateError, match="begin_transaction"):
            producer.commit_transaction()
    with Producer(broker.bootstrap) as plain:
        with pytest.raises(errors.InvalidTxnStateError, match="transactional_id"):
            plain.begin_transaction()


def test_sends_racing_commits_from_another_thread_are_committed_or_refused(broker: BrokerProcess) -> None:
    """A send from one thread while another commits lands in the transaction it was appended to, or is refused
    with ``InvalidTxnStateError``: never after its transaction's flush, never lost."""
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["raced"], partitions=3)
    accepted: list[bytes] = []
    futures = []
    stop = threading.Event()
    with Producer(broker.bootstrap, transactional_id="racer", linger_ms=1) as producer:
        producer.init_transactions()
        producer.begin_transaction()

        def send_until_stopped() -> None:
            number = 0
            while not stop.is_set():
                value = b"raced-%06d" % number
                number += 1
                try:
                    futures.append(producer.send("raced", value=value, partition=number % 3))
                except errors.InvalidTxnStateError:
                    continue
                accepted.append(value)

        sender = threading.Thread(target=send_until_stopped)
        sender.start()
        try:
            for _ in range(20):
                time.sleep(0.002)
                producer.commit_transaction()
                producer.begin_transaction()
        finally:
            stop.set()
            sender.join(10)
        producer.commit_transaction()
    assert all(future.exception(10) is None for future in futures)
    assert len(accepted) > 20
    assert _values(_read(broker, "raced", "read_committed", len(accepted))) == sorted(accepted)


@pytest_twisted.ensureDeferred
async def test_the_twisted_producer_commits_and_aborts_for_a_twisted_read_committed_consumer(
    broker: BrokerProcess,
) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["twisted"], partitions=2)
    producer = TwistedProducer(reactor, broker.bootstrap, transactional_id="twisted-writer", linger_ms=0)
    await producer.init_transactions()
    for committed in (False, True):
        producer.begin_transaction()
        await gatherResults([producer.send("twisted", value=b"%s-%d" % (b"kept" if committed else b"gone", number),
                                           partition=number % 2) for number in range(10)])
        await (producer.commit_transaction() if committed else producer.abort_transaction())
    with pytest.raises(errors.InvalidTxnStateError, match="begin_transaction"):
        await producer.commit_transaction()
    await producer.close()
    consumer = TwistedConsumer(reactor, broker.bootstrap, auto_offset_reset="earliest",
                               isolation_level="read_committed")
    await consumer.assign_topics(["twisted"])
    values: list[bytes] = []
    for _ in range(20):
        values += [message.value for message in await consumer.poll()]
        if len(values) >= 10:
            break
    await consumer.close()
    assert sorted(values) == sorted(b"kept-%d" % number for number in range(10))


def test_the_cli_lists_and_describes_an_ongoing_transaction(broker: BrokerProcess) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["watched"], partitions=2)
    with Producer(broker.bootstrap, transactional_id="watched-writer", linger_ms=0) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("watched", value=b"v", partition=1).result(10)
        listed = json.loads(_cli("transactions", "list", "--state", "Ongoing", "-o", "json", bootstrap=broker.bootstrap))
        assert [item["transactional_id"] for item in listed["transactions"]] == ["watched-writer"]
        described = json.loads(_cli("transactions", "describe", "watched-writer", "-o", "json",
                                    bootstrap=broker.bootstrap))
        assert (described["state"], described["partitions"]) == ("Ongoing", [["watched", 1]])
        assert described["start_ms"] > 0 and described["timeout_ms"] == 60_000
        producer.commit_transaction()
    described = json.loads(_cli("transactions", "describe", "watched-writer", "-o", "json", bootstrap=broker.bootstrap))
    assert described["state"] in ("CompleteCommit", "PrepareCommit")


def _metrics(broker: BrokerProcess) -> dict[str, float]:
    """The broker's ``/metrics`` as ``{"name{labels}": value}``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.ports['http']}/metrics") as reply:
        lines = reply.read().decode().splitlines()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in lines if line and line[0] != "#"}


def test_an_operator_aborts_a_hanging_transaction_and_the_metrics_show_it(broker: BrokerProcess) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["hung"], partitions=2)
    with Producer(broker.bootstrap, transactional_id="committer", linger_ms=0) as committer:
        committer.init_transactions()
        with committer.transaction():
            committer.send("hung", value=b"committed", partition=1)
    hanging = Producer(broker.bootstrap, transactional_id="gone-away", linger_ms=0)
    hanging.init_transactions()
    hanging.begin_transaction()
    hanging.send("hung", value=b"open", partition=0).result(10)
    # The commit was answered once its decision was durable; it counts as open until its markers are in.
    wait_for(lambda: _metrics(broker)["mqbroker_transactions_open"] == 1, timeout_s=15,
             what="the committed transaction's markers written")
    before = _metrics(broker)
    assert before["mqbroker_transactions_open"] == 1
    assert before['mqbroker_partition_stable_lag_records{partition="0",topic="hung"}'] == 1
    assert before["mqbroker_transactions_committed_total"] >= 1
    assert before["mqbroker_transaction_commit_latency_seconds_count"] >= 1
    assert before['mqbroker_transaction_commit_latency_seconds_bucket{le="+Inf"}'] >= 1

    aborted = json.loads(_cli("transactions", "abort", "gone-away", "-o", "json", bootstrap=broker.bootstrap))
    assert aborted["state"] == "Empty" and aborted["partitions"] == []
    with pytest.raises(errors.BrokerError):  # nothing open to abort any more
        TransactionAdmin(broker.bootstrap).abort("gone-away")
    # The abort is answered once its decision is durable; its markers may still be on their way (it counts as
    # open until they are in), so the gauges are waited for, with a deadline.
    def settled(metrics: dict[str, float]) -> bool:
        return metrics["mqbroker_transactions_open"] == 0 and not any(
            name.startswith("mqbroker_partition_stable_lag_records{") for name in metrics)

    wait_for(lambda: settled(_metrics(broker)), timeout_s=15, what="no open transaction and no stable lag")
    assert _metrics(broker)["mqbroker_transactions_aborted_total"] >= 1
    assert _values(_read(broker, "hung", "read_committed", 1)) == [b"committed"]  # read_committed moved on
    with pytest.raises((errors.ProducerFencedError, errors.InvalidProducerEpochError, errors.InvalidTxnStateError)):
        hanging.commit_transaction()  # the producer that began it is fenced
    hanging.close()


def _cli(*arguments: str, bootstrap: str) -> str:
    """Standard output of an ``mqbroker`` command that must succeed."""
    output, failures = io.StringIO(), io.StringIO()
    with redirect_stdout(output), redirect_stderr(failures):
        code = main([*arguments, "--bootstrap", bootstrap])
    assert code == 0, failures.getvalue()
    return output.getvalue()


def test_send_many_inside_transactions_commits_and_aborts_whole_runs(broker: BrokerProcess) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["bulk-orders"], partitions=2)
    with Producer(broker.bootstrap, transactional_id="bulk-writer", batch_size=16_384) as producer:
        producer.init_transactions()
        with producer.transaction():
            committed = producer.send_many("bulk-orders", [b"committed-%04d" % n for n in range(3_000)])
        producer.begin_transaction()
        aborted = producer.send_many("bulk-orders", [b"aborted"] * 500)
        producer.flush()
        producer.abort_transaction()
        assert committed.counts(10) == (3_000, 0) and aborted.counts(10) == (500, 0)
    visible = _read(broker, "bulk-orders", "read_committed", 3_000)
    assert _values(visible) == [b"committed-%04d" % n for n in range(3_000)]


def test_the_native_producer_speaks_transaction_version_2(broker: BrokerProcess) -> None:
    """No AddPartitionsToTxn: each produce adds its partition at the leader; every commit and abort moves the
    producer to its next epoch (tests/unit/core/test_transactions.py: a batch of the previous epoch is refused)."""
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["v2"], partitions=3)
    with TransactionAdmin(broker.bootstrap) as transactions, \
            Producer(broker.bootstrap, transactional_id="v2-writer", linger_ms=0) as producer:
        producer.init_transactions()
        first_epoch = transactions.describe("v2-writer").producer_epoch
        producer.begin_transaction()
        producer.send("v2", value=b"committed-0", partition=0).result(10)
        producer.send("v2", value=b"committed-2", partition=2).result(10)
        ongoing = transactions.describe("v2-writer")
        assert (ongoing.state, ongoing.partitions) == ("Ongoing", (("v2", 0), ("v2", 2)))
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send("v2", value=b"aborted", partition=1).result(10)
        producer.abort_transaction()
        with producer.transaction():
            producer.send("v2", value=b"committed-1", partition=1)
        assert transactions.describe("v2-writer").producer_epoch == first_epoch + 3
    assert _values(_read(broker, "v2", "read_committed", 3)) == [b"committed-0", b"committed-1", b"committed-2"]
    assert len(_read(broker, "v2", "read_uncommitted", 4)) == 4
