"""Where a 1,000-record transaction's time goes: the broker's durable rounds joined with the client's phases.

Run ``python benchmarks/transactions_timeline.py [--transactions N] [--records R] [--runs N] [--json]`` (from a
source tree, with it on ``PYTHONPATH``). Each run starts a broker (``twistd mqbroker`` on free ports, a fresh data
directory) whose transaction path is time-stamped by wrappers installed before it starts (CLOCK_MONOTONIC, the
client's clock): the native listener's Produce and EndTxn reads and replies, the appends of its records (not markers) to the benchmark's topic,
the coordinator's ``__transaction_state`` writes (by the states they record), the markers' appends and the flusher's
rounds. One long-lived version 2 producer (``linger_ms=5``, as ``transactions_bench.py``) runs 5 unmeasured then
``--transactions`` transactions of ``--records`` 100-byte records over 3 partitions and stamps its phases: the send
loop, the flush, ``commit_transaction`` (EndTxn).

Per transaction it finds the four durable rounds a transaction waits for in series (docs/transactions.md): the
previous transaction's markers (M), the completion written with this transaction's Ongoing record (C), this
transaction's last data (D), its decision (P); and prints, as medians in ms from ``begin_transaction``, when each
was appended and durable, when the first produce was read, the loop's end, and how long the first produce waited
for M and C at the partition leader (C durable minus the first produce read, 0 if C was first). If that wait is 0
and D and P make up the commit, M and C overlap the send loop and only the commit's two rounds are in series; if
not, the previous transaction's tail is on this one's path. The wrappers cost the broker some CPU: compare steps,
not totals, with ``transactions_bench.py``.
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.integration.brokerprocess import TWISTD, BrokerProcess

TOPIC = "timeline"
PARTITIONS = 3
VALUE = b"x" * 100
#: The milestones printed, in order (ms from ``begin_transaction``).
MILESTONES = ("markers appended", "M durable", "first produce read", "C written", "C durable", "first data appended",
              "loop end", "last data appended", "D durable", "EndTxn read", "P durable", "commit returns")


# -- the broker child: wrappers, then twistd --------------------------------------------------------------

def run_traced_broker(out_path: str, twistd_arguments: list[str]) -> None:
    """Install the time-stamping wrappers, run ``twistd``, write the events to ``out_path`` as it stops."""
    from mqbroker import service
    from mqbroker.core import produce, txn_markers
    from mqbroker.durability import flusher
    from mqbroker.protocols.native import server
    from mqbroker.transactions import log_records
    from mqbroker.transactions import service as transaction_service

    now = time.monotonic_ns
    events: list[Any] = []

    def wrap(owner: Any, name: str, before: Any) -> None:
        original = getattr(owner, name)

        def wrapper(self: Any, *arguments: Any, **keywords: Any) -> Any:
            before(self, *arguments, **keywords)
            return original(self, *arguments, **keywords)

        setattr(owner, name, wrapper)

    def states(records: list[Any]) -> list[str]:
        return [log_records.decode_value("", record.value).state.value for record in records if record.value]

    wrap(server.NativeSession, "_start", lambda self, header, request: events.append(
        ("request", now(), header.api_key.name)))
    wrap(server.NativeSession, "_reply", lambda self, response, header, *_: events.append(
        ("reply", now(), header.api_key.name)))
    wrap(produce.ProduceService, "_append", lambda self, topic, *_, markers_allowed=False, **__: (
        topic == TOPIC and not markers_allowed and events.append(("append", now()))))
    wrap(transaction_service.TransactionService, "_write", lambda self, ids, records: events.append(
        ("write", now(), states(records))))
    wrap(txn_markers.MarkerAppender, "write", lambda self, markers: events.append(("markers", now())))
    wrap(flusher.Flusher, "_start_round", lambda self, *_, **__: events.append(("round", now())))
    wrap(flusher.Flusher, "_round_done", lambda self, synced: events.append(("synced", now())))
    wrap(service.BrokerService, "stopService", lambda self: Path(out_path).write_text(json.dumps(events)))
    from twisted.scripts.twistd import run

    sys.argv = ["twistd", *twistd_arguments]
    run()


@dataclasses.dataclass
class TracedBroker(BrokerProcess):
    """A ``BrokerProcess`` run through ``run_traced_broker``: its events go to ``events_path`` as it stops."""

    events_path: Path = Path("events.json")

    def command(self) -> list[str]:
        return [sys.executable, __file__, "--broker-child", str(self.events_path), *super().command()[len(TWISTD):]]


# -- the client --------------------------------------------------------------------------------------------

def run_client(bootstrap: str, transactions: int, records: int) -> list[tuple[int, int, int, int]]:
    """Per measured transaction (ns): begin, the send loop's end, the flush's end, ``commit_transaction``'s end."""
    from mqbroker.client import Admin, Producer

    with Admin(bootstrap) as admin:
        admin.create_topics([TOPIC], partitions=PARTITIONS)
    stamps = []
    with Producer(bootstrap, transactional_id="timeline", linger_ms=5) as producer:
        producer.init_transactions()
        for number in range(5 + transactions):
            began = time.monotonic_ns()
            producer.begin_transaction()
            for index in range(records):
                producer.send(TOPIC, value=VALUE, partition=index % PARTITIONS)
            looped = time.monotonic_ns()
            producer.flush()
            flushed = time.monotonic_ns()
            producer.commit_transaction()
            if number >= 5:
                stamps.append((began, looped, flushed, time.monotonic_ns()))
    return stamps


# -- the join ----------------------------------------------------------------------------------------------

class _Events:
    """The broker's events by kind, in time order, with the look-ups the join needs."""

    def __init__(self, events: list[Any]) -> None:
        self.times: dict[str, list[int]] = {}
        self.writes: list[tuple[int, list[str]]] = []
        for kind, at, *detail in events:
            name = f"{kind} {detail[0]}" if kind in ("request", "reply") else kind
            self.times.setdefault(name, []).append(at)
            if kind == "write":
                self.writes.append((at, detail[0]))

    def first(self, kind: str, after: int, before: int | None = None) -> int | None:
        """The first event of ``kind`` at or after ``after`` (and before ``before``)."""
        times = self.times.get(kind, [])
        index = bisect.bisect_left(times, after)
        found = times[index] if index < len(times) else None
        return None if found is None or (before is not None and found >= before) else found

    def last(self, kind: str, before: int, after: int) -> int | None:
        """The last event of ``kind`` before ``before`` and at or after ``after``."""
        times = self.times.get(kind, [])
        index = bisect.bisect_left(times, before) - 1
        return times[index] if index >= 0 and times[index] >= after else None

    def durable(self, appended: int | None) -> int | None:
        """When the round covering an append made at ``appended`` ended (the first round started after it)."""
        started = None if appended is None else self.first("round", appended)
        return None if started is None else self.first("synced", started)

    def write_of(self, state: str, after: int) -> int | None:
        """The first ``__transaction_state`` write at or after ``after`` whose records end in ``state``."""
        return next((at for at, states in self.writes if at >= after and states and states[-1] == state), None)


def milestones(events: list[Any], stamps: list[tuple[int, int, int, int]]) -> list[dict[str, float]]:
    """Per transaction, each milestone's time in ms from its ``begin_transaction`` (those found)."""
    joined = _Events(events)
    found = []
    for number, (began, looped, _, committed) in enumerate(stamps):
        previous_end = stamps[number - 1][3] if number else began - 10**9
        previous_decision = None
        for written, states in joined.writes:
            if previous_end - 10**9 <= written < began and states and states[-1] == "PrepareCommit":
                previous_decision = written
        at: dict[str, int | None] = {"loop end": looped, "commit returns": committed}
        markers = None if previous_decision is None else joined.first("markers", previous_decision)
        at["markers appended"] = markers
        at["M durable"] = joined.durable(markers)
        at["first produce read"] = joined.first("request PRODUCE", began, committed)
        at["C written"] = joined.write_of("Ongoing", began - 10**9 if markers is None else markers)
        at["C durable"] = joined.durable(at["C written"])
        at["first data appended"] = joined.first("append", began, committed)
        endtxn = joined.last("request END_TXN", committed, began)
        at["EndTxn read"] = endtxn
        at["last data appended"] = None if endtxn is None else joined.last("append", endtxn, began)
        at["D durable"] = joined.durable(at["last data appended"])
        decision = None if endtxn is None else joined.write_of("PrepareCommit", endtxn)
        at["P durable"] = joined.durable(decision)
        found.append({name: (moment - began) / 1e6 for name, moment in at.items() if moment is not None})
    return found


def measure(transactions: int, records: int) -> dict[str, Any]:
    """One run: a traced broker, the long-lived producer, the join; medians per milestone and phase."""
    work = Path(tempfile.mkdtemp(prefix="txn-timeline-"))
    broker = TracedBroker(work / "data", events_path=work / "events.json")
    broker.start(timeout_s=60)
    try:
        stamps = run_client(broker.bootstrap, transactions, records)
    finally:
        broker.stop(30)
    events = json.loads((work / "events.json").read_text())
    shutil.rmtree(work, ignore_errors=True)
    per_transaction = milestones(events, stamps)
    medians = {name: round(statistics.median(values), 2) for name in MILESTONES
               if (values := [found[name] for found in per_transaction if name in found])}
    waits = [max(0.0, found["C durable"] - found["first produce read"]) for found in per_transaction
             if "C durable" in found and "first produce read" in found]
    phases = {"send loop": [(looped - began) / 1e6 for began, looped, _, _ in stamps],
              "flush": [(flushed - looped) / 1e6 for _, looped, flushed, _ in stamps],
              "EndTxn": [(committed - flushed) / 1e6 for _, _, flushed, committed in stamps]}
    return {"transactions": len(stamps), "milestones_ms": medians,
            "first_produce_waits_for_m_and_c_ms": round(statistics.median(waits), 2) if waits else None,
            "phases_ms": {name: round(statistics.median(values), 2) for name, values in phases.items()},
            "load_average": round(os.getloadavg()[0], 1)}


def main() -> None:
    """Parse the options, run, print each run's medians (or JSON)."""
    if len(sys.argv) > 2 and sys.argv[1] == "--broker-child":
        run_traced_broker(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=40)
    parser.add_argument("--records", type=int, default=1_000, help="records per transaction [default: 1000]")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    runs = [measure(arguments.transactions, arguments.records) for _ in range(arguments.runs)]
    if arguments.json:
        print(json.dumps(runs, indent=2))
        return
    for number, run in enumerate(runs, 1):
        phases = run["phases_ms"]
        print(f"run {number}: {run['transactions']} transactions of {arguments.records} records, load average "
              f"{run['load_average']}; send loop {phases['send loop']}, flush {phases['flush']}, EndTxn "
              f"{phases['EndTxn']} ms (medians); the first produce waited {run['first_produce_waits_for_m_and_c_ms']} "
              "ms for M and C")
        for name, median in run["milestones_ms"].items():
            print(f"  {name:<22} {median:>8.2f} ms")


if __name__ == "__main__":
    main()
