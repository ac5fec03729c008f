"""Data-driven transaction coordinator scripts: ``tests/interaction/testdata/transactions_*.txt``.

Same format as the group scripts (commands, ``----``, what came out; ``MQBROKER_REWRITE=1``
rewrites the expected parts). Every request is named ``rN`` by its order; its reply appears
when the coordinator gives it (after the write it waits for, or after the transaction it was
parked behind). Writes stay in flight until ``written``; markers until ``markers``.

  coordinator [epoch=N] [timeout_max=ms] [expiration=ms] [check=ms] [linger=ms]   a fresh coordinator, clock at 0
                                         (``linger``: completion_linger_ms, 0 unless given)
  time <ms>                              move the clock and run ``tick`` (prints ``next deadline``)
  init <id> [timeout=ms] [pid=N]         InitProducerId (``pid``: the fresh producer id it may use)
  add <id> <topic>-<partition>... [epoch=N] [pid=N]   AddPartitionsToTxn (the id's own pid/epoch by default)
  offsets <id> <group> [epoch=N]         AddOffsetsToTxn
  verify <id> <topic>-<partition>... [epoch=N]        a partition leader's verification (KIP-890)
  end <id> commit|abort [epoch=N]        EndTxn
  written [<id>...] [fail]               the writes in flight (of those ids) became durable (or failed)
  markers [<id>...]                      the markers asked for (of those ids) are all written
  describe <id> | list
  failover [epoch=N]                     a new coordinator replays every durable record
"""

from __future__ import annotations

import itertools
import pathlib

import pytest

from mqbroker.errors import BrokerError, NotCoordinatorError
from mqbroker.groups.model import TopicPartition
from mqbroker.transactions.coordinator import TransactionCoordinator
from mqbroker.transactions.log_records import TransactionLogRecord, decode_key, decode_value, replay
from mqbroker.transactions.messages import (
    AddOffsetsRequest,
    AddPartitionsRequest,
    EndTxnRequest,
    InitTransactionsRequest,
    ProducerIdAndEpoch,
    TransactionConfig,
)
from tests.interaction.test_group_scripts import TESTDATA, options, partition_list, replay_script

SCRIPTS = sorted(TESTDATA.glob("transactions_*.txt"))


def topic_partitions(words: list[str]) -> frozenset[TopicPartition]:
    """``events-0 events-1`` -> partitions."""
    return frozenset(TopicPartition(topic, int(number)) for topic, _, number in (w.rpartition("-") for w in words))


class Script:
    """Drives one coordinator through script commands and renders what came out."""

    def __init__(self) -> None:
        self.settings: dict[str, str] = {}
        self.log: list[TransactionLogRecord] = []
        self.now_ms = 0
        self.producers: dict[str, ProducerIdAndEpoch] = {}
        self.in_flight: dict[str, list[TransactionLogRecord]] = {}
        self.markers: dict[str, str] = {}
        self.names = (f"r{number}" for number in itertools.count(1))
        self.labels: dict[str, str] = {}
        self.new_coordinator({})

    def new_coordinator(self, named: dict[str, str], replayed: bool = False) -> None:
        if not replayed:
            self.settings = named
        config = TransactionConfig(
            transaction_timeout_ms_max=int(self.settings.get("timeout_max", "900000")),
            transactional_id_expiration_ms=int(self.settings.get("expiration", "604800000")),
            expiration_check_interval_ms=int(self.settings.get("check", "3600000")),
            completion_linger_ms=int(self.settings.get("linger", "0")),
        )
        self.coordinator = TransactionCoordinator(
            config=config, coordinator_epoch=int(named.get("epoch", self.settings.get("epoch", "0"))),
            offsets_partition_of=lambda group: TopicPartition("__consumer_offsets", len(group) % 4),
            state=replay(self.log), now_ms=self.now_ms,
        )

    def run(self, command: str) -> list[str]:
        verb, *words = command.split()
        positional, named = options(words)
        try:
            lines = getattr(self, "do_" + verb)(positional, named)
        except BrokerError as error:
            lines = [f"error {error.code.name}: {error.message}"]
        return lines + self.drain()

    def drain(self) -> list[str]:
        lines = []
        ready = self.coordinator.ready()
        for reply in ready.replies:
            label = f"reply {reply.request_key} ({self.labels.pop(str(reply.request_key))})"
            if reply.error is not None:
                lines.append(f"{label}: error {reply.error.code.name}: {reply.error.message}")
            elif isinstance(reply.response, ProducerIdAndEpoch):
                transactional_id = self.labels_id(label)
                self.producers[transactional_id] = reply.response
                lines.append(f"{label}: producer {reply.response.producer_id} epoch {reply.response.producer_epoch}")
            else:
                lines.append(f"{label}: ok")
        for transactional_id, record in ready.writes:
            assert isinstance(record, TransactionLogRecord)
            self.in_flight.setdefault(transactional_id, []).append(record)
            lines.append("write " + describe_record(record))
        for request in ready.markers:
            marker = request.marker
            text = (f"{'COMMIT' if marker.committed else 'ABORT'} producer {marker.producer_id} epoch "
                    f"{marker.producer_epoch} coordinator {marker.coordinator_epoch} "
                    f"{partition_list(marker.partitions)}")
            self.markers[request.transactional_id] = text
            lines.append(f"markers {request.transactional_id}: {text}")
        return lines

    @staticmethod
    def labels_id(label: str) -> str:
        return label.split("(")[1].split()[1].rstrip(")")

    def request_key(self, label: str) -> str:
        name = next(self.names)
        self.labels[name] = label
        return name

    def identity(self, transactional_id: str, named: dict[str, str]) -> tuple[int, int]:
        known = self.producers.get(transactional_id, ProducerIdAndEpoch(producer_id=-1, producer_epoch=-1))
        return int(named.get("pid", known.producer_id)), int(named.get("epoch", known.producer_epoch))

    def do_coordinator(self, positional: list[str], named: dict[str, str]) -> list[str]:
        self.__init__()  # type: ignore[misc]
        self.new_coordinator(named)
        return []

    def do_failover(self, positional: list[str], named: dict[str, str]) -> list[str]:
        lost = [self.labels.pop(str(key)) for key in self.coordinator.pending_request_keys()]
        self.in_flight.clear()
        self.markers.clear()
        self.new_coordinator(named, replayed=True)
        lines = [f"replayed {len(self.log)} records"]
        lines += [f"answered NOT_COORDINATOR: {label}" for label in lost]
        return lines

    def do_time(self, positional: list[str], named: dict[str, str]) -> list[str]:
        self.now_ms = int(positional[0])
        self.coordinator.tick(self.now_ms)
        return [f"next deadline {self.coordinator.next_deadline_ms()}"]

    def do_init(self, positional: list[str], named: dict[str, str]) -> list[str]:
        transactional_id = positional[0]
        request = InitTransactionsRequest(transactional_id=transactional_id,
                                          transaction_timeout_ms=int(named.get("timeout", "60000")))
        fresh = int(named["pid"]) if "pid" in named else None
        key = self.request_key(f"init {transactional_id}")
        try:
            self.coordinator.init_producer_id(request, key, self.now_ms, fresh)
        except BrokerError:
            self.labels.pop(key)
            raise
        return []

    def _call(self, label: str, call) -> list[str]:  # type: ignore[no-untyped-def]
        key = self.request_key(label)
        try:
            call(key)
        except BrokerError:
            self.labels.pop(key)
            raise
        return []

    def do_add(self, positional: list[str], named: dict[str, str]) -> list[str]:
        transactional_id, *partitions = positional
        producer_id, epoch = self.identity(transactional_id, named)
        request = AddPartitionsRequest(transactional_id=transactional_id, producer_id=producer_id,
                                       producer_epoch=epoch, partitions=topic_partitions(partitions))
        return self._call(f"add {transactional_id}",
                          lambda key: self.coordinator.add_partitions(request, key, self.now_ms))

    def do_offsets(self, positional: list[str], named: dict[str, str]) -> list[str]:
        transactional_id, group = positional
        producer_id, epoch = self.identity(transactional_id, named)
        request = AddOffsetsRequest(transactional_id=transactional_id, producer_id=producer_id, producer_epoch=epoch,
                                    group_id=group)
        return self._call(f"offsets {transactional_id}",
                          lambda key: self.coordinator.add_offsets(request, key, self.now_ms))

    def do_end(self, positional: list[str], named: dict[str, str]) -> list[str]:
        transactional_id, verb = positional
        producer_id, epoch = self.identity(transactional_id, named)
        request = EndTxnRequest(transactional_id=transactional_id, producer_id=producer_id, producer_epoch=epoch,
                                committed=verb == "commit")
        return self._call(f"end {transactional_id}", lambda key: self.coordinator.end_txn(request, key, self.now_ms))

    def do_verify(self, positional: list[str], named: dict[str, str]) -> list[str]:
        transactional_id, *partitions = positional
        producer_id, epoch = self.identity(transactional_id, named)
        self.coordinator.verify(AddPartitionsRequest(transactional_id=transactional_id, producer_id=producer_id,
                                                     producer_epoch=epoch, partitions=topic_partitions(partitions),
                                                     verify_only=True))
        return ["verified"]

    def do_written(self, positional: list[str], named: dict[str, str]) -> list[str]:
        ids = [word for word in positional if word != "fail"] or sorted(self.in_flight)
        failed = "fail" in positional
        lines = []
        for transactional_id in ids:
            records = self.in_flight.pop(transactional_id)
            if not failed:
                self.log.extend(records)
            error = NotCoordinatorError("the append failed") if failed else None
            self.coordinator.written(transactional_id, self.now_ms, error)
            lines += self.drain()
        return lines

    def do_markers(self, positional: list[str], named: dict[str, str]) -> list[str]:
        ids = positional or sorted(self.markers)
        lines = []
        for transactional_id in ids:
            del self.markers[transactional_id]
            self.coordinator.markers_written(transactional_id, self.now_ms)
            lines += self.drain()
        return lines

    def do_describe(self, positional: list[str], named: dict[str, str]) -> list[str]:
        described = self.coordinator.describe(positional[0])
        return [f"{described.transactional_id} {described.state.value} producer {described.producer_id} "
                f"epoch {described.producer_epoch} timeout {described.timeout_ms} start {described.start_ms} "
                f"{partition_list(described.partitions)}"]

    def do_list(self, positional: list[str], named: dict[str, str]) -> list[str]:
        return [f"{item.transactional_id} {item.state.value} producer {item.producer_id}"
                for item in self.coordinator.list_transactions()] or ["no transactional ids"]


def describe_record(record: TransactionLogRecord) -> str:
    """One ``__transaction_state`` record, readable."""
    transactional_id = decode_key(record.key)
    if record.value is None:
        return f"{transactional_id}: tombstone"
    metadata = decode_value(transactional_id, record.value)
    return (f"{transactional_id}: {metadata.state.value} producer {metadata.producer_id} epoch "
            f"{metadata.producer_epoch} start {metadata.start_ms} {partition_list(metadata.partitions)}")


@pytest.mark.parametrize("path", SCRIPTS, ids=[path.stem for path in SCRIPTS])
def test_transaction_script(path: pathlib.Path) -> None:
    """Replay a script; its output must match (or is rewritten under MQBROKER_REWRITE=1)."""
    replay_script(path, Script().run)


def test_there_are_transaction_scripts() -> None:
    """The scripts exist (a missing testdata directory must not pass silently)."""
    assert len(SCRIPTS) >= 4
